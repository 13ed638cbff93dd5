package intents_test

import (
	"testing"

	"github.com/coagent/coagent/intents"
)

// The escalated intent is found by the case's id wherever it stands, and
// the proposes are the rest; a case that does not carry it says so.
func TestEscalationIntents(t *testing.T) {
	esc := &intents.Intent{ID: "E", Agent: "w2"}
	h1, h2 := &intents.Intent{ID: "H1", Agent: "w1"}, &intents.Intent{ID: "H2", Agent: "w3"}
	c := &intents.Escalation{ID: "E", Intents: []*intents.Intent{h1, nil, esc, h2}}
	if got := c.Escalated(); got != esc {
		t.Fatalf("Escalated() = %+v, want %+v", got, esc)
	}
	if got := c.Proposes(); len(got) != 2 || got[0] != h1 || got[1] != h2 {
		t.Fatalf("Proposes() = %+v, want H1, H2", got)
	}
	malformed := &intents.Escalation{ID: "E", Intents: []*intents.Intent{h1}}
	if got := malformed.Escalated(); got != nil {
		t.Fatalf("a case without its intent: Escalated() = %+v, want nil", got)
	}
}
