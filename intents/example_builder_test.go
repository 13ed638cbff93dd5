package intents_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coagent/coagent/intents"
)

func ExampleBuilder() {
	text := "Agents coordinate by declaring intents."
	in, err := intents.Apply("write_intro").
		Read("outline").
		Set("report.intro", text).
		Post("state.report.intro != nil").
		Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	// The SDK fills these when it sends the intent.
	in.ID, in.Agent = "01JD0000000000000000000000", "writer-1"
	out, _ := json.MarshalIndent(in, "", "  ")
	fmt.Println(string(out))
	// Output:
	// {
	//   "id": "01JD0000000000000000000000",
	//   "agent": "writer-1",
	//   "kind": "apply",
	//   "action": "write_intro",
	//   "reads": [
	//     {
	//       "path": "outline"
	//     }
	//   ],
	//   "writes": [
	//     {
	//       "path": "report.intro",
	//       "op": "set",
	//       "value": "Agents coordinate by declaring intents."
	//     }
	//   ],
	//   "post": [
	//     "state.report.intro != nil"
	//   ]
	// }
}

// A propose declares what it will write; the commit carries the values.
func ExamplePropose() {
	in, err := intents.Propose("claim_task").
		ReadAt("tasks.t9", 4).
		Pre("state.tasks.t9.owner == nil").
		Write("tasks.t9.owner", intents.OpSet).
		Write("tasks.t9.status", intents.OpSet).
		Lease(30*time.Second).
		Wait(5*time.Second).
		Meta("trace", "a1b2").
		Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := json.Marshal(in)
	fmt.Println(string(out))
	// Output:
	// {"id":"","agent":"","kind":"propose","action":"claim_task","reads":[{"path":"tasks.t9","version":4}],"writes":[{"path":"tasks.t9.owner","op":"set"},{"path":"tasks.t9.status","op":"set"}],"pre":["state.tasks.t9.owner == nil"],"lease_ms":30000,"on_conflict":"wait","wait_ms":5000,"meta":{"trace":"a1b2"}}
}

// Build reports the first problem as a *ValidationError naming the field,
// exactly as the coordinator would when decoding the intent.
func ExampleBuilder_Build() {
	_, err := intents.Apply("tally").
		Incr("stats.words", 120).
		Merge("report.meta", "not an object").
		Build()
	var ve *intents.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(ve.Field)
		fmt.Println(err)
	}
	// Output:
	// writes[1].value
	// intent field writes[1].value = "\"not an object\"": merge needs a JSON object
}
