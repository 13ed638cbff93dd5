package arbiter_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/coagent/coagent/arbiter"
)

// A retry is the escalated intent under the new id, wherever the case
// carries it, with the case recorded in its meta beside what was there.
func TestRetry(t *testing.T) {
	c := sampleCase()
	c.Intents[0], c.Intents[1] = c.Intents[1], c.Intents[0] // found by id, not by place
	esc := c.Escalated()
	esc.Meta = json.RawMessage(`{"draft":"x","n":12345678901234567890}`)
	const id = "01JD00000000000000000000N1"
	in, err := arbiter.Retry(c, id)
	if err != nil {
		t.Fatal(err)
	}
	if in.ID != id || in.Agent != "w2" || in.Kind != esc.Kind || in.Priority != esc.Priority {
		t.Errorf("retry %+v of %+v", in, esc)
	}
	if got, want := string(in.Meta), `{"draft":"x","n":12345678901234567890,"retry_of":"`+escID+`"}`; got != want {
		t.Errorf("meta %s, want %s", got, want)
	}
	if esc.ID != escID || !strings.Contains(string(esc.Meta), `"draft"`) || strings.Contains(string(esc.Meta), "retry_of") {
		t.Errorf("the case's intent changed: %+v", esc)
	}
	if in, err := arbiter.Retry(sampleCase(), id); err != nil || string(in.Meta) != `{"retry_of":"`+escID+`"}` {
		t.Errorf("no meta before: %s %v", in.Meta, err)
	}

	c.Intents = c.Intents[:1]
	if _, err := arbiter.Retry(c, id); !errors.Is(err, arbiter.ErrNoIntent) || !strings.Contains(err.Error(), escID) {
		t.Errorf("a case without its intent: %v", err)
	}
	c = sampleCase()
	c.Intents[0].Meta = json.RawMessage(`[1]`)
	if _, err := arbiter.Retry(c, id); err == nil || !strings.Contains(err.Error(), "meta [1] is not a JSON object") {
		t.Errorf("meta that is not an object: %v", err)
	}
}
