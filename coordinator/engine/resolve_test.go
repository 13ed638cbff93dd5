package engine

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
)

// A configured fallback settles a case no arbiter resolved in time, as a
// rule arbiter would, and the resolution is recorded as the fallback's.
func TestFallbackResolves(t *testing.T) {
	e, err := New(Config{ArbiterTimeout: time.Second, Fallback: func(c *intents.Escalation) *intents.Resolution {
		return &intents.Resolution{Winners: []string{c.ID}, Rationale: "newcomers win"}
	}})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(in *intents.Intent) []*intents.Event {
		raw, _ := json.Marshal(in)
		return e.Submit(base, Input{Agent: in.Agent, Raw: raw}, nil).Events
	}
	g := submit(&intents.Intent{ID: fuzzID(1), Agent: "w1", Kind: intents.KindPropose,
		Writes: []intents.Write{{Path: "doc.x", Op: intents.OpSet}}})
	grant := g[len(g)-1].Decision
	submit(&intents.Intent{ID: fuzzID(2), Agent: "w2", Kind: intents.KindApply, OnConflict: intents.OnConflictEscalate,
		Writes: []intents.Write{{Path: "doc.x", Op: intents.OpSet, Value: json.RawMessage(`1`)}}})
	evs := e.Tick(base.Add(2*time.Second), nil).Events
	var resolvedBy string
	outcomes := map[string]intents.Outcome{}
	for _, ev := range evs {
		if ev.Type == intents.EventResolve {
			resolvedBy = ev.Agent
		}
		if ev.Decision != nil {
			outcomes[ev.Decision.Intent] = ev.Decision.Outcome
		}
	}
	if resolvedBy != FallbackArbiter || outcomes[fuzzID(2)] != intents.OutcomeApplied || outcomes[fuzzID(1)] != intents.OutcomeAborted {
		t.Fatalf("fallback: by %q, outcomes %v", resolvedBy, outcomes)
	}
	if len(e.Txns()) != 0 || grant.Txn == "" {
		t.Fatalf("the holder %s was not preempted", grant.Txn)
	}
}
