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
