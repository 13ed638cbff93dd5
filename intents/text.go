package intents

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Clip returns s cut to at most n bytes, with "…" after a cut: how an
// error message quotes a value, a reply or a model's answer of unbounded
// size. The cut falls on a rune boundary, so a clipped string stays valid
// UTF-8 (and so can be less than n bytes).
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// OneLine returns s with each run of white space, line breaks among
// them, made one space: a library's multi-line message (a JSON Schema
// validator's tree of causes) as one line of an error.
func OneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// JSONType names the JSON type of a decoded JSON value for messages: "a
// string", "an object", "null".
func JSONType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64, int, int64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}
