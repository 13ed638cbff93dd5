package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

func newID() string { return ulid.Make().String() }

func incr(path string) *intents.Intent {
	return &intents.Intent{Kind: intents.KindApply, Writes: []intents.Write{{Path: path, Op: intents.OpIncr}}}
}

// decided returns a channel of the final decisions the coordinator
// announces on its live feed, for a test to know that an intent was
// decided while no client of its agent listened.
func (w *world) decided() <-chan *intents.Decision {
	w.t.Helper()
	ch := make(chan *intents.Decision, 64)
	nc := w.connect()
	_, err := nc.Subscribe(intents.Subjects{}.Events(intents.EventDecision), func(m *nats.Msg) {
		var ev intents.Event
		if json.Unmarshal(m.Data, &ev) == nil && ev.Decision != nil && ev.Decision.Outcome.Final() {
			ch <- ev.Decision
		}
	})
	if err != nil {
		w.t.Fatal(err)
	}
	nc.Flush()
	return ch
}

func awaitDecided(t *testing.T, ch <-chan *intents.Decision, id string) *intents.Decision {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case d := <-ch:
			if d.Intent == id {
				return d
			}
		case <-timeout:
			t.Fatalf("intent %s was not decided in 20s", id)
		}
	}
}

// TestPublishAndDecision: an intent published on the stream is decided and
// its decision collected by Decision: at once; after the fact, by a client
// that connected only once it was decided (the coordinator's record); when
// published while no coordinator ran; and through an interim decision.
func TestPublishAndDecision(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 60*time.Second)
	decided := w.decided()

	t.Run("now", func(t *testing.T) {
		c := w.client("pub")
		id, err := c.Publish(ctx, incr("p.now"))
		if err != nil {
			t.Fatal(err)
		}
		d, err := c.Decision(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.Intent != id || d.Agent != "pub" || d.Outcome != intents.OutcomeApplied {
			t.Fatalf("decision %+v, want %s of pub applied", d, id)
		}
		// Publishing the same intent again stores nothing new, and its
		// decision is the same.
		again, err := c.Publish(ctx, &intents.Intent{ID: id, Kind: intents.KindApply, Writes: []intents.Write{{Path: "p.now", Op: intents.OpIncr}}})
		if err != nil || again != id {
			t.Fatalf("publishing %s again: %s, %v", id, again, err)
		}
		if d2, err := c.Decision(ctx, id); err != nil || d2.Outcome != intents.OutcomeApplied || d2.Rev != d.Rev {
			t.Fatalf("the decision asked again: %+v, %v; want rev %d", d2, err, d.Rev)
		}
	})

	t.Run("after_the_fact", func(t *testing.T) {
		// The agent publishes and goes away; its intent is decided while no
		// client of it listens; the agent comes back and asks.
		gone := w.client("away")
		id, err := gone.Publish(ctx, incr("p.later"))
		if err != nil {
			t.Fatal(err)
		}
		gone.Close()
		want := awaitDecided(t, decided, id)
		// Resend interval of a minute: only the record, asked at once, can
		// answer within the test's time.
		back := w.client("away", agents.WithResend(time.Minute))
		d, err := back.Decision(ctxFor(t, 10*time.Second), id)
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome != intents.OutcomeApplied || d.Rev != want.Rev {
			t.Fatalf("collected %+v, want the decision made while away (rev %d)", d, want.Rev)
		}
	})

	t.Run("no_coordinator", func(t *testing.T) {
		c := w.client("patient", agents.WithResend(200*time.Millisecond))
		if err := w.svc.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		w.svc = nil
		// Stored while nobody can decide it.
		id, err := c.Publish(ctx, incr("p.down"))
		if err != nil {
			t.Fatalf("publish with the coordinator down: %v", err)
		}
		got := make(chan *intents.Decision, 1)
		go func() {
			d, err := c.Decision(ctx, id)
			if err != nil {
				t.Error(err)
			}
			got <- d
		}()
		w.start()
		if d := <-got; d == nil || d.Outcome != intents.OutcomeApplied {
			t.Fatalf("decision once the coordinator ran: %+v", d)
		}
	})

	t.Run("interim", func(t *testing.T) {
		holder := w.client("holder")
		queued := make(chan *intents.Decision, 4)
		c := w.client("waiter", agents.WithDecisionHook(func(d *intents.Decision) {
			if !d.Outcome.Final() {
				queued <- d
			}
		}))
		tx, err := holder.Propose(ctx, intents.Propose("hold").Write("p.held", intents.OpSet))
		if err != nil {
			t.Fatal(err)
		}
		in, _ := intents.Apply("edit").Set("p.held", "mine").Wait(20 * time.Second).Build()
		id, err := c.Publish(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *intents.Decision, 1)
		go func() {
			d, err := c.Decision(ctx, id)
			if err != nil {
				t.Error(err)
			}
			got <- d
		}()
		if q := <-queued; q.Intent != id || q.Outcome != intents.OutcomeQueued {
			t.Fatalf("interim %+v, want %s queued", q, id)
		}
		if err := tx.Abort(ctx); err != nil {
			t.Fatal(err)
		}
		if d := <-got; d == nil || d.Outcome != intents.OutcomeApplied {
			t.Fatalf("final decision %+v", d)
		}
		select {
		case q := <-queued:
			t.Fatalf("the hook was given the interim decision again: %+v", q)
		default:
		}
	})

	t.Run("bad_ids", func(t *testing.T) {
		c := w.client("pub")
		if _, err := c.Decision(ctx, "nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
			t.Fatalf("Decision of a bad id: %v", err)
		}
		short := ctxFor(t, 300*time.Millisecond)
		if _, err := c.Decision(short, newID()); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Decision of an id nobody sent: %v, want the deadline", err)
		}
		if _, err := c.Publish(ctx, &intents.Intent{Kind: intents.KindApply, Writes: []intents.Write{{Path: "a..b", Op: intents.OpSet}}}); !errors.Is(err, agents.ErrInvalid) {
			t.Fatalf("Publish of a bad intent: %v", err)
		}
	})
}
