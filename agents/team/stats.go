package team

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/coagent/coagent/intents"
)

// Stats counts what a run decided. Fold in decisions with AddDecision (what
// the agents were told: Result.Told) or the events of the log with AddEvent
// (what the coordinator recorded); either way a decision delivered or
// logged more than once — a resent duplicate, a decision that came both on
// the subscription and in an API reply — counts once. The zero value is
// ready to use; it is not safe for concurrent use.
type Stats struct {
	// Intents is how many distinct intents were decided.
	Intents int
	// Decisions counts decisions, interim ones (queued, escalated)
	// included: an intent that waited has two.
	Decisions int
	// Outcomes counts decisions by outcome.
	Outcomes map[intents.Outcome]int
	// Reasons counts rejections by reason.
	Reasons map[intents.Reason]int
	// Conflicts counts the conflicts decisions named, by kind; one intent's
	// conflict on one path with one transaction counts once, however many
	// of its decisions repeat it.
	Conflicts map[intents.ConflictKind]int
	// Merges counts decisions whose merged_with named a disjoint edit of
	// the same document.
	Merges int
	// Waits counts intents parked behind a transaction (queued), and
	// Escalations those sent to the arbiters (escalated), and Approvals
	// those held for people's approval (escalated on a conflict of kind
	// approval).
	Waits, Escalations, Approvals int

	// The log alone records these; AddDecision leaves them alone.

	// Events is how many events AddEvent saw.
	Events int
	// Notices counts advisories sent to agents (someone waits on your
	// transaction, your lease runs out).
	Notices int
	// Resolutions counts the arbiter resolutions accepted, and Votes the
	// approvers' votes.
	Resolutions, Votes int

	intentSeen   map[string]bool
	decisionSeen map[decisionKey]bool
	conflictSeen map[conflictKey]bool
}

type decisionKey struct {
	intent  string
	outcome intents.Outcome
}

type conflictKey struct {
	intent string
	c      intents.Conflict
}

// AddDecision counts d, unless the same outcome of its intent was counted
// already. A duplicate counts when it is the first of its outcome: the
// answer to an intent sent again is the recorded decision, marked
// duplicate, and may be how its agent first learns of it.
func (s *Stats) AddDecision(d *intents.Decision) {
	if d == nil {
		return
	}
	if s.decisionSeen == nil {
		s.decisionSeen, s.intentSeen, s.conflictSeen = map[decisionKey]bool{}, map[string]bool{}, map[conflictKey]bool{}
		s.Outcomes, s.Reasons, s.Conflicts = map[intents.Outcome]int{}, map[intents.Reason]int{}, map[intents.ConflictKind]int{}
	}
	k := decisionKey{d.Intent, d.Outcome}
	if s.decisionSeen[k] {
		return
	}
	s.decisionSeen[k] = true
	if !s.intentSeen[d.Intent] {
		s.intentSeen[d.Intent] = true
		s.Intents++
	}
	s.Decisions++
	s.Outcomes[d.Outcome]++
	switch d.Outcome {
	case intents.OutcomeRejected:
		s.Reasons[d.Reason]++
	case intents.OutcomeQueued:
		s.Waits++
	case intents.OutcomeEscalated:
		if len(d.Conflicts) > 0 && d.Conflicts[0].Kind == intents.ConflictApproval {
			s.Approvals++
		} else {
			s.Escalations++
		}
	}
	for _, c := range d.Conflicts {
		ck := conflictKey{d.Intent, c}
		if !s.conflictSeen[ck] {
			s.conflictSeen[ck] = true
			s.Conflicts[c.Kind]++
		}
	}
	if len(d.MergedWith) > 0 {
		s.Merges++
	}
}

// AddEvent counts one event of the log: its decision, notice or
// resolution.
func (s *Stats) AddEvent(ev *intents.Event) {
	s.Events++
	switch {
	case ev.Decision != nil:
		s.AddDecision(ev.Decision)
	case ev.Notice != nil:
		s.Notices++
	case ev.Resolution != nil:
		s.Resolutions++
	case ev.Vote != nil:
		s.Votes++
	}
}

// SameDecisions reports whether s and o counted the same decisions: the
// same intents, outcomes, reasons, conflicts, merges, waits and
// escalations. It is how the demo checks that what the agents were told is
// what the log recorded.
func (s *Stats) SameDecisions(o *Stats) bool {
	return s.Intents == o.Intents && s.Decisions == o.Decisions && s.Merges == o.Merges &&
		s.Waits == o.Waits && s.Escalations == o.Escalations && s.Approvals == o.Approvals &&
		maps.Equal(s.Outcomes, o.Outcomes) && maps.Equal(s.Reasons, o.Reasons) && maps.Equal(s.Conflicts, o.Conflicts)
}

// Percentile returns the q-quantile (0 ≤ q ≤ 1) of ds, by the nearest rank;
// zero for none. ds is not changed.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
