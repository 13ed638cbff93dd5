package agents_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// An arbiter that settles every case by the priority rule, until
// interrupted. Run as many as you like: each case goes to one of them, and
// to another if that one dies. (It needs a NATS server with a coordinator,
// so it is compiled but not run here; `coagent arbiter --policy priority`
// is this program.)
func ExampleRunArbiter() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	decide := func(_ context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		return arbiter.Priority("judge", c), nil
	}
	err = agents.RunArbiter(ctx, nc, "judge", decide,
		agents.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	if err != nil {
		fmt.Println(err)
	}
}

// A model-backed arbiter decides a case: the case is rendered as a prompt,
// the model's JSON answer becomes the resolution. Here the model is
// scripted; in production wrap any LLM client in agents.Model and pass
// agents.ModelArbiter(m) to RunArbiter.
func ExampleModelArbiter() {
	c := &intents.Escalation{
		ID: "01JD00000000000000000000E5",
		Intents: []*intents.Intent{
			{ID: "01JD00000000000000000000E5", Agent: "writer-2", Kind: intents.KindApply, OnConflict: intents.OnConflictEscalate},
			{ID: "01JD00000000000000000000H1", Agent: "writer-1", Kind: intents.KindPropose},
		},
		Holder: &intents.Holder{Txn: "01JD00000000000000000000T1", Agent: "writer-1", Intent: "01JD00000000000000000000H1"},
		State:  map[string]intents.PathState{"report.intro": {Exists: true, Value: "draft", Version: 3}},
	}
	model := &agents.ScriptedModel{Replies: []string{
		"```json\n" + `{"winners": ["01JD00000000000000000000H1"], "losers": ["01JD00000000000000000000E5"],
		  "rationale": "writer-1 is halfway through the intro"}` + "\n```",
	}}
	res, err := agents.ModelArbiter(model)(context.Background(), c)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("winners:", res.Winners)
	fmt.Println("losers:", res.Losers)
	fmt.Println("rationale:", res.Rationale)

	// An answer that is not a resolution is an error; RunArbiter hands the
	// case back and it comes again.
	_, err = agents.ModelArbiter(&agents.ScriptedModel{Replies: []string{"writer-2, surely"}})(context.Background(), c)
	fmt.Println(err)
	// Output:
	// winners: [01JD00000000000000000000H1]
	// losers: [01JD00000000000000000000E5]
	// rationale: writer-1 is halfway through the intro
	// agents: model answer is not a resolution: no JSON object; the answer was "writer-2, surely"
}
