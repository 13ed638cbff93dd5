package agents_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
)

// An arbiter that settles every case by the priority rule, until its
// context ends. Run as many as you like: each case goes to one of them,
// and to another if that one dies; `coagent arbiter --policy priority` is
// this program. Here writer-2's rewrite, of a higher priority, escalates
// against writer-1's transaction, and the arbiter lets it win: writer-1's
// transaction is preempted, and its commit is refused.
func ExampleRunArbiter() {
	nc, stop, err := startCoordinator()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	decide := func(_ context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		return arbiter.Priority("judge", c), nil
	}
	arbiterCtx, stopArbiter := context.WithCancel(ctx)
	defer stopArbiter()
	done := make(chan error, 1)
	go func() {
		done <- agents.RunArbiter(arbiterCtx, nc, "judge", decide,
			agents.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	}()

	w1, err := agents.Connect(ctx, nc, "writer-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w1.Close()
	w2, err := agents.Connect(ctx, nc, "writer-2")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w2.Close()

	tx, err := w1.Propose(ctx, intents.Propose("rewrite_intro").Write("report.intro", intents.OpSet))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("writer-1:", tx.Grant().Outcome)
	d, err := w2.Apply(ctx, intents.Apply("rewrite_intro").
		Set("report.intro", "a shorter intro").
		Priority(5).
		Escalate())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("writer-2:", d.Outcome, "after the arbiter's resolution")
	// writer-1 is told its transaction was preempted; a commit would be
	// refused.
	<-tx.Lost()
	fmt.Println("writer-1's transaction preempted:", errors.Is(tx.Err(), agents.ErrPreempted))
	_, err = tx.Commit(ctx, intents.Apply("rewrite_intro").Set("report.intro", "a longer intro"))
	fmt.Println("writer-1's commit refused:", errors.Is(err, agents.ErrPreempted))

	stopArbiter()
	fmt.Println("arbiter stopped:", <-done)
	// Output:
	// writer-1: granted
	// writer-2: applied after the arbiter's resolution
	// writer-1's transaction preempted: true
	// writer-1's commit refused: true
	// arbiter stopped: <nil>
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
