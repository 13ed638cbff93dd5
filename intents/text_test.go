package intents_test

import (
	"testing"
	"unicode/utf8"

	"github.com/coagent/coagent/intents"
)

func TestClip(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"a longer one", 6, "a long…"},
		{"héllo", 2, "h…"}, // byte 2 is inside é: the cut backs off to its start
		{"héllo", 3, "hé…"},
		{"日本語", 4, "日…"},
		{"abc", 0, "…"},
		{"abc", -1, "…"},
	} {
		got := intents.Clip(c.s, c.n)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

func TestOneLine(t *testing.T) {
	in := "jsonschema validation failed\n  - at '/rules/0':\n\tmissing property 'pattern'  "
	if got, want := intents.OneLine(in), "jsonschema validation failed - at '/rules/0': missing property 'pattern'"; got != want {
		t.Errorf("OneLine = %q, want %q", got, want)
	}
}
