package agents_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// queueDrains waits until the arbiters' queue holds no message: polled, as
// the coordinator removes a settled case after its group is durable.
func (w *arbiterWorld) queueDrains() {
	w.t.Helper()
	js, err := jetstream.New(w.nc)
	if err != nil {
		w.t.Fatal(err)
	}
	stream, err := js.Stream(context.Background(), w.subj.Stream(intents.StreamArbiter))
	if err != nil {
		w.t.Fatal(err)
	}
	var msgs uint64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		info, err := stream.Info(context.Background())
		if err != nil {
			w.t.Fatal(err)
		}
		if msgs = info.State.Msgs; msgs == 0 {
			return
		}
	}
	w.t.Fatalf("the arbiters' queue still holds %d cases, all of them settled", msgs)
}

// resolve settles case esc over the API, as an arbiter would, with the
// escalated intent losing.
func (w *arbiterWorld) resolve(esc string) {
	w.t.Helper()
	r, err := w.nc.Request(w.subj.API(intents.APIArbiterResolve),
		[]byte(`{"escalation":"`+esc+`","arbiter":"rival","losers":["`+esc+`"],"rationale":"settled before any arbiter came"}`), 10*time.Second)
	if err != nil || string(r.Data) != `{"ok":true,"settled":true}` {
		w.t.Fatalf("resolve %s: %v %v", esc, r, err)
	}
	if d := w.next("w2"); d.Intent != esc || d.Reason != intents.ReasonArbiterRejected {
		w.t.Fatalf("the escalated intent: %+v", d)
	}
}

// escalateAgain opens one more case against w1's transaction.
func (w *arbiterWorld) escalateAgain() string {
	w.t.Helper()
	esc := ulid.Make().String()
	w.publish("w2", map[string]any{"id": esc, "agent": "w2", "kind": "apply", "on_conflict": "escalate",
		"writes": []any{map[string]any{"path": "report.intro", "op": "set", "value": "again"}}})
	if d := w.next("w2"); d.Outcome != intents.OutcomeEscalated {
		w.t.Fatalf("escalate: %+v", d)
	}
	return esc
}

// seen records the cases an arbiter is handed, with a logger for it.
type seen struct {
	mu    sync.Mutex
	cases []string
	logs  arbiterLogs
}

func (s *seen) decide(c *intents.Escalation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cases = append(s.cases, c.ID)
}

// An arbiter started after a case was settled is not handed it: the case
// left the queue when it settled, and the first case the arbiter gets is
// the one opened after it started.
func TestSettledCaseLeavesTheQueue(t *testing.T) {
	w := newArbiterWorld(t)
	_, esc, _ := w.conflict(1, 5)
	w.resolve(esc)
	w.queueDrains()

	var s seen
	w.runArbiter(w.connect(), "late", func(ctx context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		s.decide(c)
		return arbiter.Reject("late", c), nil
	}, agents.WithLogger(s.logs.logger()))
	next := w.escalateAgain()
	if d := w.next("w2"); d.Intent != next || d.Reason != intents.ReasonArbiterRejected {
		t.Fatalf("the new case: %+v", d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cases) != 1 || s.cases[0] != next {
		t.Fatalf("the late arbiter was handed %v, want only %s", s.cases, next)
	}
	if out := s.logs.String(); strings.Contains(out, "case dropped") {
		t.Fatalf("logs:\n%s", out)
	}
}

// After a restart the coordinator finds its open cases on the queue again
// (their sequences, which a settled case is removed by), and a case opened
// before the restart leaves the queue when it settles after it.
func TestSettledCaseLeavesTheQueueAfterRestart(t *testing.T) {
	w := newArbiterWorld(t)
	_, esc, _ := w.conflict(1, 5)
	w.restart()
	w.resolve(esc)
	w.queueDrains()
}

// A case no arbiter resolved by its deadline leaves the queue too: it is a
// dead letter, settled by the fallback.
func TestDeadCaseLeavesTheQueue(t *testing.T) {
	w := newArbiterWorld(t, coordinator.Options{Core: coordinator.CoreOptions{Engine: engine.Config{ArbiterTimeout: 200 * time.Millisecond}}})
	_, esc, _ := w.conflict(1, 5)
	if d := w.next("w2"); d.Intent != esc || d.Reason != intents.ReasonArbiterRejected {
		t.Fatalf("past the deadline: %+v", d)
	}
	w.queueDrains()
}
