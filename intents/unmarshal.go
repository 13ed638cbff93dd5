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
// becomes U+FFFD, as encoding/json makes it.
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

func (r *plainReader) decision(data []byte, d *Decision) bool {
	r.reset(data)
	return r.object(func(name string) (uint, bool) {
		switch name {
		case "intent":
			return 1 << 0, r.str(&d.Intent)
		case "agent":
			return 1 << 1, r.str(&d.Agent)
		case "outcome":
			return 1 << 2, r.str((*string)(&d.Outcome))
		case "reason":
			return 1 << 3, r.str((*string)(&d.Reason))
		case "detail":
			return 1 << 4, r.str(&d.Detail)
		case "txn":
			return 1 << 5, r.str(&d.Txn)
		case "fence":
			return 1 << 6, r.uint(&d.Fence)
		case "conflicts":
			return 1 << 7, r.conflicts(&d.Conflicts)
		case "versions":
			return 1 << 8, r.versions(&d.Versions)
		case "rev":
			return 1 << 9, r.uint(&d.Rev)
		case "retryable":
			return 1 << 10, r.bool(&d.Retryable)
		case "merged_with":
			return 1 << 11, r.strs(&d.MergedWith)
		case "duplicate":
			return 1 << 12, r.bool(&d.Duplicate)
		}
		return 0, false
	}) && r.end()
}

func (r *plainReader) versions(dst *map[string]uint64) bool {
	vs := map[string]uint64{}
	ok := r.object(func(name string) (uint, bool) {
		var v uint64
		if _, twice := vs[name]; twice || !r.uint(&v) {
			return 0, false
		}
		vs[name] = v
		return 0, true
	})
	*dst = vs
	return ok
}

func (r *plainReader) conflicts(dst *[]Conflict) bool {
	cs := []Conflict{}
	ok := r.array(func() bool {
		var c Conflict
		ok := r.object(func(name string) (uint, bool) {
			switch name {
			case "path":
				return 1 << 0, r.str(&c.Path)
			case "kind":
				return 1 << 1, r.str((*string)(&c.Kind))
			case "with_txn":
				return 1 << 2, r.str(&c.WithTxn)
			case "with_agent":
				return 1 << 3, r.str(&c.WithAgent)
			}
			return 0, false
		})
		cs = append(cs, c)
		return ok
	})
	*dst = cs
	return ok
}
