package arbiter_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
)

const (
	escID  = "01JD00000000000000000000E5" // the escalated intent
	holdID = "01JD00000000000000000000H1" // the holder's propose
	twoID  = "01JD00000000000000000000H2" // the propose of a second transaction
)

// sampleCase is an escalation in the way of two transactions, the holder's
// first.
func sampleCase() *intents.Escalation {
	return &intents.Escalation{ID: escID,
		Intents: []*intents.Intent{{ID: escID, Agent: "w2", Kind: intents.KindApply, Priority: 4},
			{ID: holdID, Agent: "w1", Kind: intents.KindPropose, Priority: 3},
			{ID: twoID, Agent: "w3", Kind: intents.KindPropose, Priority: 1}},
		Holder: &intents.Holder{Txn: "T1", Agent: "w1", Intent: holdID},
		State:  map[string]intents.PathState{"report.intro": {Exists: true, Value: "draft", Version: 2}}}
}

func TestCheck(t *testing.T) {
	c := sampleCase()
	apply := func(kind intents.Kind) *intents.Intent {
		return &intents.Intent{ID: "01JD00000000000000000000R1", Agent: "judge", Kind: kind,
			Writes: []intents.Write{{Path: "report.intro", Op: intents.OpSet, Value: json.RawMessage(`"merged"`)}}}
	}
	res := func(winners, losers []string, replacement *intents.Intent) *intents.Resolution {
		return &intents.Resolution{Escalation: escID, Arbiter: "judge", Winners: winners, Losers: losers,
			Replacement: replacement, Rationale: "r"}
	}
	for _, tc := range []struct {
		name string
		res  *intents.Resolution
		bad  []string // what the error says, every problem; nil for a good resolution
	}{
		{"the escalated intent loses", res(nil, []string{escID}, nil), nil},
		{"the escalated intent wins", res([]string{escID}, []string{holdID, twoID}, nil), nil},
		{"the holder wins", res([]string{holdID}, []string{escID}, nil), nil},
		{"both transactions win", res([]string{holdID, twoID}, []string{escID}, nil), nil},
		{"a replacement", res(nil, []string{holdID}, apply(intents.KindApply)), nil},
		{"nothing named", res(nil, nil, nil), []string{"names no winner, no loser and no replacement"}},
		{"an unknown id", res([]string{"w2"}, nil, nil), []string{"w2 is neither the escalated intent nor the propose"}},
		{"both wins and loses, named twice", res([]string{holdID, holdID}, []string{holdID}, nil),
			[]string{holdID + " both wins and loses", "cannot both win"}},
		{"the escalated intent and a holder both win", res([]string{escID, holdID}, nil, nil),
			[]string{"cannot both win; write a replacement"}},
		// The escalated intent wins when a transaction in its way loses and
		// it is not named a loser: the other transaction cannot win then.
		{"a holder loses, the other wins", res([]string{twoID}, []string{holdID}, nil),
			[]string{"cannot both win; write a replacement"}},
		{"a replacement that the escalated intent wins", res([]string{escID}, nil, apply(intents.KindPropose)),
			[]string{"replacement: kind propose; a replacement is an apply", "cannot both win and be replaced"}},
		{"a replacement that is not an intent", res(nil, []string{escID}, &intents.Intent{Kind: intents.KindApply}),
			[]string{"replacement: "}},
		{"every field wrong", &intents.Resolution{Escalation: "other", Arbiter: "a b"},
			[]string{`escalation "other", want "` + escID + `"`, `arbiter "a b" is not an agent name`, "rationale is missing",
				"names no winner"}},
	} {
		err := arbiter.Check(c, tc.res)
		if tc.bad == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var rerr *arbiter.ResolutionError
		if !errors.Is(err, arbiter.ErrBadResolution) || !errors.As(err, &rerr) || len(rerr.Problems) != len(tc.bad) {
			t.Errorf("%s: %v, want %d problems", tc.name, err, len(tc.bad))
			continue
		}
		for i, want := range tc.bad {
			if !strings.Contains(rerr.Problems[i], want) {
				t.Errorf("%s: problem %d is %q, want it to say %q", tc.name, i, rerr.Problems[i], want)
			}
		}
	}
	if err := arbiter.Check(c, nil); !errors.Is(err, arbiter.ErrBadResolution) {
		t.Errorf("no resolution: %v", err)
	}
	if err := arbiter.Check(nil, res(nil, []string{escID}, nil)); !errors.Is(err, arbiter.ErrBadResolution) {
		t.Errorf("no case: %v", err)
	}
}

// The ids a resolution may name: the escalated intent's first, the
// holder's even when the case does not carry its propose, each once.
func TestIDs(t *testing.T) {
	c := sampleCase()
	c.Holder.Intent = "01JD00000000000000000000H0"
	got := strings.Join(arbiter.IDs(c), " ")
	if want := escID + " 01JD00000000000000000000H0 " + holdID + " " + twoID; got != want {
		t.Errorf("IDs = %s, want %s", got, want)
	}
}
