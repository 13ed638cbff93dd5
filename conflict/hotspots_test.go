package conflict

import (
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
)

func TestHotspots(t *testing.T) {
	h := NewHotspots()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rej := func(agent, path, with string, kind intents.ConflictKind, out intents.Outcome) *intents.Decision {
		return &intents.Decision{Agent: agent, Outcome: out, Reason: intents.ReasonConflict,
			Conflicts: []intents.Conflict{{Path: path, Kind: kind, WithTxn: "T", WithAgent: with}}}
	}
	// Old conflicts on tasks, recent ones on report.intro.
	for range 5 {
		h.Observe(t0, rej("a", "tasks.t1.owner", "b", intents.ConflictWriteWrite, intents.OutcomeRejected))
	}
	now := t0.Add(10 * time.Minute)
	for range 3 {
		h.Observe(now, rej("w2", "report.intro", "w1", intents.ConflictWriteWrite, intents.OutcomeQueued))
	}
	h.Observe(now, rej("w2", "report.intro.x", "w1", intents.ConflictReadWrite, intents.OutcomeEscalated))
	h.Observe(now, &intents.Decision{Agent: "w3", Outcome: intents.OutcomeApplied, MergedWith: []string{"T9"}})
	h.Observe(now, &intents.Decision{Agent: "w3", Outcome: intents.OutcomeApplied, Duplicate: true,
		Conflicts: []intents.Conflict{{Path: "report.intro", Kind: intents.ConflictWriteWrite}}}) // duplicates do not count

	top := h.Top(now, 0)
	byName := map[string]Spot{}
	for _, s := range top {
		byName[s.Kind+":"+s.Name] = s
	}
	intro := byName["prefix:report.intro"]
	if intro.Total != 4 || intro.LastMinute != 4 || intro.Waits != 3 || intro.Escalations != 1 ||
		intro.Conflicts[intents.ConflictReadWrite] != 1 {
		t.Fatalf("report.intro: %+v", intro)
	}
	if s := byName["prefix:tasks"]; s.Total != 5 || s.LastMinute != 0 {
		t.Fatalf("tasks: %+v", s)
	}
	if s := byName["pair:w2/w1"]; s.Total != 4 {
		t.Fatalf("pair w2/w1: %+v", s)
	}
	if s := byName["pair:w3/*"]; s.Merges != 1 {
		t.Fatalf("merges of w3: %+v", s)
	}
	// The recent spots come first, then the older by total.
	if top[0].LastMinute != 4 || top[len(top)-1].LastMinute != 0 {
		t.Fatalf("order: %+v", top)
	}
	if got := h.Top(now, 2); len(got) != 2 {
		t.Fatalf("Top(2) returned %d", len(got))
	}
	// A minute later nothing is recent.
	for _, s := range h.Top(now.Add(time.Minute), 0) {
		if s.LastMinute != 0 {
			t.Fatalf("%s still recent a minute later: %+v", s.Name, s)
		}
	}
}

// A lost precondition — the loser of two agents claiming one task — is
// counted under the prefixes of the paths its intent named, once each, in
// the totals and the last minute, with when it came.
func TestHotspotsPreconditions(t *testing.T) {
	h := NewHotspots()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lost := &intents.Decision{Agent: "w2", Outcome: intents.OutcomeRejected, Reason: intents.ReasonPreconditionFailed,
		Versions: map[string]uint64{"tasks.t1.owner": 1, "tasks.t1.status": 1}}
	h.Observe(t0, lost)
	h.Observe(t0.Add(2*time.Second), lost)
	h.Observe(t0.Add(2*time.Second), &intents.Decision{Agent: "w3", Outcome: intents.OutcomeRejected,
		Reason: intents.ReasonInvalid, Versions: map[string]uint64{"tasks.t1.owner": 1}})
	top := h.Top(t0.Add(3*time.Second), 0)
	if len(top) != 2 {
		t.Fatalf("top: %+v", top)
	}
	for _, s := range top {
		if s.Kind != SpotPrefix || (s.Name != "tasks" && s.Name != "tasks.t1") || s.Preconditions != 2 || s.Total != 2 ||
			s.LastMinute != 2 || !s.Last.Equal(t0.Add(2*time.Second)) {
			t.Errorf("spot %+v", s)
		}
	}
	if top := h.Top(t0.Add(2*time.Minute), 0); top[0].LastMinute != 0 || top[0].Total != 2 {
		t.Errorf("two minutes later: %+v", top[0])
	}
}

// A lost precondition that names whom it lost to (a conflict of kind
// precondition) counts for the pair too, as a lost precondition and not a
// conflict; its prefixes count it once, as any precondition_failed.
func TestHotspotsPreconditionPair(t *testing.T) {
	h := NewHotspots()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h.Observe(t0, &intents.Decision{Agent: "w2", Outcome: intents.OutcomeRejected, Reason: intents.ReasonPreconditionFailed,
		Conflicts: []intents.Conflict{{Path: "tasks.t1.owner", Kind: intents.ConflictPrecondition, WithAgent: "w1"}},
		Versions:  map[string]uint64{"tasks.t1.owner": 1}})
	got := map[string]Spot{}
	for _, s := range h.Top(t0, 0) {
		got[s.Kind+" "+s.Name] = s
	}
	if len(got) != 3 {
		t.Fatalf("spots: %+v", got)
	}
	for _, k := range []string{"prefix tasks", "prefix tasks.t1", "pair w2/w1"} {
		if s := got[k]; s.Preconditions != 1 || s.Total != 1 || len(s.Conflicts) != 0 || !s.Last.Equal(t0) {
			t.Errorf("%s: %+v", k, s)
		}
	}
}
