package engine

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/coagent/coagent/intents"
)

func TestRecentForgetsOldest(t *testing.T) {
	r := newRecent[int](4, nil)
	for i := range 10 {
		r.put(strconv.Itoa(i), i)
	}
	for i := range 10 {
		_, ok := r.get(strconv.Itoa(i))
		if want := i >= 6; ok != want { // the newest generations: 6,7 and 8,9
			t.Errorf("key %d remembered = %v, want %v", i, ok, want)
		}
	}
	r.put("7", 70) // a put of a remembered key updates it in place
	if v, _ := r.get("7"); v != 70 {
		t.Errorf("key 7 = %d after update", v)
	}
}

// The engine's idempotency window is bounded; an intent still parked keeps
// its record however many decisions pass, so its duplicate is still known.
func TestDedupWindowKeepsParked(t *testing.T) {
	e, err := New(Config{DedupWindow: 4})
	if err != nil {
		t.Fatal(err)
	}
	var log []*intents.Event
	submit := func(in *intents.Intent) *intents.Decision {
		raw, _ := json.Marshal(in)
		evs := e.Submit(base, Input{Agent: in.Agent, Raw: raw}, nil).Events
		log = append(log, evs...)
		return evs[len(evs)-1].Decision
	}
	if d := submit(&intents.Intent{ID: fuzzID(1), Agent: "a", Kind: intents.KindPropose,
		Writes: []intents.Write{{Path: "doc.x", Op: intents.OpSet}}}); d.Outcome != intents.OutcomeGranted {
		t.Fatalf("propose: %+v", d)
	}
	waiter := &intents.Intent{ID: fuzzID(2), Agent: "b", Kind: intents.KindApply, OnConflict: intents.OnConflictWait,
		Writes: []intents.Write{{Path: "doc.x", Op: intents.OpSet, Value: json.RawMessage(`1`)}}}
	if d := submit(waiter); d.Outcome != intents.OutcomeQueued {
		t.Fatalf("waiter: %+v", d)
	}
	for i := range 20 {
		submit(&intents.Intent{ID: fuzzID(100 + i), Agent: "c", Kind: intents.KindApply,
			Writes: []intents.Write{{Path: "other.n", Op: intents.OpIncr}}})
	}
	if d := submit(waiter); !d.Duplicate || d.Outcome != intents.OutcomeQueued {
		t.Fatalf("parked intent resubmitted after 20 decisions: %+v, want its queued decision again", d)
	}
	if _, ok := e.Decision(fuzzID(100)); ok {
		t.Fatal("an old decision outlived the window")
	}
	// A replay forgets exactly the same.
	fresh, _ := New(Config{DedupWindow: 4})
	for _, ev := range log {
		if err := fresh.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		_, live := e.Decision(fuzzID(100 + i))
		_, replayed := fresh.Decision(fuzzID(100 + i))
		if live != replayed {
			t.Fatalf("decision %d: live engine remembers %v, replay %v", i, live, replayed)
		}
	}
	if _, ok := fresh.Decision(waiter.ID); !ok {
		t.Fatal("the replay forgot the parked intent")
	}
}

// Keys carried over a turn do not count toward the next one: with more
// kept keys than a generation holds, a turn still comes only after a
// generation's worth of new keys, not at every put (which made parking
// many waiters quadratic).
func TestRecentTurnsAfterNewKeys(t *testing.T) {
	kept := make([]string, 10)
	for i := range kept {
		kept[i] = "kept" + strconv.Itoa(i)
	}
	turns := 0
	r := newRecent[int](4, func(yield func(string)) {
		turns++
		for _, k := range kept {
			yield(k)
		}
	})
	for i, k := range kept {
		r.put(k, i)
	}
	turns = 0
	for i := range 20 {
		r.put("new"+strconv.Itoa(i), i)
	}
	if turns != 10 { // one per generation of 2 new keys
		t.Fatalf("%d turns for 20 new keys in generations of 2", turns)
	}
	for _, k := range kept {
		if _, ok := r.get(k); !ok {
			t.Fatalf("kept key %s was forgotten", k)
		}
	}
	if _, ok := r.get("new0"); ok {
		t.Fatal("an old new key outlived the window")
	}
}

// An id younger than every id with a record outside the window (the log's
// greatest at start, RecordedMax, and every id the window has forgotten
// since) is not looked up; an older one is, and a duplicate of an id the
// window forgot is still found.
func TestRecordedLookedUpOnlyWhenItMayExist(t *testing.T) {
	var asked []string
	records := map[string]*intents.Decision{}
	e, err := New(Config{DedupWindow: 4, RecordedMax: fuzzID(10), Recorded: func(id string) (*intents.Decision, bool) {
		asked = append(asked, id)
		d, ok := records[id]
		return d, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(n int) *intents.Decision {
		t.Helper()
		in := &intents.Intent{ID: fuzzID(n), Agent: "a", Kind: intents.KindApply,
			Writes: []intents.Write{{Path: "n", Op: intents.OpIncr}}}
		evs := e.Submit(base, Input{Agent: "a", Intent: in}, nil).Events
		d := evs[len(evs)-1].Decision
		if !d.Duplicate {
			records[d.Intent] = d
		}
		return d
	}
	submit(5) // older than RecordedMax: it may have a record
	if len(asked) != 1 || asked[0] != fuzzID(5) {
		t.Fatalf("asked %v, want the id older than RecordedMax", asked)
	}
	asked = nil
	for n := 11; n < 30; n++ {
		submit(n) // new ids, younger than every record: no lookup
	}
	if len(asked) != 0 {
		t.Fatalf("asked %v for ids younger than every record", asked)
	}
	// 11 has left the window since: a duplicate of it is looked up and
	// found.
	if _, ok := e.Decision(fuzzID(11)); ok {
		t.Fatal("the test needs 11 forgotten by the window")
	}
	if d := submit(11); !d.Duplicate || len(asked) != 1 {
		t.Fatalf("a duplicate of a forgotten id: %+v, asked %v", d, asked)
	}
}

// An id belongs to the first agent decided under it, also once the window
// has forgotten it: another agent's intent under that id is refused, and
// its refusal must not take the id in the window either, or the owner's
// own resend would then be refused as the intruder's.
func TestForeignReuseOfAForgottenIDLeavesItsOwner(t *testing.T) {
	records := map[string]*intents.Decision{}
	e, err := New(Config{DedupWindow: 4, Recorded: func(id string) (*intents.Decision, bool) {
		d, ok := records[id]
		return d, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(agent string, n int) *intents.Decision {
		t.Helper()
		in := &intents.Intent{ID: fuzzID(n), Agent: agent, Kind: intents.KindApply,
			Writes: []intents.Write{{Path: "n." + agent, Op: intents.OpIncr}}}
		r := e.Submit(base, Input{Agent: agent, Intent: in}, nil)
		for _, d := range r.Records { // what the event log would keep
			records[d.Intent] = d
		}
		return r.Own
	}
	first := submit("a", 1)
	for n := 2; n < 12; n++ {
		submit("a", n)
	}
	if _, ok := e.Decision(fuzzID(1)); ok {
		t.Fatal("the test needs 1 forgotten by the window")
	}
	if d := submit("b", 1); d.Outcome != intents.OutcomeRejected || d.Reason != intents.ReasonInvalid {
		t.Fatalf("b reusing a's forgotten id: %+v", d)
	}
	d := submit("a", 1)
	if !d.Duplicate || d.Outcome != first.Outcome || d.Rev != first.Rev {
		t.Fatalf("a's resend after b's reuse: %+v, want a duplicate of %+v", d, first)
	}
}
