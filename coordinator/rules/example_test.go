package rules_test

import (
	"encoding/json"
	"fmt"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/intents"
)

// A board where only coders move a task's status, and only along its state
// machine. The engine asks the compiled Set twice per intent: who may write
// there (Authorize), and whether the values the change leaves are allowed
// (CheckChange, given the state before and after it).
func ExampleCompile() {
	set, err := rules.Compile([]byte(`{
		"agents": {"c1": {"roles": ["coder"]}},
		"rules": [{"pattern": "tasks.*.status", "writers": ["role:coder"],
			"transitions": {"PENDING": ["RUNNING"], "RUNNING": ["DONE"]}, "initial": ["PENDING"]}]
	}`), cond.NewCompiler(cond.Options{}))
	if err != nil {
		fmt.Println(err)
		return
	}

	_, ok := set.Authorize("c1", nil, []string{"tasks.t1.status"})
	fmt.Println("c1 may write:", ok)
	detail, ok := set.Authorize("w9", nil, []string{"tasks.t1.status"})
	fmt.Println("w9 may write:", ok, "-", detail)

	// c1 sets a new task's status straight to DONE.
	before := state.New()
	plan, err := before.Plan([]intents.Write{
		{Path: "tasks.t1.status", Op: intents.OpSet, Value: json.RawMessage(`"DONE"`)},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	v := set.CheckChange("c1", []string{"tasks.t1.status"}, before, before.After(plan), false, "")
	fmt.Println(v.Reason, "-", v.Detail)

	// An error names the field and what is wrong with it.
	_, err = rules.Compile([]byte(`{"rules": [{"pattern": "tasks.**.status"}]}`), cond.NewCompiler(cond.Options{}))
	fmt.Println(err)
	// Output:
	// c1 may write: true
	// w9 may write: false - agent w9 may not write tasks.t1.status: rules[0] (tasks.*.status) lets only role:coder write there
	// illegal_transition - tasks.t1.status: a new value must start in PENDING, not DONE (rules[0], tasks.*.status)
	// rules field rules[0].pattern: "tasks.**.status": ** may only end a pattern
}
