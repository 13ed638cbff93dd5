package conflict

import (
	"cmp"
	"slices"
	"time"

	"github.com/coagent/coagent/intents"
)

// Hotspots counts where conflicts happen — the conflict dashboard: per path
// prefix (board and document) and per pair of agents, the conflicts by kind,
// the lost preconditions (the race of two agents claiming one task: the
// loser's precondition no longer holds), the merges, waits and
// escalations, overall and over the last minute, and when the last came. It is
// fed decisions with the time they were made, so it is pure and a replay of
// the log rebuilds it. It is not safe for concurrent use.
type Hotspots struct {
	spots map[spotKey]*spot
}

// The kinds of spot.
const (
	SpotPrefix = "prefix" // a board or a document
	SpotPair   = "pair"   // an agent and the agent it collided with
)

type spotKey struct{ kind, name string }

// spot is one place's counts. recent holds a count per second of the last
// minute, as a ring indexed by unix second.
type spot struct {
	Counts
	recent [60]struct {
		sec int64
		n   int
	}
}

// Counts are the totals of one place.
type Counts struct {
	Conflicts map[intents.ConflictKind]int `json:"conflicts"`
	// Preconditions are the intents rejected precondition_failed that
	// named a path here, or, for a pair, that lost to the other agent's
	// change (a conflict of kind precondition): most often a claim another
	// agent won first.
	Preconditions int `json:"preconditions"`
	Merges        int `json:"merges"`
	Waits         int `json:"waits"`
	Escalations   int `json:"escalations"`
	// Last is when the last conflict or lost precondition came.
	Last time.Time `json:"last"`
}

// NewHotspots returns empty counts.
func NewHotspots() *Hotspots { return &Hotspots{spots: map[spotKey]*spot{}} }

func (h *Hotspots) at(kind, name string) *spot {
	k := spotKey{kind, name}
	s := h.spots[k]
	if s == nil {
		s = &spot{Counts: Counts{Conflicts: map[intents.ConflictKind]int{}}}
		h.spots[k] = s
	}
	return s
}

func (s *spot) tick(now time.Time) {
	sec := now.Unix()
	r := &s.recent[sec%60]
	if r.sec != sec {
		r.sec, r.n = sec, 0
	}
	r.n++
	s.Last = now
}

func (s *spot) lastMinute(now time.Time) int {
	n := 0
	for _, r := range s.recent {
		if d := now.Unix() - r.sec; d >= 0 && d < 60 {
			n += r.n
		}
	}
	return n
}

// Observe counts one decision made at now: its conflicts (with the paths'
// board and document and the pair of agents), whether it was queued or
// escalated, and whether it merged with others.
func (h *Hotspots) Observe(now time.Time, d *intents.Decision) {
	if d.Duplicate {
		return
	}
	for _, c := range d.Conflicts {
		if c.Kind == intents.ConflictPrecondition {
			// A lost precondition: its prefixes are counted below, as every
			// precondition_failed's; this names the agent it lost to.
			if c.WithAgent != "" {
				s := h.at(SpotPair, d.Agent+"/"+c.WithAgent)
				s.Preconditions++
				s.tick(now)
			}
			continue
		}
		for _, name := range prefixesOf(c.Path) {
			h.count(now, SpotPrefix, name, d, c.Kind)
		}
		if c.WithAgent != "" {
			h.count(now, SpotPair, d.Agent+"/"+c.WithAgent, d, c.Kind)
		}
	}
	if d.Outcome == intents.OutcomeRejected && d.Reason == intents.ReasonPreconditionFailed {
		// The decision names the intent's paths in its versions, not which
		// of them the condition read: each prefix among them counts once.
		var seen []string
		for p := range d.Versions {
			for _, name := range prefixesOf(p) {
				if !slices.Contains(seen, name) {
					seen = append(seen, name)
				}
			}
		}
		slices.Sort(seen)
		for _, name := range seen {
			s := h.at(SpotPrefix, name)
			s.Preconditions++
			s.tick(now)
		}
	}
	if len(d.MergedWith) > 0 {
		// Merges are counted under the agent alone: the decision does not
		// name the paths it merged on.
		h.at(SpotPair, d.Agent+"/*").Merges++
	}
}

func (h *Hotspots) count(now time.Time, kind, name string, d *intents.Decision, ck intents.ConflictKind) {
	s := h.at(kind, name)
	s.Conflicts[ck]++
	switch d.Outcome {
	case intents.OutcomeQueued:
		s.Waits++
	case intents.OutcomeEscalated:
		s.Escalations++
	}
	s.tick(now)
}

// prefixesOf returns the board and the document of a path.
func prefixesOf(path string) []string {
	board, doc := intents.Board(path), intents.Document(path)
	if board == doc {
		return []string{board}
	}
	return []string{board, doc}
}

// Spot is one row of the dashboard.
type Spot struct {
	Kind string `json:"kind"` // prefix or pair
	Name string `json:"name"` // a board or document; "agent/other agent"
	Counts
	Total      int `json:"total"`       // conflicts and lost preconditions overall
	LastMinute int `json:"last_minute"` // conflicts and lost preconditions in the minute before now
}

// Top returns the n places with the most conflicts in the last minute, then
// overall, then by name; n <= 0 returns them all.
func (h *Hotspots) Top(now time.Time, n int) []Spot {
	out := make([]Spot, 0, len(h.spots))
	for k, s := range h.spots {
		total := s.Preconditions
		for _, c := range s.Conflicts {
			total += c
		}
		cp := s.Counts
		cp.Conflicts = make(map[intents.ConflictKind]int, len(s.Conflicts))
		for kind, c := range s.Conflicts {
			cp.Conflicts[kind] = c
		}
		out = append(out, Spot{Kind: k.kind, Name: k.name, Counts: cp, Total: total, LastMinute: s.lastMinute(now)})
	}
	slices.SortFunc(out, func(a, b Spot) int {
		if c := cmp.Compare(b.LastMinute, a.LastMinute); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Total, a.Total); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}
