package intents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// HeaderTraceparent is the W3C Trace Context header an agent may send with
// an intent, on an API submit or on a message of the intents stream: every
// event the intent causes records its trace id. The name is the W3C one;
// the coordinator matches it in any case, as HTTP would.
const HeaderTraceparent = "traceparent"

// MetaTraceparent is the member of an intent's meta that carries a
// traceparent when no header can (a stored intent republished, a client
// without headers). A header wins over it.
const MetaTraceparent = "traceparent"

// ErrTraceparent is wrapped by every error of ParseTraceparent.
var ErrTraceparent = errors.New("not a W3C traceparent")

// ParseTraceparent reads a W3C traceparent
// (https://www.w3.org/TR/trace-context/#traceparent-header), the four
// dash-separated fields version-traceid-parentid-flags, and returns its
// trace id, 32 lowercase hex digits. It follows the recommendation's rules:
// lowercase hex only, a trace id and a parent id that are not all zeros,
// version ff refused, and a version 00 header exactly 55 characters; a
// later version may be longer, with more fields after the flags. An error
// wraps ErrTraceparent and says which part is wrong.
func ParseTraceparent(s string) (string, error) {
	bad := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("%w: %s", ErrTraceparent, fmt.Sprintf(format, args...))
	}
	if len(s) < 55 {
		return bad("%d characters, a traceparent has 55 (version-traceid-parentid-flags)", len(s))
	}
	parts := strings.SplitN(s, "-", 5)
	if len(parts) < 4 {
		return bad("%d dash-separated fields, want 4 (version-traceid-parentid-flags)", len(parts))
	}
	version, trace, parent, flags := parts[0], parts[1], parts[2], parts[3]
	for _, f := range []struct {
		name, value string
		n           int
	}{{"version", version, 2}, {"trace-id", trace, 32}, {"parent-id", parent, 16}, {"trace-flags", flags, 2}} {
		if len(f.value) != f.n || !lowerHex(f.value) {
			return bad("%s %s is not %d lowercase hex digits", f.name, noted(f.value), f.n)
		}
	}
	switch {
	case version == "ff":
		return bad("version ff is forbidden")
	case version == "00" && len(s) != 55:
		return bad("version 00 has nothing after the flags, and this one has %s", noted(s[55:]))
	case strings.Count(trace, "0") == len(trace):
		return bad("trace-id is all zeros")
	case strings.Count(parent, "0") == len(parent):
		return bad("parent-id is all zeros")
	}
	return trace, nil
}

// traceNoted is how much of a traceparent, or of one of its parts, a
// note quotes. A header is as large as the message allows, and the note
// is recorded on the intent's event: quoted whole, a 900 KB header would
// be stored whole, past the limit on the intent's size.
const traceNoted = 64

// noted quotes s for a note about a traceparent that cannot be used: at
// most traceNoted bytes of it, and its length when it is cut.
func noted(s string) string {
	if len(s) <= traceNoted {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q (%d bytes)", Clip(s, traceNoted), len(s))
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Trace finds the trace of an intent: the traceparent of its header (given
// values: every value of the header; nil when it was not sent), else the
// string member traceparent of its meta (a JSON object, or nil). It
// returns the trace id, and, for a traceparent that was given but cannot
// be used, a sentence naming where it came from and its value. Tracing
// never decides an intent: one that cannot be used is recorded, not
// refused (see docs/wire.md).
func Trace(header []string, meta json.RawMessage) (trace, problem string) {
	var problems []string
	switch {
	case len(header) > 1:
		var quoted []string
		for i, h := range header {
			if i == 4 {
				quoted = append(quoted, "…")
				break
			}
			quoted = append(quoted, noted(h))
		}
		problems = append(problems, fmt.Sprintf("header %s given %d times (%s): a request has one", HeaderTraceparent, len(header), strings.Join(quoted, ", ")))
	case len(header) == 1:
		id, err := ParseTraceparent(header[0])
		if err == nil {
			return id, ""
		}
		problems = append(problems, fmt.Sprintf("header %s = %s: %v", HeaderTraceparent, noted(header[0]), err))
	}
	if v, ok := metaTraceparent(meta); ok {
		s, isString := v.(string)
		if !isString {
			raw, _ := json.Marshal(v)
			problems = append(problems, fmt.Sprintf("meta.%s = %s: %v: not a string", MetaTraceparent, Clip(string(raw), traceNoted), ErrTraceparent))
		} else if id, err := ParseTraceparent(s); err != nil {
			problems = append(problems, fmt.Sprintf("meta.%s = %s: %v", MetaTraceparent, noted(s), err))
		} else {
			trace = id
		}
	}
	return trace, strings.Join(problems, "; ")
}

// metaTraceparent returns the value of meta's member traceparent. Most
// metas have none, and they are not decoded.
func metaTraceparent(meta json.RawMessage) (any, bool) {
	if !bytes.Contains(meta, []byte(`"`+MetaTraceparent+`"`)) {
		return nil, false
	}
	var m map[string]any
	if json.Unmarshal(meta, &m) != nil {
		return nil, false
	}
	v, ok := m[MetaTraceparent]
	return v, ok
}

// ValidTraceID reports whether s is a trace id as events record it: 32
// lowercase hex digits, not all zeros.
func ValidTraceID(s string) bool {
	return len(s) == 32 && lowerHex(s) && strings.Count(s, "0") != len(s)
}

// ParseTraceID reads what a search by trace names: a trace id (32
// lowercase hex digits, not all zeros) or a whole traceparent, whose trace
// id it returns. An error wraps ErrTraceparent.
func ParseTraceID(s string) (string, error) {
	if len(s) == 32 {
		if !ValidTraceID(s) {
			return "", fmt.Errorf("%w: trace-id %q is not 32 lowercase hex digits, not all zeros", ErrTraceparent, s)
		}
		return s, nil
	}
	return ParseTraceparent(s)
}
