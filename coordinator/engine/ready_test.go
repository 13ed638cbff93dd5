package engine

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
)

// Each call's Ready says, of that call alone, what its caller acts on:
// the submitted intent's own decision (not a timer's that fired first,
// nor one it freed), the arbiter cases it opened, the rules it put in
// force, and when to tick next. The Core routes replies and cases by it
// and reads none of it from the events' types.
func TestReadyIsTheCallsOwn(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(at time.Time, in *intents.Intent) Ready {
		t.Helper()
		raw, _ := json.Marshal(in)
		return e.Submit(at, Input{Agent: in.Agent, Raw: raw}, nil)
	}
	set := []intents.Write{{Path: "doc.x", Op: intents.OpSet, Value: json.RawMessage(`1`)}}

	r := submit(base, &intents.Intent{ID: fuzzID(1), Agent: "w1", Kind: intents.KindPropose,
		Writes: []intents.Write{{Path: "doc.x", Op: intents.OpSet}}})
	if r.ID != fuzzID(1) || r.Own == nil || r.Own.Outcome != intents.OutcomeGranted {
		t.Fatalf("propose: id %q, own %+v", r.ID, r.Own)
	}
	if !r.HasNext || !r.Next.After(base) {
		t.Fatalf("a granted lease must set the next deadline: %v %v", r.Next, r.HasNext)
	}

	r = submit(base, &intents.Intent{ID: fuzzID(2), Agent: "w2", Kind: intents.KindApply,
		OnConflict: intents.OnConflictEscalate, Writes: set})
	if r.Own == nil || r.Own.Outcome != intents.OutcomeEscalated || len(r.Effects.Cases) != 1 {
		t.Fatalf("escalate: own %+v, cases %d", r.Own, len(r.Effects.Cases))
	}

	// The next call opens no case: the effects are the call's, not the
	// engine's since some time.
	r = submit(base, &intents.Intent{ID: fuzzID(3), Agent: "w3", Kind: intents.KindApply,
		Writes: []intents.Write{{Path: "doc.y", Op: intents.OpSet, Value: json.RawMessage(`2`)}}})
	if r.Own == nil || r.Own.Intent != fuzzID(3) || len(r.Effects.Cases) != 0 || r.RulesChanged {
		t.Fatalf("apply: own %+v, cases %d, rules changed %v", r.Own, len(r.Effects.Cases), r.RulesChanged)
	}

	rr, err := e.SetRules(base, []byte(`{"rules":[{"pattern":"doc.**","preempt":["lead"]}]}`), "test", nil)
	if err != nil || !rr.RulesChanged || rr.Rules == nil || rr.Own != nil {
		t.Fatalf("rules: %v, changed %v, rules %v, own %+v", err, rr.RulesChanged, rr.Rules, rr.Own)
	}

	// Past the lease: the timers fire before the intent is decided, and
	// their decisions (the transaction's end, the escalated intent freed)
	// come first among the events; the Ready's own is still the intent's.
	late := base.Add(2 * time.Minute) // the default lease is 30s
	r = submit(late, &intents.Intent{ID: fuzzID(4), Agent: "w4", Kind: intents.KindApply,
		Writes: []intents.Write{{Path: "doc.z", Op: intents.OpSet, Value: json.RawMessage(`3`)}}})
	others := 0
	for _, ev := range r.Events {
		if ev.Decision != nil && ev.Decision.Intent != fuzzID(4) {
			others++
		}
	}
	if others == 0 {
		t.Fatal("no timer fired before the intent: the test does not test what it says")
	}
	if r.ID != fuzzID(4) || r.Own == nil || r.Own.Intent != fuzzID(4) || r.Own.Outcome != intents.OutcomeApplied {
		t.Fatalf("after the lease: id %q, own %+v", r.ID, r.Own)
	}

	// An intent that is not JSON has no id; its own decision is its
	// rejection.
	r = e.Submit(late, Input{Agent: "w5", Raw: []byte(`{not json`)}, nil)
	if r.ID != "" || r.Own == nil || r.Own.Outcome != intents.OutcomeRejected {
		t.Fatalf("not json: id %q, own %+v", r.ID, r.Own)
	}

	// A tick decides no intent.
	if r := e.Tick(late.Add(time.Hour), nil); r.Own != nil || r.ID != "" {
		t.Fatalf("tick: id %q, own %+v", r.ID, r.Own)
	}
}

// A call's Ready files its events for the caller — changes for the feed,
// notices for their agents, the rest live — and names the paths its
// changes bumped, which the log's materialized state must write again. A
// follower folding the same events with ApplyAll is handed the same, so
// that it logs the same state.
func TestReadyFilesTheCallsEvents(t *testing.T) {
	leader, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	follower, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(at time.Time, in *intents.Intent) Ready {
		t.Helper()
		raw, _ := json.Marshal(in)
		return leader.Submit(at, Input{Agent: in.Agent, Raw: raw}, nil)
	}
	check := func(what string, r Ready, changes, notices int, touched ...string) {
		t.Helper()
		for name, r := range map[string]Ready{"the call": r, "ApplyAll": follow(t, follower, r.Events)} {
			if len(r.Changes) != changes || len(r.Notices) != notices || len(r.Live) != len(r.Events)-changes {
				t.Fatalf("%s, %s: %d changes, %d notices, %d live of %d events; want %d, %d, %d",
					what, name, len(r.Changes), len(r.Notices), len(r.Live), len(r.Events), changes, notices, len(r.Events)-changes)
			}
			for _, ev := range r.Changes {
				if ev.Type != intents.EventChange {
					t.Fatalf("%s, %s: a %s filed as a change", what, name, ev.Type)
				}
			}
			for _, ev := range r.Live {
				if ev.Type == intents.EventChange {
					t.Fatalf("%s, %s: a change filed as live", what, name)
				}
			}
			got := slices.Compact(slices.Sorted(slices.Values(r.Touched)))
			if !slices.Equal(got, touched) {
				t.Fatalf("%s, %s: touched %q, want %q", what, name, got, touched)
			}
		}
	}

	r := submit(base, &intents.Intent{ID: fuzzID(1), Agent: "w1", Kind: intents.KindApply,
		Writes: []intents.Write{{Path: "doc.x", Op: intents.OpSet, Value: json.RawMessage(`1`)},
			{Path: "doc.y", Op: intents.OpSet, Value: json.RawMessage(`2`)}}})
	check("an apply", r, 1, 0, "doc", "doc.x", "doc.y")

	// A transaction held past its warning: the tick that warns its holder
	// sends a notice and changes nothing.
	r = submit(base, &intents.Intent{ID: fuzzID(2), Agent: "w2", Kind: intents.KindPropose, LeaseMS: 1000,
		Writes: []intents.Write{{Path: "doc.z", Op: intents.OpSet}}})
	check("a propose", r, 0, 0)
	r = leader.Tick(base.Add(900*time.Millisecond), nil)
	if len(r.Events) == 0 {
		t.Fatal("no warning before the lease ends: the test does not test what it says")
	}
	check("a lease warning", r, 0, 1)

	// A rejected intent touches nothing, though it is recorded.
	r = submit(base.Add(900*time.Millisecond), &intents.Intent{ID: fuzzID(3), Agent: "w3", Kind: intents.KindApply,
		Pre: []string{"false"}, Writes: []intents.Write{{Path: "doc.x", Op: intents.OpSet, Value: json.RawMessage(`3`)}}})
	check("a failed precondition", r, 0, 0)
}

// follow folds evs into f as a follower does, and returns its Ready.
func follow(t *testing.T, f *Engine, evs []*intents.Event) Ready {
	t.Helper()
	r, err := f.ApplyAll(evs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
