package coordinator

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
)

// A panic while the engine decides one intent is contained at that intent:
// the engine is put back as it was before it (the panic struck after the
// intent's first event was folded, so something had changed), the panic is
// logged once, the intent is recorded as rejected invalid, and the intents
// around it in the same batch are decided as if it had never come. A
// resend of the poisoned id is answered from its record and not decided
// again.
func TestPanicContained(t *testing.T) {
	const poison = "01JD0000000000000000000999"
	var core *Core
	fired := 0
	var logs bytes.Buffer
	opts := CoreOptions{
		Log:    eventlog.Options{NoSync: true},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Engine: engine.Config{
			// The engine asks for the record of every id it does not know,
			// after it has folded the intent's received event: a panic here
			// leaves the engine half-changed.
			Recorded: func(id string) (*intents.Decision, bool) {
				if id == poison && fired == 0 {
					fired++
					panic("injected fault")
				}
				if core == nil {
					return nil, false // opening: no foreign reuse in this test to look up
				}
				d, err := core.Log().Decision(id)
				return d, err == nil
			},
		},
	}
	dir := t.TempDir()
	var err error
	if core, err = OpenCore(dir, opts); err != nil {
		t.Fatal(err)
	}
	defer func() { core.Close() }()

	apply := func(id, path, value string) []byte {
		return []byte(`{"id":"` + id + `","agent":"w1","kind":"apply","writes":[{"path":"` + path + `","op":"set","value":` + value + `}]}`)
	}
	decide := func(raw []byte) *intents.Decision {
		t.Helper()
		var d *intents.Decision
		for _, ev := range core.Decide(t0, engine.Input{Agent: "w1", Raw: raw}, ViaStream).Events {
			if ev.Decision != nil {
				d = ev.Decision
			}
		}
		if d == nil {
			t.Fatalf("no decision for %s", raw)
		}
		return d
	}
	commit := func() {
		t.Helper()
		p, err := core.Commit()
		if err != nil {
			t.Fatal(err)
		}
		if p != nil {
			if err := p.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}

	// One batch already durable, so the restore has a log to rebuild from.
	if d := decide(apply("01JD0000000000000000000001", "n.before", "0")); d.Outcome != intents.OutcomeApplied {
		t.Fatalf("first intent: %+v", d)
	}
	commit()

	a := decide(apply("01JD0000000000000000000002", "n.a", "1"))
	seqBefore := core.Engine().Seq()
	p := decide(apply(poison, "n.p", "2"))
	if p.Outcome != intents.OutcomeRejected || p.Reason != intents.ReasonInvalid || !strings.Contains(p.Detail, "internal error") {
		t.Fatalf("poisoned intent: %+v", p)
	}
	if core.Engine().Seq() != seqBefore+2 {
		t.Fatalf("the refusal took seqs %d..%d; want the two after %d (the intent and its decision)", seqBefore+1, core.Engine().Seq(), seqBefore)
	}
	b := decide(apply("01JD0000000000000000000003", "n.b", "3"))
	if a.Outcome != intents.OutcomeApplied || b.Outcome != intents.OutcomeApplied {
		t.Fatalf("the intents around it: %+v, %+v", a, b)
	}
	commit()
	if fired != 1 {
		t.Fatalf("the fault fired %d times", fired)
	}
	if n := strings.Count(logs.String(), "contained a panic"); n != 1 {
		t.Fatalf("the panic was logged %d times:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "injected fault") {
		t.Fatalf("the log does not name the panic:\n%s", logs.String())
	}
	st := core.Engine().State()
	for path, want := range map[string]any{"n.a": 1.0, "n.b": 3.0, "n.before": 0.0} {
		if v, ok := st.Get(path); !ok || v != want {
			t.Errorf("%s = %v (%v), want %v", path, v, ok, want)
		}
	}
	if _, ok := st.Get("n.p"); ok {
		t.Error("the poisoned intent's write is in the state")
	}

	// The same id again is a duplicate of its record; nothing is decided.
	if d := decide(apply(poison, "n.p", "2")); !d.Duplicate || d.Reason != intents.ReasonInvalid {
		t.Fatalf("resend of the poisoned id: %+v", d)
	}
	commit()

	// The log alone rebuilds exactly the live state, in and after the
	// contained batch.
	live := replay.Hash(core.Engine().State())
	if got, err := replay.Verify(core.Log(), engine.Config{}, nil); err != nil || got != live {
		t.Fatalf("verify: %v, hash %s, live %s", err, got, live)
	}
	if err := core.Close(); err != nil {
		t.Fatal(err)
	}
	core = nil
	if core, err = OpenCore(dir, opts); err != nil {
		t.Fatal(err)
	}
	if got := replay.Hash(core.Engine().State()); got != live {
		t.Fatalf("reopened hash %s, live %s", got, live)
	}
	if d, _ := core.Engine().Decision(poison); d == nil || d.Reason != intents.ReasonInvalid {
		t.Fatalf("the poisoned id's record after a restart: %+v", d)
	}
}

// A panic while timers fire is contained too: their events are dropped and
// the engine is as it was, so the next intent is decided.
func TestPanicContainedInTimers(t *testing.T) {
	fallbackPanics := true
	var core *Core
	var logs bytes.Buffer
	opts := CoreOptions{
		Log:    eventlog.Options{NoSync: true},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Engine: engine.Config{ArbiterTimeout: time.Second, Fallback: func(*intents.Escalation) *intents.Resolution {
			if fallbackPanics {
				panic("injected fault in the fallback")
			}
			return nil
		}},
	}
	var err error
	if core, err = OpenCore(t.TempDir(), opts); err != nil {
		t.Fatal(err)
	}
	defer core.Close()
	for _, raw := range []string{
		`{"id":"01JD0000000000000000000001","agent":"a","kind":"propose","writes":[{"path":"x","op":"set"}]}`,
		`{"id":"01JD0000000000000000000002","agent":"b","kind":"apply","on_conflict":"escalate","writes":[{"path":"x","op":"set","value":1}]}`,
	} {
		core.Decide(t0, engine.Input{Raw: []byte(raw)}, ViaAPI)
	}
	if _, err := core.Commit(); err != nil {
		t.Fatal(err)
	}
	seq := core.Engine().Seq()
	if evs := core.Tick(t0.Add(2 * time.Second)); len(evs) != 0 {
		t.Fatalf("a contained tick returned %d events", len(evs))
	}
	if core.Engine().Seq() != seq || len(core.Engine().Parked()) != 1 {
		t.Fatalf("after the contained tick: seq %d (was %d), parked %v", core.Engine().Seq(), seq, core.Engine().Parked())
	}
	if !strings.Contains(logs.String(), "injected fault in the fallback") {
		t.Fatalf("not logged:\n%s", logs.String())
	}
	fallbackPanics = false
	evs := core.Tick(t0.Add(2 * time.Second))
	var final *intents.Decision
	for _, ev := range evs {
		if ev.Decision != nil {
			final = ev.Decision
		}
	}
	if final == nil || final.Reason != intents.ReasonArbiterRejected {
		t.Fatalf("once the fault is gone the deadline settles the case: %+v", final)
	}
}

// The decision of the intent a Decide was for is routed by how that intent
// came, even when others come first among its events: an apply that
// preempts a transaction is answered with its own decision, and the
// preempted propose's aborted one goes where its own intent came.
func TestRouteOwnDecisionAfterOthers(t *testing.T) {
	core, err := OpenCore(t.TempDir(), CoreOptions{Log: eventlog.Options{NoSync: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close()
	if _, err := core.SetRules(t0, []byte(`{"rules":[{"pattern":"board.**","preempt":["lead"]}]}`), "test"); err != nil {
		t.Fatal(err)
	}
	core.Decide(t0, engine.Input{Agent: "w", Raw: []byte(`{"id":"01JD0000000000000000000001","agent":"w","kind":"propose","writes":[{"path":"board.x","op":"set"}]}`)}, ViaStream)
	decided := core.Decide(t0, engine.Input{Agent: "lead", Raw: []byte(`{"id":"01JD0000000000000000000002","agent":"lead","kind":"apply","writes":[{"path":"board.x","op":"set","value":1}]}`)}, ViaAPI)
	if d := decided.Own; d == nil || d.Intent != "01JD0000000000000000000002" || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("the submitted intent's decision: %+v", d)
	}
	g, err := core.Commit()
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]Routed{}
	for _, r := range g.Decisions {
		routes[r.Decision.Intent+" "+string(r.Decision.Outcome)] = r
	}
	if r := routes["01JD0000000000000000000002 applied"]; !r.Known || r.Via != ViaAPI || r.Store() {
		t.Fatalf("the preempting apply's decision: %+v", r)
	}
	if r := routes["01JD0000000000000000000001 aborted"]; !r.Store() {
		t.Fatalf("the preempted propose's aborted decision: %+v, want it stored for its agent", r)
	}
}
