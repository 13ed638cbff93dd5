package coordinator

import (
	"context"
	"fmt"
	"testing"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
)

// An intent id belongs to the first agent decided under it, in the log's
// records as in the engine: another agent's use of the id is refused and
// leaves the record as it was, when the two come in groups enqueued back
// to back (the first not yet written when the second is enqueued, as the
// loop commits them), and when the engine's window has forgotten the id
// and a restart has come between. The owner's resend is then answered
// from the record.
func TestRecordsKeepTheirOwner(t *testing.T) {
	dir := t.TempDir()
	opts := CoreOptions{Engine: engine.Config{DedupWindow: 8}, Log: eventlog.Options{NoSync: true}}
	core, err := OpenCore(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(n int, agent string) engine.Input {
		raw := fmt.Sprintf(`{"id":"01JD%022d","agent":%q,"kind":"apply","writes":[{"path":"n.%s","op":"incr"}]}`, n, agent, agent)
		return engine.Input{Agent: agent, Raw: []byte(raw)}
	}
	id := func(n int) string { return fmt.Sprintf("01JD%022d", n) }
	const ids = 100
	var last *Group
	for n := 1; n <= ids; n++ {
		for _, agent := range []string{"a", "b"} {
			d := core.Decide(t0, apply(n, agent), ViaAPI)
			if agent == "b" && (d.Own == nil || d.Own.Reason != intents.ReasonInvalid) {
				t.Fatalf("b reusing a's id %d: %+v", n, d.Own)
			}
			if last, err = core.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := last.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= ids; n++ {
		if d, err := core.Log().Decision(id(n)); err != nil || d.Agent != "a" || d.Outcome != intents.OutcomeApplied {
			t.Fatalf("record of id %d: %+v, %v; want a's", n, d, err)
		}
	}
	if err := core.Close(); err != nil {
		t.Fatal(err)
	}

	// After a restart the window holds only the last ids: b's reuse of the
	// first is looked up in the log, refused, and takes nothing.
	if core, err = OpenCore(dir, opts); err != nil {
		t.Fatal(err)
	}
	defer core.Close()
	for _, agent := range []string{"b", "a"} {
		d := core.Decide(t0, apply(1, agent), ViaAPI)
		switch {
		case agent == "b" && (d.Own == nil || d.Own.Reason != intents.ReasonInvalid):
			t.Fatalf("b reusing a's forgotten id: %+v", d.Own)
		case agent == "a" && (d.Own == nil || !d.Own.Duplicate || d.Own.Outcome != intents.OutcomeApplied):
			t.Fatalf("a's resend after b's reuse: %+v, want a duplicate of a's decision", d.Own)
		}
		g, err := core.Commit()
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := core.Log().Decision(id(1)); err != nil || d.Agent != "a" || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("record of id 1 after the reuse: %+v, %v; want a's", d, err)
	}
}
