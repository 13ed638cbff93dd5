package conflict_test

import (
	"fmt"

	"github.com/coagent/coagent/conflict"
	"github.com/coagent/coagent/intents"
)

// Two transactions are in flight; a new intent is checked against both.
func ExampleIndex_Check() {
	ix := conflict.New()
	ix.Add(&conflict.Txn{ID: "T1", Agent: "w1", Reads: []string{"materials.m1"},
		Writes: []intents.Write{{Path: "report.sections.s1.text", Op: intents.OpSet}}})
	ix.Add(&conflict.Txn{ID: "T2", Agent: "w2",
		Writes: []intents.Write{{Path: "stats.words", Op: intents.OpIncr}}})

	// The editor replaces section s1 whole, demotes the material T1 reads
	// and counts words, as T2 does.
	conflicts, merges := ix.Check("", []string{"outline"}, []intents.Write{
		{Path: "report.sections.s1", Op: intents.OpSet},
		{Path: "materials.m1.status", Op: intents.OpSet},
		{Path: "stats.words", Op: intents.OpIncr},
	}, nil)
	for _, c := range conflicts {
		fmt.Println(c.Kind, c.Path, "with", c.WithTxn)
	}
	fmt.Println("merges with", merges)

	// A wait that would close a cycle between agents is a deadlock.
	w := conflict.NewWaits()
	w.Park("I1", "w1", []conflict.Holder{{Txn: "T2", Agent: "w2"}})
	fmt.Println("w2 waiting on w1 closes a cycle:", w.Cycle("w2", []conflict.Holder{{Txn: "T1", Agent: "w1"}}))
	fmt.Println("T2 ends; its waiters:", w.Release("T2"))
	// Output:
	// read-write materials.m1.status with T1
	// write-write report.sections.s1.text with T1
	// merges with [T2]
	// w2 waiting on w1 closes a cycle: true
	// T2 ends; its waiters: [I1]
}
