package agents_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// The tests below run a real coordinator (embedded NATS with JetStream, an
// event log on disk) and real arbiters over the wire. Only the tests reach
// the coordinator: the package itself speaks nothing but the wire contract.

// arbiterWorld is a coordinator, its server, and the decisions of the two
// agents that conflict: w1 holds a transaction on report.intro, w2 escalates
// an apply to the same path.
type arbiterWorld struct {
	*world
	nc        *nats.Conn
	subj      intents.Subjects
	decisions map[string]*nats.Subscription
}

func newArbiterWorld(t *testing.T, opts ...coordinator.Options) *arbiterWorld {
	t.Helper()
	var o coordinator.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	w := &arbiterWorld{world: newWorld(t, o), decisions: map[string]*nats.Subscription{}}
	w.nc = w.connect()
	for _, a := range []string{"w1", "w2"} {
		sub, err := w.nc.SubscribeSync(w.subj.Decisions(a))
		if err != nil {
			t.Fatal(err)
		}
		w.decisions[a] = sub
	}
	return w
}

// next returns agent's next decision.
func (w *arbiterWorld) next(agent string) *intents.Decision {
	w.t.Helper()
	return natstest.Next[intents.Decision](w.t, w.decisions[agent])
}

// conflict opens a case: w1's propose (priority hp) is granted, then w2's
// apply (priority np) on the same path escalates. It returns both ids and
// the holder's transaction.
func (w *arbiterWorld) conflict(hp, np int) (propose, esc, txn string) {
	w.t.Helper()
	propose, esc = ulid.Make().String(), ulid.Make().String()
	w.publish("w1", map[string]any{"id": propose, "agent": "w1", "kind": "propose", "priority": hp, "lease_ms": 600000,
		"writes": []any{map[string]any{"path": "report.intro", "op": "set"}}})
	grant := w.next("w1")
	if grant.Outcome != intents.OutcomeGranted {
		w.t.Fatalf("propose: %+v", grant)
	}
	w.publish("w2", map[string]any{"id": esc, "agent": "w2", "kind": "apply", "priority": np, "on_conflict": "escalate",
		"writes": []any{map[string]any{"path": "report.intro", "op": "set", "value": "rewrite"}}})
	if d := w.next("w2"); d.Outcome != intents.OutcomeEscalated {
		w.t.Fatalf("escalate: %+v", d)
	}
	return propose, esc, grant.Txn
}

func (w *arbiterWorld) publish(agent string, in map[string]any) {
	w.t.Helper()
	data, _ := json.Marshal(in)
	if err := w.nc.Publish(w.subj.Intents(agent), data); err != nil {
		w.t.Fatal(err)
	}
}

// runArbiter starts RunArbiter on a connection of its own. Cancelling the
// returned context stops it; its result comes on the channel.
func (w *arbiterWorld) runArbiter(nc *nats.Conn, name string, decide agents.Decide, opts ...agents.ArbiterOption) (context.CancelFunc, <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agents.RunArbiter(ctx, nc, name, decide, opts...)
		close(done) // the cleanup's receive does not wait for a result already taken
	}()
	w.t.Cleanup(func() {
		cancel()
		<-done
	})
	return cancel, done
}

// arbiterStopped waits for a RunArbiter to return.
func arbiterStopped(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("RunArbiter did not return after its context ended")
		return nil
	}
}

// ruleDecide adapts a rule policy to a Decide.
func ruleDecide(p arbiter.Policy, name string) agents.Decide {
	return func(_ context.Context, c *intents.Escalation) (*intents.Resolution, error) { return p(name, c), nil }
}

// arbiterLogs is an io.Writer for a logger that tests read while arbiters
// write.
type arbiterLogs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *arbiterLogs) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *arbiterLogs) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *arbiterLogs) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// await waits, polling, until the logs hold line.
func (b *arbiterLogs) await(t *testing.T, line string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(b.String(), line); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the logs:\n%s", line, b.String())
		}
	}
}

func (w *arbiterWorld) stateOf(path string) any {
	w.t.Helper()
	r, err := w.nc.Request(w.subj.API(intents.APIStateGet), []byte(`{"paths":["`+path+`"]}`), 10*time.Second)
	if err != nil {
		w.t.Fatal(err)
	}
	var st struct {
		Values map[string]struct{ Value any }
	}
	if err := json.Unmarshal(r.Data, &st); err != nil {
		w.t.Fatalf("state.get: %s: %v", r.Data, err)
	}
	return st.Values[path].Value
}

// (a) The priority rule over the wire: the higher-priority newcomer wins,
// the holder is preempted; with the priorities the other way round the
// holder keeps its grant and the newcomer is rejected.
func TestRunArbiterPriority(t *testing.T) {
	w := newArbiterWorld(t)
	var logs arbiterLogs
	stop, done := w.runArbiter(w.connect(), "judge", ruleDecide(arbiter.Priority, "judge"), agents.WithLogger(logs.logger()))

	propose, esc, _ := w.conflict(2, 5)
	held := w.next("w1")
	if held.Intent != propose || held.Outcome != intents.OutcomeAborted ||
		!strings.Contains(held.Detail, "preempted by arbiter judge: priority: "+esc+"'s priority 5 beats "+propose+"'s 2") {
		t.Fatalf("holder: %+v", held)
	}
	if d := w.next("w2"); d.Intent != esc || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("newcomer: %+v", d)
	}
	if v := w.stateOf("report.intro"); v != "rewrite" {
		t.Fatalf("report.intro = %v, want the newcomer's write", v)
	}

	// The other way round, on a fresh conflict (the path is free again).
	propose, esc, txn := w.conflict(7, 1)
	if d := w.next("w2"); d.Intent != esc || d.Outcome != intents.OutcomeRejected || d.Reason != intents.ReasonArbiterRejected ||
		!strings.Contains(d.Detail, "arbiter judge: priority: "+propose+"'s priority 7 beats "+esc+"'s 1") {
		t.Fatalf("newcomer: %+v", d)
	}
	// The holder kept its grant.
	r, err := w.nc.Request(w.subj.API(intents.APITxnList), []byte(`{"agent":"w1"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(r.Data), `"txn":"`+txn+`"`) {
		t.Fatalf("the winning holder's transaction %s is gone: %s", txn, r.Data)
	}

	stop()
	if err := arbiterStopped(t, done); err != nil {
		t.Fatalf("RunArbiter: %v", err)
	}
	if n := strings.Count(logs.String(), "msg=resolved"); n != 2 {
		t.Fatalf("%d cases logged as resolved, want 2:\n%s", n, logs.String())
	}
}

// (b) An arbiter that dies holding a case — its connection gone, no
// acknowledgement of any kind — loses it after the ack wait, and another
// arbiter resolves it.
func TestRunArbiterCaseOutlivesItsArbiter(t *testing.T) {
	w := newArbiterWorld(t)
	ackWait := agents.WithAckWait(500 * time.Millisecond)
	held := make(chan string, 1)
	ncA := w.connect()
	stopA, doneA := w.runArbiter(ncA, "doomed", func(ctx context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		held <- c.ID
		<-ctx.Done()
		return nil, ctx.Err()
	}, ackWait)
	propose, esc, _ := w.conflict(1, 5)
	select {
	case id := <-held:
		if id != esc {
			t.Fatalf("the first arbiter holds %s, want %s", id, esc)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first arbiter got no case")
	}
	ncA.Close() // dies: nothing more from it, not even "still working"

	w.runArbiter(w.connect(), "heir", ruleDecide(arbiter.Priority, "heir"), ackWait)
	if d := w.next("w1"); d.Intent != propose || d.Outcome != intents.OutcomeAborted || !strings.Contains(d.Detail, "arbiter heir:") {
		t.Fatalf("holder: %+v", d)
	}
	if d := w.next("w2"); d.Intent != esc || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("newcomer: %+v", d)
	}
	stopA()
	if err := arbiterStopped(t, doneA); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("the dead arbiter's RunArbiter: %v", err)
	}
}

// An arbiter told to stop while deciding hands its case back at once: the
// next arbiter resolves it long before the (hour-long) ack wait.
func TestRunArbiterHandsBackOnStop(t *testing.T) {
	w := newArbiterWorld(t)
	ackWait := agents.WithAckWait(time.Hour)
	held := make(chan string, 1)
	stopA, doneA := w.runArbiter(w.connect(), "leaving", func(ctx context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		held <- c.ID
		<-ctx.Done()
		return nil, ctx.Err()
	}, ackWait)
	_, esc, _ := w.conflict(1, 5)
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first arbiter got no case")
	}
	stopA()
	if err := arbiterStopped(t, doneA); err != nil {
		t.Fatalf("RunArbiter: %v", err)
	}
	w.runArbiter(w.connect(), "staying", ruleDecide(arbiter.Priority, "staying"), ackWait)
	w.next("w1")
	if d := w.next("w2"); d.Intent != esc || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("newcomer: %+v", d)
	}
}

// (c) A model-backed arbiter: the scripted model sees the case rendered as
// a prompt and answers in a code fence; its resolution is applied.
func TestModelArbiter(t *testing.T) {
	w := newArbiterWorld(t)
	propose, esc, txn := w.conflict(3, 4)
	model := &agents.ScriptedModel{Replies: []string{"Here is my ruling:\n```json\n" +
		`{"winners": ["` + propose + `"], "losers": ["` + esc + `"], "rationale": "w1 is nearly done with the intro"}` + "\n```\n"}}
	w.runArbiter(w.connect(), "llm", agents.ModelArbiter(model))
	d := w.next("w2")
	if d.Intent != esc || d.Reason != intents.ReasonArbiterRejected || !strings.Contains(d.Detail, "arbiter llm: w1 is nearly done with the intro") {
		t.Fatalf("newcomer: %+v", d)
	}
	prompts := model.Prompts()
	if len(prompts) != 1 {
		t.Fatalf("the model was asked %d times", len(prompts))
	}
	for _, want := range []string{"Case " + esc, "The escalated intent " + esc + " (agent w2, priority 4)",
		"transaction in flight: " + txn + " of agent w1", "propose " + propose, "(agent w1, priority 3)",
		"write-write on report.intro", "- report.intro: absent", `"rewrite"`, `{"winners": [intent ids]`} {
		if !strings.Contains(prompts[0], want) {
			t.Errorf("prompt lacks %q:\n%s", want, prompts[0])
		}
	}
}

// (d) A model answering nonsense: Decide fails with ErrModelOutput, the
// arbiter logs it and hands the case back; it comes again, the model is
// asked again (the same prompt) and this time answers well.
func TestModelArbiterBadOutput(t *testing.T) {
	w := newArbiterWorld(t)
	propose, esc, _ := w.conflict(3, 4)
	model := &agents.ScriptedModel{Replies: []string{
		"Let w2 win: its rewrite is better.",
		`{"winners": ["` + esc + `"], "losers": ["` + propose + `"], "rationale": "the rewrite is better"}`,
	}}
	var logs arbiterLogs
	stop, done := w.runArbiter(w.connect(), "llm", agents.ModelArbiter(model), agents.WithLogger(logs.logger()), agents.WithRetryDelay(10*time.Millisecond))
	if d := w.next("w1"); d.Intent != propose || d.Outcome != intents.OutcomeAborted {
		t.Fatalf("holder: %+v", d)
	}
	if d := w.next("w2"); d.Intent != esc || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("newcomer: %+v", d)
	}
	if p := model.Prompts(); len(p) != 2 || p[0] != p[1] {
		t.Fatalf("the model was asked %d times (want twice, the same prompt)", len(p))
	}
	stop() // the decisions may come before the arbiter has logged the coordinator's reply
	if err := arbiterStopped(t, done); err != nil {
		t.Fatalf("RunArbiter: %v", err)
	}
	out := logs.String()
	for _, want := range []string{"no resolution; the case will come again", "model answer is not a resolution: no JSON object",
		"Let w2 win", "msg=resolved"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
}

// A resolution that does not fit its case is caught by the arbiter's own
// check (arbiter.Check) and the case handed back, never sent: the
// coordinator would refuse it and the case would be dropped. The second
// answer settles it.
func TestRunArbiterChecksBeforeSending(t *testing.T) {
	w := newArbiterWorld(t)
	propose, esc, _ := w.conflict(3, 4)
	var calls sync.Mutex
	n := 0
	var logs arbiterLogs
	stop, done := w.runArbiter(w.connect(), "judge", func(_ context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		calls.Lock()
		defer calls.Unlock()
		n++
		if n == 1 {
			return &intents.Resolution{Winners: []string{esc, propose}, Rationale: "everybody wins"}, nil
		}
		return &intents.Resolution{Winners: []string{propose}, Losers: []string{esc}, Rationale: "w1 was first"}, nil
	}, agents.WithLogger(logs.logger()), agents.WithRetryDelay(10*time.Millisecond))
	if d := w.next("w2"); d.Intent != esc || d.Reason != intents.ReasonArbiterRejected || !strings.Contains(d.Detail, "w1 was first") {
		t.Fatalf("newcomer: %+v", d)
	}
	stop()
	if err := arbiterStopped(t, done); err != nil {
		t.Fatalf("RunArbiter: %v", err)
	}
	out := logs.String()
	for _, want := range []string{"no resolution; the case will come again", "cannot both win", "msg=resolved"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "resolution refused") {
		t.Errorf("the bad resolution reached the coordinator:\n%s", out)
	}
}

// A resolution the coordinator refuses because the case is settled already
// (here by a rival arbiter) drops the case: it is not handed back.
func TestRunArbiterDropsASettledCase(t *testing.T) {
	w := newArbiterWorld(t)
	_, esc, _ := w.conflict(1, 5)
	var logs arbiterLogs
	dropped := w.terminated()
	w.runArbiter(w.connect(), "slow", func(_ context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		r, err := w.nc.Request(w.subj.API(intents.APIArbiterResolve),
			[]byte(`{"escalation":"`+c.ID+`","arbiter":"rival","losers":["`+c.ID+`"],"rationale":"the rival was faster"}`), 10*time.Second)
		if err != nil || string(r.Data) != `{"ok":true,"settled":true}` {
			t.Errorf("the rival's resolution: %v %v", r, err)
		}
		return &intents.Resolution{Winners: []string{c.ID}, Rationale: "too late"}, nil
	}, agents.WithLogger(logs.logger()), agents.WithRetryDelay(10*time.Millisecond))
	if d := w.next("w2"); d.Intent != esc || d.Reason != intents.ReasonArbiterRejected || !strings.Contains(d.Detail, "arbiter rival:") {
		t.Fatalf("newcomer: %+v", d)
	}
	// The case leaves the queue twice over: the coordinator removes it
	// when the rival settles it, and the arbiter drops it when its own
	// resolution is refused.
	dropped()
	logs.await(t, "resolution refused; case dropped")
	if out := logs.String(); !strings.Contains(out, "(invalid)") ||
		strings.Count(out, "resolution refused") != 1 {
		t.Fatalf("logs:\n%s", out)
	}
}

// A decide still busy at the case's deadline is told so through its
// context; the case is dropped, the coordinator's fallback having settled
// it.
func TestRunArbiterPastTheDeadline(t *testing.T) {
	w := newArbiterWorld(t, coordinator.Options{Core: coordinator.CoreOptions{Engine: engine.Config{ArbiterTimeout: 300 * time.Millisecond}}})
	_, esc, _ := w.conflict(1, 5)
	var logs arbiterLogs
	var cause error
	dropped := w.terminated()
	stop, done := w.runArbiter(w.connect(), "slow", func(ctx context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return nil, ctx.Err()
	}, agents.WithLogger(logs.logger()))
	if d := w.next("w2"); d.Intent != esc || d.Reason != intents.ReasonArbiterRejected {
		t.Fatalf("newcomer: %+v", d)
	}
	dropped()
	stop()
	if err := arbiterStopped(t, done); err != nil {
		t.Fatalf("RunArbiter: %v", err)
	}
	if cause == nil || !strings.Contains(cause.Error(), "past its deadline") {
		t.Errorf("decide's context ended with %v", cause)
	}
	if out := logs.String(); !strings.Contains(out, "case dropped: past its deadline") {
		t.Errorf("logs:\n%s", out)
	}
}

func TestRunArbiterRefusesToStartWrong(t *testing.T) {
	w := newArbiterWorld(t)
	decide := ruleDecide(arbiter.Reject, "x")
	ctx := context.Background()
	if err := agents.RunArbiter(ctx, w.nc, "bad name", decide); err == nil || !strings.Contains(err.Error(), "not an agent name") {
		t.Errorf("bad name: %v", err)
	}
	if err := agents.RunArbiter(ctx, w.nc, "judge", nil); err == nil {
		t.Error("nil decide: no error")
	}
	if err := agents.RunArbiter(ctx, w.nc, "judge", decide, agents.WithAckWait(-time.Second)); err == nil {
		t.Error("negative ack wait: no error")
	}
	if err := agents.RunArbiter(ctx, w.nc, "judge", decide, agents.WithPrefix("nobody")); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("no coordinator under that prefix: %v", err)
	}
}

// terminated watches for the arbiters' consumer to drop (Term) a case; the
// function it returns waits for that and then checks that no case is left
// queued or in hand.
func (w *arbiterWorld) terminated() func() {
	w.t.Helper()
	stream := w.subj.Stream(intents.StreamArbiter)
	// The server's advisory for a terminated message (server.JSAdvisoryConsumerMsgTerminatedPre).
	sub, err := w.nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED." + stream + ".arbiters")
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.nc.Flush(); err != nil {
		w.t.Fatal(err)
	}
	return func() {
		w.t.Helper()
		if _, err := sub.NextMsg(10 * time.Second); err != nil {
			w.t.Fatalf("the case was not dropped: %v", err)
		}
		js, err := jetstream.New(w.nc)
		if err != nil {
			w.t.Fatal(err)
		}
		cons, err := js.Consumer(context.Background(), stream, "arbiters")
		if err != nil {
			w.t.Fatal(err)
		}
		if info, err := cons.Info(context.Background()); err != nil || info.NumAckPending != 0 || info.NumPending != 0 {
			w.t.Fatalf("a case is still queued or in hand: %+v %v", info, err)
		}
	}
}

// The escalation the unit tests below parse answers for.
func sampleArbiterCase() *intents.Escalation {
	return &intents.Escalation{ID: "01JD00000000000000000000E5",
		Intents: []*intents.Intent{{ID: "01JD00000000000000000000E5", Agent: "w2", Kind: intents.KindApply, Priority: 4},
			{ID: "01JD00000000000000000000H1", Agent: "w1", Kind: intents.KindPropose, Priority: 3}},
		Holder: &intents.Holder{Txn: "T1", Agent: "w1", Intent: "01JD00000000000000000000H1"},
		State:  map[string]intents.PathState{"report.intro": {Exists: true, Value: "draft", Version: 2}}}
}

func TestModelArbiterDecide(t *testing.T) {
	c := sampleArbiterCase()
	ctx := context.Background()
	var seen string
	m := &agents.ScriptedModel{Func: func(prompt string) (string, error) {
		seen = prompt
		return `{"losers":["01JD00000000000000000000E5"],"rationale":"the draft stands"}`, nil
	}}
	res, err := agents.ModelArbiter(m)(ctx, c)
	if err != nil || len(res.Losers) != 1 || seen != arbiter.Prompt(c) || !strings.Contains(seen, `- report.intro = "draft" (version 2)`) {
		t.Fatalf("%+v, %v; prompt:\n%s", res, err, seen)
	}
	// An answer that reads but does not fit the case: both sentinels, and
	// the answer quoted.
	_, err = agents.ModelArbiter(&agents.ScriptedModel{Replies: []string{`{"winners":["w2"],"rationale":"r"}`}})(ctx, c)
	if !errors.Is(err, arbiter.ErrModelOutput) || !errors.Is(err, arbiter.ErrBadResolution) ||
		!strings.HasPrefix(err.Error(), "agents: model answer is not a resolution: w2 is neither") ||
		!strings.HasSuffix(err.Error(), `the answer was "{\"winners\":[\"w2\"],\"rationale\":\"r\"}"`) {
		t.Fatalf("an answer naming an intent the case does not: %v", err)
	}
	_, err = agents.ModelArbiter(&agents.ScriptedModel{})(ctx, c)
	if !errors.Is(err, agents.ErrScriptEnded) {
		t.Fatalf("an empty script: %v", err)
	}
	failing := errors.New("model down")
	_, err = agents.ModelArbiter(&agents.ScriptedModel{Func: func(string) (string, error) { return "", failing }})(ctx, c)
	if !errors.Is(err, failing) {
		t.Fatalf("a failing model: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := agents.ModelArbiter(&agents.ScriptedModel{Replies: []string{"{}"}})(cancelled, c); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v", err)
	}
}

// A panel of three reviewers settles a case by two that agree. r3 votes
// first, for the holder, and keeps running; r1, started next, gets the
// case offered again (never r3, who voted) and votes for the rewrite: no
// two agree yet, and the case stays open. r2 agrees with r1: settled. The
// arbiters run RunArbiter unchanged.
func TestPanelOfArbiters(t *testing.T) {
	w := newArbiterWorld(t, coordinator.Options{Core: coordinator.CoreOptions{Engine: engine.Config{
		Panel: intents.Panel{Quorum: 2}, ArbiterTimeout: time.Minute}}})
	propose, esc, _ := w.conflict(0, 0)
	vote := func(escWins bool) agents.Decide {
		return func(_ context.Context, c *intents.Escalation) (*intents.Resolution, error) {
			if c.Panel == nil || c.Panel.Quorum != 2 {
				return nil, fmt.Errorf("the case has no panel of 2: %+v", c.Panel)
			}
			if escWins {
				return &intents.Resolution{Winners: []string{esc}, Losers: []string{propose}, Rationale: "the rewrite is newer"}, nil
			}
			return &intents.Resolution{Winners: []string{propose}, Losers: []string{esc}, Rationale: "the holder came first"}, nil
		}
	}
	votes := func() map[string]int {
		page := natstest.Request[struct {
			Events []*intents.Event `json:"events"`
		}](t, w.nc, w.subj.API(intents.APILogQuery), `{"type":"vote"}`)
		out := map[string]int{}
		for _, ev := range page.Events {
			out[ev.Vote.Agent]++
		}
		return out
	}
	waitVote := func(name string) {
		t.Helper()
		natstest.CheckFor(t, 20*time.Second, name+"'s vote", func() error {
			if v := votes(); v[name] != 1 {
				return fmt.Errorf("votes %v", v)
			}
			return nil
		})
	}
	w.runArbiter(w.connect(), "r3", vote(false), agents.WithRetryDelay(50*time.Millisecond))
	waitVote("r3")
	w.runArbiter(w.connect(), "r1", vote(true), agents.WithRetryDelay(50*time.Millisecond))
	waitVote("r1")
	open := natstest.Request[struct {
		Cases []struct{ ID string } `json:"cases"`
	}](t, w.nc, w.subj.API(intents.APITxnList), `{"cases":true}`)
	if len(open.Cases) != 1 || open.Cases[0].ID != esc {
		t.Fatalf("open cases after two votes that disagree: %+v", open.Cases)
	}
	w.runArbiter(w.connect(), "r2", vote(true), agents.WithRetryDelay(50*time.Millisecond))
	if d := w.next("w2"); d.Intent != esc || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("the escalated intent once two agree: %+v", d)
	}
	if d := w.next("w1"); d.Intent != propose || d.Outcome != intents.OutcomeAborted || !strings.Contains(d.Detail, "2 of the panel agree: r1: the rewrite is newer; r2: the rewrite is newer") {
		t.Fatalf("the holder: %+v", d)
	}
	if v := votes(); len(v) != 3 || v["r1"] != 1 || v["r2"] != 1 || v["r3"] != 1 {
		t.Fatalf("votes %v: want one of each arbiter", v)
	}
}
