package eventlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
)

// A log under a fresh directory takes one batch — what the engine emitted
// for one applied intent, and the state it leaves — and answers from it
// once the batch is durable.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "eventlog-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	log, err := eventlog.Open(dir, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer log.Close()

	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const id = "01JD0000000000000000000010"
	value := json.RawMessage(`"Q3"`)
	write := intents.Write{Path: "report.title", Op: intents.OpSet, Value: value}
	decision := &intents.Decision{Intent: id, Agent: "w1", Outcome: intents.OutcomeApplied,
		Versions: map[string]uint64{"report.title": 1}, Rev: 2}
	batch := &eventlog.Batch{
		Events: []*intents.Event{
			{Seq: 1, Time: now, Type: intents.EventIntent, Agent: "w1", Intent: id,
				Received: &intents.Received{Intent: &intents.Intent{ID: id, Agent: "w1", Kind: intents.KindApply,
					Writes: []intents.Write{write}}}},
			{Seq: 2, Time: now, Type: intents.EventChange, Agent: "w1", Intent: id,
				Change: &intents.Change{Writes: []intents.Applied{{Path: write.Path, Op: write.Op, Value: value,
					NewVersion: 1}}}},
			{Seq: 3, Time: now, Type: intents.EventDecision, Agent: "w1", Intent: id, Decision: decision},
		},
		State: []eventlog.Entry{
			{Path: "", Kind: eventlog.KindObject, Version: 1, ModRev: 2},
			{Path: "report", Kind: eventlog.KindObject, Version: 1, ModRev: 2},
			{Path: "report.title", Kind: eventlog.KindLeaf, Value: value, Version: 1, ModRev: 2},
		},
		// The engine says which decisions take their ids (Ready.Records).
		Records: []*intents.Decision{decision},
	}
	p, err := log.Enqueue(batch)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := p.Wait(context.Background()); err != nil { // durable from here on
		fmt.Println(err)
		return
	}

	// The events of w1 that concern report: the intent and its change (a
	// decision names no path; it is found by its intent).
	evs, next, err := log.Query(eventlog.Query{Agent: "w1", Path: "report"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, ev := range evs {
		fmt.Println(ev.Seq, ev.Type, ev.Intent)
	}
	fmt.Println("next", next)
	d, err := log.Decision(id)
	fmt.Println(d.Outcome, d.Rev, err)
	e, err := log.Entry("report.title")
	fmt.Println(e.Path, string(e.Value), e.Version, err)
	fmt.Println("check:", log.Check())
	// Output:
	// 1 intent 01JD0000000000000000000010
	// 2 change 01JD0000000000000000000010
	// next 0
	// applied 2 <nil>
	// report.title "Q3" 1 <nil>
	// check: <nil>
}
