package rules

import "testing"

func TestRef(t *testing.T) {
	for detail, want := range map[string]string{
		"agent w2 may not write docs.a: rules[1] (docs.**) lets only w1": "rules[1]",
		"invariant few `state.docs.n <= 2` is false; it saw docs.n = 3":  "invariant few",
		"refused (x); rules[12] sends it to review":                      "rules[12]",
		"rules[] is not a rule, rules[x] neither, but rules[3] is":       "rules[3]",
		"nothing here":                           "",
		"invariant wip-2 breaks before rules[0]": "invariant wip-2",
		"rules[4] first, then invariant late":    "rules[4]",
		"ends with rules[":                       "",
		"invariant ":                             "",
		"invariant état ok":                      "invariant état",
	} {
		if got := Ref(detail); got != want {
			t.Errorf("Ref(%q) = %q, want %q", detail, got, want)
		}
	}
}
