package intents

import (
	"strings"
	"testing"
)

// FuzzDecodeFeedMessage: whatever a change feed message holds (the SDK
// reads it off the network), decoding it never panics, and what it
// accepts is one or more change events, each with its change, in rising
// revision order.
func FuzzDecodeFeedMessage(f *testing.F) {
	for _, seed := range []string{
		`{"prev":3,"board_prev":2,"changes":[{"seq":4,"type":"change","change":{"writes":[{"path":"a.b","op":"set","value":1,"new_version":1}]}}]}`,
		`{"seq":4,"type":"change","change":{"writes":[{"path":"a.b","op":"set","value":1}]}}`,
		`{"changes":[{"seq":5,"type":"change","change":{"writes":[]}},{"seq":5,"type":"change","change":{"writes":[]}}]}`,
		`{"changes":[]}`, `{"changes":[null]}`, `{"seq":1,"type":"decision"}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeFeedMessage(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "change feed message") {
				t.Fatalf("error %q does not say what it read", err)
			}
			return
		}
		if len(m.Changes) == 0 {
			t.Fatalf("%s: accepted with no changes", data)
		}
		for i, ev := range m.Changes {
			if ev == nil || ev.Type != EventChange || ev.Change == nil {
				t.Fatalf("%s: changes[%d] accepted as %+v", data, i, ev)
			}
			if i > 0 && ev.Seq <= m.Changes[i-1].Seq {
				t.Fatalf("%s: changes[%d] at revision %d after %d", data, i, ev.Seq, m.Changes[i-1].Seq)
			}
		}
	})
}
