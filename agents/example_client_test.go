package agents_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// startCoordinator runs in this process what `coagent serve` runs: a NATS
// server with JetStream on a free loopback port and a coordinator on it,
// both in a temporary directory. It returns an agent's connection to the
// server and the function that closes it, stops both and removes the
// directory. The examples use it
// so that they run; an agent of a real team connects to a server that
// already runs a coordinator (nats.Connect(url)) and needs none of this.
func startCoordinator() (agent *nats.Conn, stop func(), err error) {
	dir, err := os.MkdirTemp("", "coagent-example-")
	if err != nil {
		return nil, nil, err
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: filepath.Join(dir, "jetstream"), NoLog: true, NoSigs: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		os.RemoveAll(dir)
		return nil, nil, errors.New("nats server did not start")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		ns.Shutdown()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	svc, err := coordinator.Start(context.Background(), nc, filepath.Join(dir, "eventlog"), coordinator.Options{})
	if err != nil {
		nc.Close()
		ns.Shutdown()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	agent, err = nats.Connect(ns.ClientURL())
	if err != nil {
		svc.Shutdown(context.Background())
		nc.Close()
		ns.Shutdown()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return agent, func() {
		agent.Close()
		svc.Shutdown(context.Background())
		nc.Close()
		ns.Shutdown()
		os.RemoveAll(dir)
	}, nil
}

// A writer claims a section, writes it in a transaction that cites a
// material (so an editor changing that material waits for it), and counts
// its work; a second writer's claim of the same section loses.
func ExampleClient() {
	nc, stop, err := startCoordinator()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, err := agents.Connect(ctx, nc, "writer-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	// Claim: exactly one writer wins; the others see ErrPreconditionFailed.
	claim := intents.Apply("claim").
		Set("report.sections.intro.owner", c.Name()).
		Pre("state.report.sections.intro.owner == nil")
	d, err := c.Apply(ctx, claim)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("writer-1 claims the intro:", d.Outcome)

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
	fmt.Println("writer-1 opens a transaction:", tx.Grant().Outcome)
	text := "CoAgent decides every intent against the state and the work in flight."
	d, err = tx.Commit(ctx, intents.Apply("write_intro").
		Set("report.sections.intro.text", text).
		Post("len(state.report.sections.intro.text) > 0"))
	if err != nil {
		fmt.Println(err)
		tx.Abort(ctx)
		return
	}
	fmt.Println("writer-1 commits:", d.Outcome)

	// Count: read-modify-write that never loses an update.
	d, err = agents.UpdateJSON(ctx, c, "stats.sections_written", func(n float64, _ bool) (float64, error) {
		return n + 1, nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("writer-1 counts:", d.Outcome)

	// Another writer's claim of the same section is rejected, with the
	// reason and what the precondition saw.
	c2, err := agents.Connect(ctx, nc, "writer-2")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c2.Close()
	d, err = c2.Apply(ctx, intents.Apply("claim").
		Set("report.sections.intro.owner", c2.Name()).
		Pre("state.report.sections.intro.owner == nil"))
	if errors.Is(err, agents.ErrPreconditionFailed) {
		fmt.Println("writer-2 claims the intro:", d.Reason)
		fmt.Println(d.Detail)
	} else {
		fmt.Println("writer-2 claims the intro:", d, err)
	}
	// Output:
	// writer-1 claims the intro: applied
	// writer-1 opens a transaction: granted
	// writer-1 commits: committed
	// writer-1 counts: applied
	// writer-2 claims the intro: precondition_failed
	// pre[0] `state.report.sections.intro.owner == nil` is false; it saw report.sections.intro.owner = "writer-1"
}

// Follow every change under report from revision 0, then live. A value is
// JSON text.
func ExampleClient_Watch() {
	nc, stop, err := startCoordinator()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := agents.Connect(ctx, nc, "reader")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	// Two commits before the watch starts, one after: the watch catches up
	// from the log, then follows the feed.
	for _, title := range []string{"Draft", "Q3 report"} {
		if _, err := c.Apply(ctx, intents.Apply("title").Set("report.title", title)); err != nil {
			fmt.Println(err)
			return
		}
	}
	w, err := c.Watch(ctx, "report", 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Stop()
	if _, err := c.Apply(ctx, intents.Apply("pages").Incr("report.pages", 12)); err != nil {
		fmt.Println(err)
		return
	}
	for seen := 0; seen < 3; seen++ {
		ch, ok := <-w.Changes()
		if !ok {
			fmt.Println("watch ended:", w.Err())
			return
		}
		for _, wr := range ch.Writes {
			fmt.Printf("rev %d: %s %s %s = %s (version %d)\n", ch.Rev, ch.Agent, wr.Op, wr.Path, wr.Value, wr.NewVersion)
		}
	}
	// Output:
	// rev 2: reader set report.title = "Draft" (version 1)
	// rev 5: reader set report.title = "Q3 report" (version 2)
	// rev 8: reader incr report.pages = 12 (version 1)
}

// Store and forward: an indexer publishes its count and moves on; it
// collects the decision later, here or from its next run (the id is all
// it keeps). Publish returns once JetStream has stored the intent, whether
// or not a coordinator runs at the time; Decision finds a decision made
// while the agent was away in the coordinator's record.
func ExampleClient_Publish() {
	nc, stop, err := startCoordinator()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
	fmt.Println("stored; its id has", len(id), "characters") // a ULID: ids sort by time

	// … later, or in another run of the same agent:
	d, err := c.Decision(ctx, id)
	if err != nil {
		fmt.Println("no decision yet:", err)
		return
	}
	fmt.Println(d.Outcome, "at revision", d.Rev)
	// Output:
	// stored; its id has 26 characters
	// applied at revision 2
}
