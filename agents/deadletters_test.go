package agents_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// A case no arbiter resolves by its deadline is a dead letter; Retry sends
// its intent again under a new id that names the case, removes the letter,
// and the new intent, still in conflict, escalates and is rejected again:
// Decision waits for that final decision, or returns the interim one.
func TestDeadLettersRetry(t *testing.T) {
	// Long enough that the retried intent is still escalated when its
	// interim decision is asked for.
	w := newArbiterWorld(t, coordinator.Options{Core: coordinator.CoreOptions{Engine: engine.Config{ArbiterTimeout: 1500 * time.Millisecond}}})
	ctx := ctxFor(t, time.Minute)
	if _, err := agents.OpenDeadLetters(ctx, w.nc, agents.WithPrefix("nobody")); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("no coordinator under that prefix: %v", err)
	}
	_, esc, _ := w.conflict(1, 5)
	if d := w.next("w2"); d.Intent != esc || d.Reason != intents.ReasonArbiterRejected {
		t.Fatalf("the fallback: %+v", d)
	}
	dl, err := agents.OpenDeadLetters(ctx, w.nc)
	if err != nil {
		t.Fatal(err)
	}
	var letters []agents.DeadLetter
	natstest.CheckFor(t, 10*time.Second, "the dead letter", func() error {
		var err error
		if letters, err = dl.List(ctx); err == nil && len(letters) == 0 {
			err = errors.New("none")
		}
		return err
	})
	if len(letters) != 1 || letters[0].Case.ID != esc || letters[0].Seq == 0 {
		t.Fatalf("letters: %+v", letters)
	}
	again, err := dl.Retry(ctx, letters[0])
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		RetryOf string `json:"retry_of"`
	}
	if again.ID == esc || again.Agent != "w2" || json.Unmarshal(again.Meta, &meta) != nil || meta.RetryOf != esc {
		t.Fatalf("the intent sent again: %+v", again)
	}
	if left, err := dl.List(ctx); err != nil || len(left) != 0 {
		t.Fatalf("after the retry: %+v %v", left, err)
	}
	if d := w.next("w2"); d.Intent != again.ID || d.Outcome != intents.OutcomeEscalated {
		t.Fatalf("the retried intent: %+v, want a new escalation", d)
	}
	if d, err := dl.Decision(ctx, again.ID, 0); err != nil || d.Intent != again.ID || d.Outcome != intents.OutcomeEscalated {
		t.Fatalf("the interim decision: %+v %v", d, err)
	}
	d, err := dl.Decision(ctx, again.ID, 10*time.Second)
	if err != nil || d.Intent != again.ID || d.Reason != intents.ReasonArbiterRejected {
		t.Fatalf("the final decision: %+v %v", d, err)
	}
	if _, err := dl.Decision(ctx, ulid.Make().String(), 50*time.Millisecond); !errors.Is(err, agents.ErrNoDecision) {
		t.Fatalf("an intent never sent: %v", err)
	}
}
