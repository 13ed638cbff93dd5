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
// A decision as the coordinator writes it for the usual outcomes (plain
// ASCII strings, versions, merges, conflicts) is read by hand. Anything
// else (an escape, a byte outside ASCII, a control character, null, a
// lease's time, a warning, a name given twice or unknown, a number that is
// not a plain uint64, an error) is left to go-json-experiment, from the
// start, so the hand-written reader only has to be right for what it
// accepts.
func UnmarshalDecision(data []byte, d *Decision) error {
	*d = Decision{}
	var r decisionReader
	if r.decision(data, d) {
		return nil
	}
	*d = Decision{}
	return jsonv2.Unmarshal(data, d, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
}

// decisionReader reads the subset of JSON UnmarshalDecision reads by hand.
// Each method reports false where the input leaves that subset; nothing it
// reads is then kept.
type decisionReader struct {
	data []byte
	pos  int
	// text is data as one string, made once: the strings decoded are
	// pieces of it rather than an allocation each.
	text string
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

func (r *decisionReader) decision(data []byte, d *Decision) bool {
	r.data, r.pos, r.text = data, 0, string(data)
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
	r.space()
	return ok && r.pos == len(r.data)
}

func (r *decisionReader) space() {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// byte consumes c, after white space.
func (r *decisionReader) byte(c byte) bool {
	r.space()
	if r.pos < len(r.data) && r.data[r.pos] == c {
		r.pos++
		return true
	}
	return false
}

// plain reads a string of ASCII with no control character and nothing
// escaped, and returns it as a piece of r.text.
func (r *decisionReader) plain() (string, bool) {
	if !r.byte('"') {
		return "", false
	}
	for i := r.pos; i < len(r.data); i++ {
		switch c := r.data[i]; {
		case c == '"':
			s := r.text[r.pos:i]
			r.pos = i + 1
			return s, true
		case c < ' ' || c > 0x7f || c == '\\':
			return "", false
		}
	}
	return "", false
}

func (r *decisionReader) str(dst *string) bool {
	s, ok := r.plain()
	if ok {
		*dst = s
	}
	return ok
}

// uint reads a number that is a plain uint64: digits, no leading zero,
// no sign, fraction or exponent, and no overflow.
func (r *decisionReader) uint(dst *uint64) bool {
	r.space()
	start, n := r.pos, uint64(0)
	for r.pos < len(r.data) && r.data[r.pos] >= '0' && r.data[r.pos] <= '9' {
		digit := uint64(r.data[r.pos] - '0')
		if n > (1<<64-1-digit)/10 {
			return false
		}
		n = n*10 + digit
		r.pos++
	}
	switch digits := r.pos - start; {
	case digits == 0, digits > 1 && r.data[start] == '0':
		return false
	}
	if r.pos < len(r.data) {
		switch r.data[r.pos] {
		case '.', 'e', 'E':
			return false
		}
	}
	*dst = n
	return true
}

func (r *decisionReader) bool(dst *bool) bool {
	r.space()
	rest := r.data[r.pos:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		*dst, r.pos = true, r.pos+4
	case len(rest) >= 5 && string(rest[:5]) == "false":
		*dst, r.pos = false, r.pos+5
	default:
		return false
	}
	return true
}

// object reads an object, handing each member's name to member, which
// reads its value.
func (r *decisionReader) object(member func(name string) bool) bool {
	if !r.byte('{') {
		return false
	}
	if r.byte('}') {
		return true
	}
	for {
		name, ok := r.plain()
		if !ok || !r.byte(':') || !member(name) {
			return false
		}
		if r.byte('}') {
			return true
		}
		if !r.byte(',') {
			return false
		}
	}
}

// array reads an array, each element with elem.
func (r *decisionReader) array(elem func() bool) bool {
	if !r.byte('[') {
		return false
	}
	if r.byte(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if r.byte(']') {
			return true
		}
		if !r.byte(',') {
			return false
		}
	}
}

func (r *decisionReader) strs(dst *[]string) bool {
	ss := []string{}
	ok := r.array(func() bool {
		s, ok := r.plain()
		ss = append(ss, s)
		return ok
	})
	*dst = ss
	return ok
}

func (r *decisionReader) versions(dst *map[string]uint64) bool {
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

func (r *decisionReader) conflicts(dst *[]Conflict) bool {
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
