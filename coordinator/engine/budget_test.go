package engine

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/coagent/coagent/intents"
)

// A precondition reading an object too big for the budget is refused
// before the tree builds it (state.Tree.GetWithin), and the next intent
// is decided as usual.
func TestBudgetHugeRead(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	var out []*intents.Event
	for part := range 5 {
		var b strings.Builder
		b.WriteByte('{')
		for i := range 50000 {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"m%d":%d`, i, i)
		}
		b.WriteByte('}')
		in := &intents.Intent{ID: benchID(part), Agent: "setup", Kind: intents.KindApply,
			Writes: []intents.Write{{Path: fmt.Sprintf("big.p%d", part), Op: intents.OpSet, Value: json.RawMessage(b.String())}}}
		out = e.Submit(base, Input{Agent: "setup", Intent: in}, out[:0]).Events
		if d := out[len(out)-1].Decision; d.Outcome != intents.OutcomeApplied {
			t.Fatalf("setup %d: %s %s", part, d.Outcome, d.Detail)
		}
	}
	decide := func(n int, pre string) *intents.Decision {
		in := &intents.Intent{ID: benchID(100 + n), Agent: "a", Kind: intents.KindApply, Pre: []string{pre},
			Writes: []intents.Write{{Path: "a.x", Op: intents.OpSet, Value: json.RawMessage(`1`)}}}
		out = e.Submit(base, Input{Agent: "a", Intent: in}, out[:0]).Events
		return out[len(out)-1].Decision
	}
	d := decide(1, `state.big != nil`)
	want := "pre[0] `state.big != nil` is over the evaluation budget of 1000000 units per intent: reading state.big (an object of more than 199998 members) costs more than 999995"
	if d.Outcome != intents.OutcomeRejected || d.Reason != intents.ReasonInvalid || !strings.HasPrefix(d.Detail, want) {
		t.Fatalf("%s %s: %s, want invalid: %s", d.Outcome, d.Reason, d.Detail, want)
	}
	// One part of it is within the budget; the next intent is decided.
	if d := decide(2, `len(state.big.p0) == 50000`); d.Outcome != intents.OutcomeApplied {
		t.Fatalf("%s %s: %s", d.Outcome, d.Reason, d.Detail)
	}
}
