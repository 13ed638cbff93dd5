package rules

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/intents"
)

// The record kinds a rule may give the paths it matches. Each is a JSON
// object with a shape of its own and rules for how it may change, so that
// what agents know and decide is kept as knowledge, not as last-writer-wins
// values.
const (
	// KindFact: {claim, evidence: [references…]}. A fact must carry
	// evidence. A new fact on the same subject (path) with the same claim
	// refines it; one with another claim supersedes it only when it names
	// the version it supersedes (supersedes: n) — otherwise the two facts
	// contradict each other and the intent goes to the arbiter. Every
	// version stays readable in the log. A fact is never deleted. A fact
	// promoted from a hypothesis names it (promoted_from: path) and states
	// the same claim.
	KindFact = "fact"
	// KindHypothesis: {claim, confidence in [0, 1]}. It becomes a fact only
	// by a fact that names it in promoted_from.
	KindHypothesis = "hypothesis"
	// KindTask: {owner?, status?, …}. An agent claims a task for itself
	// only; once owned, only its owner changes it (or hands it over). The
	// rule's transitions, if any, govern status.
	KindTask = "task"
	// KindArtifact: {producer, digest, state: candidate|accepted}. Its
	// producer creates it as a candidate; accepted is final.
	KindArtifact = "artifact"
	// KindDecision: {…, revokes?: path}. Never overwritten nor deleted: a
	// new decision that names it in revokes revokes it.
	KindDecision = "decision"
)

var recordKinds = []string{KindFact, KindHypothesis, KindTask, KindArtifact, KindDecision}

// checkRecord checks the record at p of kind r.Kind, from ov (ook: it
// existed) to nv (nok: it exists after), written by agent; operator says
// agent is one of a task rule's operators, who may change a task's owner.
func (r *compiled) checkRecord(p string, ov any, ook bool, nv any, nok bool, agent string, operator bool, before cond.Reader) *Violation {
	refuse := func(reason intents.Reason, format string, args ...any) *Violation {
		return &Violation{Reason: reason, Detail: fmt.Sprintf("%s: %s (%s, rules[%d] %s)",
			p, fmt.Sprintf(format, args...), article(r.Kind), r.index, r.Pattern)}
	}
	old, _ := ov.(map[string]any)
	if !nok {
		switch r.Kind {
		case KindFact:
			return refuse(intents.ReasonIllegalTransition, "a fact is superseded by a new one, never deleted")
		case KindDecision:
			return refuse(intents.ReasonIllegalTransition, "a decision is revoked by a new one, never deleted")
		case KindTask, KindArtifact:
			if owner := str(old, ownerField(r.Kind)); owner != "" && owner != agent && !operator {
				return refuse(intents.ReasonUnauthorized, "only %s, its %s, may remove it", owner, ownerField(r.Kind))
			}
		}
		return nil
	}
	rec, ok := nv.(map[string]any)
	if !ok {
		return refuse(intents.ReasonInvalid, "a %s is an object, not %s", r.Kind, intents.Clip(format(nv), 80))
	}
	switch r.Kind {
	case KindFact:
		if _, ok := rec["claim"]; !ok {
			return refuse(intents.ReasonInvalid, "a fact states a claim")
		}
		if !references(rec["evidence"]) {
			return refuse(intents.ReasonInvalid, "a fact carries evidence: a non-empty list of references")
		}
		if from, ok := rec["promoted_from"]; ok {
			path, _ := from.(string)
			h, exists := before.Get(path)
			hyp, _ := h.(map[string]any)
			if path == "" || !exists || hyp == nil || !equalJSON(hyp["claim"], rec["claim"]) {
				return refuse(intents.ReasonInvalid, "promoted_from %s names no existing record with the same claim", intents.Clip(format(from), 80))
			}
		}
		// Last of a fact's checks: a contradiction leaves nothing of the
		// record unchecked.
		if ook && old != nil && !equalJSON(old["claim"], rec["claim"]) {
			if n, ok := rec["supersedes"].(float64); ok && uint64(n) == before.Version(p) {
				return nil
			}
			return &Violation{Contradiction: true, Path: p, Detail: fmt.Sprintf(
				"%s: the claim %s contradicts the fact in force, %s (version %d); a fact that supersedes it names that version in supersedes",
				p, intents.Clip(format(rec["claim"]), 80), intents.Clip(format(old["claim"]), 80), before.Version(p))}
		}
	case KindHypothesis:
		if _, ok := rec["claim"]; !ok {
			return refuse(intents.ReasonInvalid, "a hypothesis states a claim")
		}
		if c, ok := rec["confidence"].(float64); !ok || c < 0 || c > 1 {
			return refuse(intents.ReasonInvalid, "a hypothesis carries a confidence between 0 and 1, not %s", intents.Clip(format(rec["confidence"]), 40))
		}
	case KindTask:
		if v := checkEffects(p, old, rec); v != nil {
			return v
		}
		// A task's tries are the coordinator's count (Rule.MaxRetries):
		// an agent that could set them would never be a dead letter.
		if r.MaxRetries > 0 && !operator && !equalJSON(old["tries"], rec["tries"]) {
			return refuse(intents.ReasonUnauthorized, "tries is the coordinator's count of the task's tries; only the rule's operators change it (an operator's retry puts it back to 0)")
		}
		was, now := str(old, "owner"), str(rec, "owner")
		switch {
		case operator:
		case was != "" && was != agent:
			return refuse(intents.ReasonUnauthorized, "owned by %s; only its owner changes it", was)
		case was == "" && now != "" && now != agent:
			return refuse(intents.ReasonUnauthorized, "an agent claims a task for itself, not for %s", now)
		}
		if r.states != nil {
			if v := r.transition(p+".status", old["status"], old != nil && old["status"] != nil, rec["status"], rec["status"] != nil); v != nil {
				return v
			}
		}
	case KindArtifact:
		state := str(rec, "state")
		if str(rec, "producer") == "" || str(rec, "digest") == "" || state != "candidate" && state != "accepted" {
			return refuse(intents.ReasonInvalid, "an artifact has a producer, a digest and a state, candidate or accepted")
		}
		if !ook || old == nil {
			if str(rec, "producer") != agent {
				return refuse(intents.ReasonUnauthorized, "an artifact is created by its producer, not for %s", str(rec, "producer"))
			}
			if state != "candidate" {
				return refuse(intents.ReasonIllegalTransition, "an artifact starts as a candidate")
			}
			return nil
		}
		if str(old, "state") == "accepted" {
			return refuse(intents.ReasonIllegalTransition, "an accepted artifact is final")
		}
		if str(old, "producer") != str(rec, "producer") || str(old, "digest") != str(rec, "digest") && agent != str(old, "producer") {
			return refuse(intents.ReasonUnauthorized, "only its producer, %s, changes what it is", str(old, "producer"))
		}
	case KindDecision:
		if ook {
			return refuse(intents.ReasonIllegalTransition, "a decision is never overwritten; a new decision revokes it (revokes: %q)", p)
		}
		if rv, ok := rec["revokes"]; ok {
			path, _ := rv.(string)
			if _, exists := before.Get(path); path == "" || !exists {
				return refuse(intents.ReasonInvalid, "revokes %s names no existing record", intents.Clip(format(rv), 80))
			}
		}
	}
	return nil
}

// The states of a task's effect records ({effects: {key: {status, …}}}):
// its owner declares an effect pending before an external action and
// confirmed or failed after it; an effect still pending when the claim
// ends is unknown until someone declares it (compensated, if it was
// undone).
const (
	EffectPending     = "pending"
	EffectConfirmed   = "confirmed"
	EffectFailed      = "failed"
	EffectCompensated = "compensated"
)

var effectStates = []string{EffectPending, EffectConfirmed, EffectFailed, EffectCompensated}

// checkEffects checks a task's effect records: each an object with a
// status among effectStates, and only a pending one may change.
func checkEffects(p string, old, rec map[string]any) *Violation {
	v, ok := rec["effects"]
	if !ok {
		return nil
	}
	effects, ok := v.(map[string]any)
	if !ok {
		return &Violation{Reason: intents.ReasonInvalid, Detail: fmt.Sprintf("%s.effects: an object of effect records by key, not %s", p, intents.Clip(format(v), 80))}
	}
	was, _ := old["effects"].(map[string]any)
	for _, key := range slices.Sorted(maps.Keys(effects)) {
		e, _ := effects[key].(map[string]any)
		status := str(e, "status")
		if !slices.Contains(effectStates, status) {
			return &Violation{Reason: intents.ReasonInvalid, Detail: fmt.Sprintf("%s.effects.%s: an effect record has a status, one of %s; not %s",
				p, key, strings.Join(effectStates, ", "), intents.Clip(format(effects[key]), 80))}
		}
		prev, _ := was[key].(map[string]any)
		if from := str(prev, "status"); from != "" && from != EffectPending && !equalJSON(prev, e) {
			return &Violation{Reason: intents.ReasonIllegalTransition, Detail: fmt.Sprintf("%s.effects.%s is %s: only a pending effect changes", p, key, from)}
		}
	}
	return nil
}

// PendingEffects returns the keys of the effect records of the task
// record value v still pending, sorted.
func PendingEffects(v any) []string {
	rec, _ := v.(map[string]any)
	effects, _ := rec["effects"].(map[string]any)
	var out []string
	for key, e := range effects {
		if m, _ := e.(map[string]any); str(m, "status") == EffectPending {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

func article(kind string) string {
	if strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}

func ownerField(kind string) string {
	if kind == KindArtifact {
		return "producer"
	}
	return "owner"
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

// references reports whether v is a non-empty list of non-empty strings.
func references(v any) bool {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return false
	}
	for _, x := range list {
		if s, ok := x.(string); !ok || strings.TrimSpace(s) == "" {
			return false
		}
	}
	return true
}
