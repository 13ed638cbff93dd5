package intents

import (
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// UnmarshalDecision decodes a decision as the coordinator encodes it, as
// json.Unmarshal would into a zero Decision, in a fraction of its time: an
// agent decodes one for every intent it sends. d is set to the decision
// whatever it held. Member names are matched exactly, as the coordinator
// writes them; a name given twice takes its last value, and invalid UTF-8
// is kept, as encoding/json does.
//
// A decision as the coordinator writes it for the usual outcomes (strings
// with no \u escape, plain uint64s, versions, merges, conflicts) is read by
// hand (plainReader). Anything else (a \u escape, invalid UTF-8, null, a
// lease's time, a warning, a name given twice or unknown, a number that is
// not a plain uint64, an error) is left to go-json-experiment, from the
// start.
func UnmarshalDecision(data []byte, d *Decision) error {
	*d = Decision{}
	var r plainReader
	if r.decision(data, d) {
		return nil
	}
	*d = Decision{}
	return jsonv2.Unmarshal(data, d, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
}

// The members of a decision read by hand, as bits of the set of those seen.
const (
	seenIntent = 1 << iota
	seenAgent
	seenOutcome
	seenReason
	seenDetail
	seenTxn
	seenFence
	seenConflicts
	seenVersions
	seenRev
	seenRetryable
	seenMergedWith
	seenDuplicate
)

func (r *plainReader) decision(data []byte, d *Decision) bool {
	r.reset(data)
	var seen uint
	ok := r.object(func(name string) bool {
		var bit uint
		ok := false
		switch name {
		case "intent":
			bit, ok = seenIntent, r.str((*string)(&d.Intent))
		case "agent":
			bit, ok = seenAgent, r.str(&d.Agent)
		case "outcome":
			bit, ok = seenOutcome, r.str((*string)(&d.Outcome))
		case "reason":
			bit, ok = seenReason, r.str((*string)(&d.Reason))
		case "detail":
			bit, ok = seenDetail, r.str(&d.Detail)
		case "txn":
			bit, ok = seenTxn, r.str(&d.Txn)
		case "fence":
			bit, ok = seenFence, r.uint(&d.Fence)
		case "conflicts":
			bit, ok = seenConflicts, r.conflicts(&d.Conflicts)
		case "versions":
			bit, ok = seenVersions, r.versions(&d.Versions)
		case "rev":
			bit, ok = seenRev, r.uint(&d.Rev)
		case "retryable":
			bit, ok = seenRetryable, r.bool(&d.Retryable)
		case "merged_with":
			bit, ok = seenMergedWith, r.strs(&d.MergedWith)
		case "duplicate":
			bit, ok = seenDuplicate, r.bool(&d.Duplicate)
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
	return ok && r.end()
}

func (r *plainReader) versions(dst *map[string]uint64) bool {
	vs := map[string]uint64{}
	ok := r.object(func(name string) bool {
		var v uint64
		if _, twice := vs[name]; twice || !r.uint(&v) {
			return false
		}
		vs[name] = v
		return true
	})
	*dst = vs
	return ok
}

func (r *plainReader) conflicts(dst *[]Conflict) bool {
	cs := []Conflict{}
	ok := r.array(func() bool {
		var c Conflict
		var seen uint
		ok := r.object(func(name string) bool {
			var bit uint
			ok := false
			switch name {
			case "path":
				bit, ok = 1, r.str(&c.Path)
			case "kind":
				bit, ok = 2, r.str((*string)(&c.Kind))
			case "with_txn":
				bit, ok = 4, r.str(&c.WithTxn)
			case "with_agent":
				bit, ok = 8, r.str(&c.WithAgent)
			}
			if !ok || seen&bit != 0 {
				return false
			}
			seen |= bit
			return true
		})
		cs = append(cs, c)
		return ok
	})
	*dst = cs
	return ok
}
