package state_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/intents"
)

// A change is planned against the tree, which checks it and changes
// nothing, then applied at the revision of the event that commits it:
// the path written and each of its ancestors get a new version.
func ExampleTree_Plan() {
	t := state.New()
	plan, err := t.Plan([]intents.Write{
		{Path: "report.title", Op: intents.OpSet, Value: json.RawMessage(`"Q3"`)},
		{Path: "stats.words", Op: intents.OpIncr, Value: json.RawMessage(`120`)},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range plan {
		fmt.Printf("plan: %s %s %s, version %d -> %d\n", a.Op, a.Path, a.Value, a.OldVersion, a.NewVersion)
	}
	if err := t.Apply(1, plan); err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range []string{"report.title", "stats.words", "report"} {
		e := t.Lookup(p)
		fmt.Printf("%s = %v, version %d, mod_rev %d\n", p, state.FormatValue(e.Value), e.Version, e.ModRev)
	}
	fmt.Println("rev", t.Rev())

	// A write that does not fit the value it meets is a clean error.
	_, err = t.Plan([]intents.Write{{Path: "report.title", Op: intents.OpIncr}})
	var te *state.TypeError
	fmt.Println(errors.As(err, &te), err)
	// Output:
	// plan: set report.title "Q3", version 0 -> 1
	// plan: incr stats.words 120, version 0 -> 1
	// report.title = "Q3", version 1, mod_rev 1
	// stats.words = 120, version 1, mod_rev 1
	// report = {"title":"Q3"}, version 1, mod_rev 1
	// rev 1
	// true incr report.title: the value there is a string, not a number
}
