package arbiter

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/coagent/coagent/intents"
)

const (
	esc   = "01JD00000000000000000000E5" // the escalated intent
	hold  = "01JD00000000000000000000H1" // the holder's propose
	other = "01JD00000000000000000000B2" // the propose of a second transaction
	early = "01JD00000000000000000000A0" // sorts before all of them
)

// escalation builds a case: the escalated intent with priority p, then the
// proposes given as id → priority; the first of them, if any, is the
// holder.
func escalation(p int64, proposes ...any) *intents.Escalation {
	c := &intents.Escalation{ID: esc, Intents: []*intents.Intent{{ID: esc, Agent: "w2", Kind: intents.KindApply, Priority: p}}}
	for i := 0; i < len(proposes); i += 2 {
		id := proposes[i].(string)
		c.Intents = append(c.Intents, &intents.Intent{ID: id, Agent: "w1", Kind: intents.KindPropose, Priority: int64(proposes[i+1].(int))})
		if c.Holder == nil {
			c.Holder = &intents.Holder{Txn: "T" + id[len(id)-2:], Agent: "w1", Intent: id}
		}
	}
	return c
}

func TestPolicies(t *testing.T) {
	noHolder := escalation(3)
	noHolder.Intents = append(noHolder.Intents, &intents.Intent{ID: early, Priority: 3})
	missingPropose := escalation(1)
	missingPropose.Holder = &intents.Holder{Txn: "T9", Agent: "w1", Intent: hold}

	for _, tc := range []struct {
		name           string
		policy         Policy
		c              *intents.Escalation
		winners        []string
		losers         []string
		rationale      string
		rationaleAlso  string
		rationaleLacks string
	}{
		{name: "priority/newcomer higher", policy: Priority, c: escalation(5, hold, 2),
			winners: []string{esc}, losers: []string{hold}, rationale: "priority 5 beats " + hold + "'s 2"},
		{name: "priority/holder higher", policy: Priority, c: escalation(2, hold, 5),
			winners: []string{hold}, losers: []string{esc}, rationale: "priority 5 beats " + esc + "'s 2"},
		{name: "priority/negative", policy: Priority, c: escalation(-1, hold, 0),
			winners: []string{hold}, losers: []string{esc}, rationale: "priority 0 beats " + esc + "'s -1"},
		{name: "priority/tie goes to the holder", policy: Priority, c: escalation(4, hold, 4),
			winners: []string{hold}, losers: []string{esc}, rationale: "tie at 4", rationaleAlso: "holds the grant"},
		{name: "priority/tie goes to the holder even with a higher id", policy: Priority, c: escalation(0, "01JD00000000000000000000Z9", 0),
			winners: []string{"01JD00000000000000000000Z9"}, losers: []string{esc}, rationale: "tie at 0"},
		{name: "priority/tie without a holder goes to the lower id", policy: Priority, c: noHolder,
			winners: []string{early}, losers: []string{esc}, rationale: "tie at 3", rationaleAlso: "lower id"},
		{name: "priority/newcomer beats every transaction in its way", policy: Priority, c: escalation(9, hold, 1, other, 7),
			winners: []string{esc}, losers: []string{hold, other}, rationale: "priority 9 beats " + other + "'s 7"},
		{name: "priority/the strongest transaction wins", policy: Priority, c: escalation(5, hold, 1, other, 7),
			winners: []string{other}, losers: []string{esc}, rationale: "priority 7 beats " + esc + "'s 5"},
		{name: "priority/unopposed", policy: Priority, c: escalation(1),
			winners: []string{esc}, rationale: "unopposed"},
		{name: "priority/holder's propose missing from the case counts as 0", policy: Priority, c: missingPropose,
			winners: []string{esc}, losers: []string{hold}, rationale: "priority 1 beats " + hold + "'s 0"},
		{name: "first/holder keeps its grant", policy: First, c: escalation(9, hold, 1),
			winners: []string{hold}, losers: []string{esc}, rationale: "first come", rationaleAlso: "granted before " + esc, rationaleLacks: "priority"},
		{name: "first/no holder", policy: First, c: escalation(1),
			winners: []string{esc}, rationale: "first come"},
		{name: "reject", policy: Reject, c: escalation(9, hold, 1),
			losers: []string{esc}, rationale: "reject: escalated intent " + esc + " loses"},
		{name: "reject/no holder", policy: Reject, c: escalation(1),
			losers: []string{esc}, rationale: "reject"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.policy("judge", tc.c)
			if res.Escalation != esc || res.Arbiter != "judge" || res.Replacement != nil {
				t.Errorf("resolution %+v: want escalation %s, arbiter judge, no replacement", res, esc)
			}
			if !slices.Equal(res.Winners, tc.winners) || !slices.Equal(res.Losers, tc.losers) {
				t.Errorf("winners %v losers %v, want %v %v", res.Winners, res.Losers, tc.winners, tc.losers)
			}
			for _, want := range []string{tc.rationale, tc.rationaleAlso} {
				if !strings.Contains(res.Rationale, want) {
					t.Errorf("rationale %q lacks %q", res.Rationale, want)
				}
			}
			if tc.rationaleLacks != "" && strings.Contains(res.Rationale, tc.rationaleLacks) {
				t.Errorf("rationale %q mentions %q", res.Rationale, tc.rationaleLacks)
			}
			if strings.Count(res.Rationale, ". ") > 0 || strings.HasSuffix(res.Rationale, ".") {
				t.Errorf("rationale %q: one sentence, no full stop", res.Rationale)
			}
		})
	}
}

func TestPoliciesNeverPanicOnThinCases(t *testing.T) {
	for _, c := range []*intents.Escalation{
		{},
		{ID: esc},
		{ID: esc, Holder: &intents.Holder{Intent: hold}},
		{ID: esc, Intents: []*intents.Intent{nil, {ID: hold, Priority: 3}}},
	} {
		for _, name := range Policies {
			p, _ := ByName(name)
			if res := p("judge", c); res == nil || res.Rationale == "" || len(res.Winners)+len(res.Losers) == 0 {
				t.Errorf("%s on %+v: %+v", name, c, res)
			}
		}
	}
}

func TestByName(t *testing.T) {
	c := escalation(5, hold, 2)
	for _, name := range Policies {
		p, err := ByName(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res := p("judge", c); !strings.HasPrefix(res.Rationale, name) && !(name == "first" && strings.HasPrefix(res.Rationale, "first come")) {
			t.Errorf("%s: rationale %q does not name its rule", name, res.Rationale)
		}
	}
	if _, err := ByName("random"); !errors.Is(err, ErrUnknownPolicy) || !strings.Contains(err.Error(), "priority, first, reject") {
		t.Errorf("unknown policy: %v", err)
	}
}
