// Command quickstart is the Go SDK's tour in one program, the one the
// README quotes: an agent claims a section, writes it in a transaction,
// counts its work without losing an update, follows the changes of the
// report, and publishes an intent to be decided whenever a coordinator
// gets to it. Run it against a coordinator:
//
//	go run ./cmd/coagent serve &
//	go run ./examples/go/quickstart
//
// A second run finds the section claimed and says so.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

func main() {
	url := flag.String("nats", nats.DefaultURL, "the NATS server a coordinator serves on")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, *url, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, out io.Writer) error {
	// docs:begin connect
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	defer nc.Close()
	c, err := agents.Connect(ctx, nc, "writer-1")
	if err != nil {
		return err
	}
	defer c.Close()
	// docs:end connect

	// docs:begin tour
	// Claim: exactly one writer wins; the others get ErrPreconditionFailed.
	d, err := c.Apply(ctx, intents.Apply("claim").
		Set("report.sections.intro.owner", c.Name()).
		Pre("state.report.sections.intro.owner == nil"))
	if errors.Is(err, agents.ErrPreconditionFailed) {
		fmt.Fprintln(out, "someone else writes the intro:", d.Detail)
		return nil
	} else if err != nil {
		return err
	}
	fmt.Fprintln(out, "claim:", d.Outcome, "at rev", d.Rev)

	// Write in a transaction that cites a material: an editor changing it
	// waits for the commit. The lease is renewed in the background.
	tx, err := c.Propose(ctx, intents.Propose("write_intro").
		Read("materials.m1").
		Write("report.sections.intro.text", intents.OpSet))
	if err != nil {
		return err
	}
	d, err = tx.Commit(ctx, intents.Apply("write_intro").
		Set("report.sections.intro.text", "Agents that share state need one place that decides.").
		Post("len(state.report.sections.intro.text) > 0"))
	if err != nil {
		tx.Abort(ctx)
		return err
	}
	fmt.Fprintln(out, "commit:", d.Outcome, "at rev", d.Rev)
	written := d.Rev

	// Read-modify-write that never loses an update.
	d, err = agents.UpdateJSON(ctx, c, "stats.sections", func(n float64, _ bool) (float64, error) {
		return n + 1, nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "count:", d.Outcome, "at rev", d.Rev)
	// docs:end tour

	// Every change under report from rev 0, then live, with no gaps (here
	// until the commit's). A value is JSON text.
	w, err := c.Watch(ctx, "report", 0)
	if err != nil {
		return err
	}
	for ch := range w.Changes() {
		for _, wr := range ch.Writes {
			fmt.Fprintf(out, "rev %d: %s %s %s = %s\n", ch.Rev, ch.Agent, wr.Op, wr.Path, wr.Value)
		}
		if ch.Rev >= written {
			break
		}
	}
	w.Stop()
	if err := w.Err(); err != nil {
		return err
	}

	// Store and forward: stored now, decided whenever a coordinator gets to
	// it; the id is all the agent keeps to collect the decision later.
	in, err := intents.Apply("count_pages").Incr("stats.pages_indexed", 120).Build()
	if err != nil {
		return err
	}
	id, err := c.Publish(ctx, in)
	if err != nil {
		return err
	}
	if d, err = c.Decision(ctx, id); err != nil {
		return err
	}
	fmt.Fprintln(out, "published count:", d.Outcome, "at rev", d.Rev)

	// A consistent read of some paths at one revision.
	st, err := c.Read(ctx, "report.sections.intro.owner", "stats.pages_indexed")
	if err != nil {
		return err
	}
	for _, p := range []string{"report.sections.intro.owner", "stats.pages_indexed"} {
		v := st.Values[p]
		fmt.Fprintf(out, "%s = %s (version %d)\n", p, v.Value, v.Version)
	}
	return nil
}
