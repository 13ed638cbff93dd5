package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
)

// An intent larger than intents.MaxIntentSize is recorded invalid with only
// its start kept: its size is in the error, and its record stays small
// enough for a group of a cluster's log to hold it. One within the limit
// that is invalid for another reason is kept whole.
func TestOversizeRecordKeepsItsStart(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	big := `{"id":"01JD0000000000000000000B01","agent":"a","kind":"apply","meta":{"pad":"` +
		strings.Repeat("x", intents.MaxIntentSize) + `"},"writes":[{"path":"a","op":"set","value":1}]}`
	small := `{"id":"01JD0000000000000000000B02","agent":"a","kind":"apply","writes":[]}`
	for _, c := range []struct {
		raw  string
		kept int
	}{{big, rawKept}, {small, len(small)}} {
		evs := e.Submit(time.Unix(1, 0), Input{Agent: "a", Raw: []byte(c.raw)}, nil).Events
		rec, dec := evs[0].Received, evs[len(evs)-1].Decision
		if rec == nil || len(rec.Raw) != c.kept || string(rec.Raw) != c.raw[:c.kept] {
			t.Fatalf("%d bytes: the record keeps %d, want its first %d", len(c.raw), len(rec.Raw), c.kept)
		}
		if dec == nil || dec.Reason != intents.ReasonInvalid || dec.Intent == "" {
			t.Fatalf("%d bytes: decided %+v, want invalid under its id", len(c.raw), dec)
		}
	}
	if d := e.Submit(time.Unix(1, 0), Input{Agent: "a", Raw: []byte(big)}, nil).Events; d[len(d)-1].Decision == nil || !d[len(d)-1].Decision.Duplicate {
		t.Fatalf("the oversized intent again: %+v, want its recorded decision", d[len(d)-1].Decision)
	}
}
