package arbiter

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/coagent/coagent/intents"
)

// ErrBadResolution is what a *ResolutionError is (errors.Is): a resolution
// that does not fit its case.
var ErrBadResolution = errors.New("arbiter: resolution does not fit its case")

// ResolutionError lists every problem Check found in a resolution, in the
// order of the resolution's fields. errors.Is(err, ErrBadResolution) holds
// for it.
type ResolutionError struct {
	Problems []string
}

func (e *ResolutionError) Error() string {
	return ErrBadResolution.Error() + ": " + strings.Join(e.Problems, "; ")
}

// Is makes a *ResolutionError match ErrBadResolution.
func (e *ResolutionError) Is(target error) bool { return target == ErrBadResolution }

// Check reports what makes res an invalid answer to the case c (SPEC §5),
// as a *ResolutionError listing every problem, or nil. It is the one rule
// both sides apply: the coordinator refuses what it finds (with what only
// the coordinator knows on top: whether the case is still open, whether a
// replacement's id is taken), and an arbiter checks its answer before it
// sends it.
//
// A resolution fits its case when it names the case's id and a valid
// arbiter name, gives a rationale, has at least one winner, loser or
// replacement, names only intents of the case (see IDs) and none both as a
// winner and a loser, does not let the escalated intent and a transaction
// in flight both win, and has as its replacement, if any, a valid apply
// that the escalated intent does not also win against. The escalated intent
// wins when it is named a winner, and also when it is not named a loser,
// a transaction in its way loses and there is no replacement.
func Check(c *intents.Escalation, res *intents.Resolution) error {
	return asError(problems(c, res, true))
}

func asError(probs []string) error {
	if len(probs) == 0 {
		return nil
	}
	return &ResolutionError{Problems: probs}
}

// problems lists what Check finds wrong in res; the arbiter's name only if
// withArbiter (a model's answer has none yet: RunArbiter fills it).
func problems(c *intents.Escalation, res *intents.Resolution, withArbiter bool) []string {
	switch {
	case c == nil:
		return []string{"no case"}
	case res == nil:
		return []string{"no resolution"}
	}
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if res.Escalation != c.ID {
		add("escalation %q, want %q", res.Escalation, c.ID)
	}
	if withArbiter && !intents.ValidSegment(res.Arbiter) {
		add("arbiter %q is not an agent name", res.Arbiter)
	}
	if res.Rationale == "" {
		add("rationale is missing")
	}
	if len(res.Winners)+len(res.Losers) == 0 && res.Replacement == nil {
		add("the resolution names no winner, no loser and no replacement")
	}
	ids := IDs(c)
	proposes := ids[1:] // the transactions' proposes: every id but the escalated intent's
	var named []string
	for _, id := range slices.Concat(res.Winners, res.Losers) {
		if slices.Contains(named, id) {
			continue
		}
		named = append(named, id)
		if !slices.Contains(ids, id) {
			add("%s is neither the escalated intent nor the propose of a transaction it conflicts with", id)
		}
		if slices.Contains(res.Winners, id) && slices.Contains(res.Losers, id) {
			add("%s both wins and loses", id)
		}
	}
	if r := res.Replacement; r != nil {
		if err := r.Validate(); err != nil {
			add("replacement: %v", err)
		} else if r.Kind != intents.KindApply {
			add("replacement: kind %s; a replacement is an apply", r.Kind)
		}
		if slices.Contains(res.Winners, c.ID) {
			add("the escalated intent cannot both win and be replaced")
		}
	}
	isPropose := func(id string) bool { return slices.Contains(proposes, id) }
	if EscalatedWins(c, res) && slices.ContainsFunc(res.Winners, isPropose) {
		add("the escalated intent and a transaction it conflicts with cannot both win; write a replacement")
	}
	return probs
}

// EscalatedWins reports whether res lets the case's escalated intent win:
// it is named a winner, or it is not named a loser while a transaction in
// its way loses and no replacement supersedes it.
func EscalatedWins(c *intents.Escalation, res *intents.Resolution) bool {
	if slices.Contains(res.Winners, c.ID) {
		return true
	}
	proposes := IDs(c)[1:]
	proposeLoses := slices.ContainsFunc(res.Losers, func(id string) bool { return slices.Contains(proposes, id) })
	return !slices.Contains(res.Losers, c.ID) && proposeLoses && res.Replacement == nil
}

// IDs returns the intent ids a resolution of c may name, the escalated
// intent's first, then those of the proposes that opened the transactions
// in flight it conflicts with (the holder's first), each once.
func IDs(c *intents.Escalation) []string {
	ids := []string{c.ID}
	add := func(id string) {
		if id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if c.Holder != nil {
		add(c.Holder.Intent)
	}
	for _, in := range c.Intents {
		if in != nil {
			add(in.ID)
		}
	}
	return ids
}
