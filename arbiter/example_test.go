package arbiter_test

import (
	"errors"
	"fmt"

	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
)

// clash is a case: writer-2's apply (priority 5) escalated against the
// transaction writer-1 opened with a propose of priority 3.
func clash() *intents.Escalation {
	return &intents.Escalation{
		ID: "01JD00000000000000000000E5",
		Intents: []*intents.Intent{
			{ID: "01JD00000000000000000000E5", Agent: "writer-2", Kind: intents.KindApply, Priority: 5},
			{ID: "01JD00000000000000000000H1", Agent: "writer-1", Kind: intents.KindPropose, Priority: 3},
		},
		Holder: &intents.Holder{Txn: "01JD00000000000000000000T1", Agent: "writer-1", Intent: "01JD00000000000000000000H1"},
	}
}

// A rule decides a case; its answer fits the case, as the coordinator will
// check again.
func ExamplePriority() {
	c := clash()
	res := arbiter.Priority("judge", c)
	fmt.Println("winners:", res.Winners, "losers:", res.Losers)
	fmt.Println(res.Rationale)
	fmt.Println("fits:", arbiter.Check(c, res) == nil)
	// Output:
	// winners: [01JD00000000000000000000E5] losers: [01JD00000000000000000000H1]
	// priority: 01JD00000000000000000000E5's priority 5 beats 01JD00000000000000000000H1's 3
	// fits: true
}

// Check names every problem of a resolution at once.
func ExampleCheck() {
	c := clash()
	err := arbiter.Check(c, &intents.Resolution{Escalation: c.ID, Arbiter: "judge",
		Winners: []string{c.ID, "01JD00000000000000000000H1"}})
	fmt.Println(errors.Is(err, arbiter.ErrBadResolution))
	fmt.Println(err)
	// Output:
	// true
	// arbiter: resolution does not fit its case: rationale is missing; the escalated intent and a transaction it conflicts with cannot both win; write a replacement
}

// A model's answer, in prose around a code fence, becomes a resolution for
// the arbiter to sign.
func ExampleParseAnswer() {
	c := clash()
	answer := "The holder was first.\n```json\n" +
		`{"winners": ["01JD00000000000000000000H1"], "losers": ["01JD00000000000000000000E5"], "rationale": "writer-1 was first"}` +
		"\n```"
	res, err := arbiter.ParseAnswer(c, answer)
	fmt.Println(res.Winners, res.Losers, res.Rationale, err)
	_, err = arbiter.ParseAnswer(c, `{"winners": ["writer-2"], "rationale": "newer"}`)
	fmt.Println(err)
	// Output:
	// [01JD00000000000000000000H1] [01JD00000000000000000000E5] writer-1 was first <nil>
	// model answer is not a resolution: writer-2 is neither the escalated intent nor the propose of a transaction it conflicts with; the answer was "{\"winners\": [\"writer-2\"], \"rationale\": \"newer\"}"
}
