package engine_test

import (
	"fmt"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/intents"
)

// Two agents claim the same title, each only if nobody has. The engine is
// given the time of each call; its zero Config makes ids from that time
// and a counter, so the run is the same every time. What Submit returns is
// the events to log: the coordinator makes them durable, then answers the
// decisions they hold.
func ExampleEngine_Submit() {
	e, err := engine.New(engine.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	claim := func(id, agent, title string) []*intents.Event {
		raw := fmt.Sprintf(`{"id":%q,"agent":%q,"kind":"apply",`+
			`"writes":[{"path":"report.title","op":"set","value":%q}],`+
			`"pre":["state.report.title == nil"]}`, id, agent, title)
		now = now.Add(time.Second)
		return e.Submit(now, engine.Input{Agent: agent, Raw: []byte(raw)}, nil).Events
	}

	for _, evs := range [][]*intents.Event{
		claim("01JD0000000000000000000010", "w1", "Q3"),
		claim("01JD0000000000000000000011", "w2", "Q4"),
	} {
		for _, ev := range evs {
			fmt.Print(ev.Seq, " ", ev.Type)
			if d := ev.Decision; d != nil {
				fmt.Print(": ", d.Agent, " ", d.Outcome)
				if d.Reason != "" {
					fmt.Print(" ", d.Reason, ": ", d.Detail)
				}
			}
			fmt.Println()
		}
	}
	title, _ := e.State().Get("report.title")
	fmt.Println("report.title =", title, "version", e.State().Version("report.title"), "rev", e.State().Rev())
	// Output:
	// 1 intent
	// 2 change
	// 3 decision: w1 applied
	// 4 intent
	// 5 decision: w2 rejected precondition_failed: pre[0] `state.report.title == nil` is false; it saw report.title = "Q3"
	// report.title = Q3 version 1 rev 2
}
