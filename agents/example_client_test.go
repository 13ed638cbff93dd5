package agents_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// A writer claims a section, writes it in a transaction that cites a
// material (so an editor changing that material waits for it), and counts
// its work. It needs a running coordinator (`coagent serve`), so it is
// compiled but not run here.
func ExampleClient() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	c, err := agents.Connect(ctx, nc, "writer-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	// Claim: exactly one writer wins; the others see ErrPreconditionFailed.
	_, err = c.Apply(ctx, intents.Apply("claim").
		Set("report.sections.intro.owner", c.Name()).
		Pre("state.report.sections.intro.owner == nil"))
	if errors.Is(err, agents.ErrPreconditionFailed) {
		fmt.Println("someone else writes the intro")
		return
	} else if err != nil {
		fmt.Println(err)
		return
	}

	// Write: the transaction reads the material it cites and holds the
	// section; its lease is renewed in the background while the text is
	// being written.
	tx, err := c.Propose(ctx, intents.Propose("write_intro").
		Read("materials.m1").
		Write("report.sections.intro.text", intents.OpSet).
		Lease(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	text := "CoAgent decides every intent against the state and the work in flight."
	if _, err := tx.Commit(ctx, intents.Apply("write_intro").
		Set("report.sections.intro.text", text).
		Post("len(state.report.sections.intro.text) > 0")); err != nil {
		fmt.Println(err)
		tx.Abort(ctx)
		return
	}

	// Count: read-modify-write that never loses an update.
	if _, err := agents.UpdateJSON(ctx, c, "stats.sections_written", func(n float64, _ bool) (float64, error) {
		return n + 1, nil
	}); err != nil {
		fmt.Println(err)
	}
}

// Follow every change under report from revision 0, then live.
func ExampleClient_Watch() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	c, err := agents.Connect(ctx, nc, "reader")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	w, err := c.Watch(ctx, "report", 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	for ch := range w.Changes() {
		for _, wr := range ch.Writes {
			fmt.Printf("rev %d: %s %s %s\n", ch.Rev, ch.Agent, wr.Op, wr.Path)
		}
	}
	fmt.Println("watch ended:", w.Err())
}

// Store and forward: an indexer publishes its count and moves on; it
// collects the decision later, here or from its next run (the id is all
// it keeps). Publish returns once JetStream has stored the intent, whether
// or not a coordinator runs at the time; Decision finds a decision made
// while the agent was away in the coordinator's record.
func ExampleClient_Publish() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	c, err := agents.Connect(ctx, nc, "indexer")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	in, err := intents.Apply("count_pages").Incr("stats.pages_indexed", 120).Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	id, err := c.Publish(ctx, in)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("stored", id)

	// … later, or in another run of the same agent:
	d, err := c.Decision(ctx, id)
	if err != nil {
		fmt.Println("no decision yet:", err)
		return
	}
	fmt.Println(d.Outcome, "at revision", d.Rev)
}
