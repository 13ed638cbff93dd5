package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/intents"
)

// boardRules is a task board: a state machine on status, a schema on spec,
// writers by role, a WIP limit of 2 running tasks, a default wait policy
// under queue, and quotas.
const boardRules = `{
  "agents": {"lead": {"roles": ["lead"]}},
  "rules": [
    {"pattern": "tasks.*.status", "writers": ["role:coder", "role:lead"],
     "transitions": {"PENDING": ["RUNNING", "CANCELLED"], "RUNNING": ["DONE", "FAILED"]}, "initial": ["PENDING"]},
    {"pattern": "tasks.*.spec", "schema": {"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}}}},
    {"pattern": "queue.**", "on_conflict": "wait"}
  ],
  "invariants": [{"name": "wip", "expr": "count(values(state.tasks), .status == \"RUNNING\") <= 2"}],
  "quotas": {"spammer": {"intents_per_second": 1, "burst": 3}}
}`

// withCoders gives the agents c0…c(n-1) the role coder.
func withCoders(n int) string {
	var f map[string]any
	json.Unmarshal([]byte(boardRules), &f)
	ag := f["agents"].(map[string]any)
	for i := range n {
		ag[fmt.Sprintf("c%d", i)] = map[string]any{"roles": []string{"coder"}}
	}
	out, _ := json.Marshal(f)
	return string(out)
}

func setRules(t *testing.T, w *world, file string) *intents.Rules {
	t.Helper()
	rec, err := w.svc.SetRules(context.Background(), []byte(file), "test")
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestRulesOverTheWire: each kind of rule, accepted and violated, with the
// exact reason, through the SDK and the wire.
func TestRulesOverTheWire(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 60*time.Second)
	setRules(t, w, withCoders(2))
	lead, c0, writer := w.client("lead"), w.client("c0"), w.client("writer")

	mustApply := func(c *agents.Client, b *intents.Builder) {
		t.Helper()
		if _, err := c.Apply(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	expectErr := func(what string, err, want error, detail string) {
		t.Helper()
		var rej *agents.RejectedError
		if !errors.Is(err, want) || !errors.As(err, &rej) || rej.Decision.Detail != detail {
			t.Fatalf("%s: %v\nwant %v with detail %q", what, err, want, detail)
		}
	}
	mustApply(lead, intents.Apply("plan").Set("tasks.t1", map[string]any{"status": "PENDING", "spec": map[string]any{"title": "one"}}))

	// State machine.
	_, err := c0.Apply(ctx, intents.Apply("finish").Set("tasks.t1.status", "DONE"))
	expectErr("skip a state", err, agents.ErrIllegalTransition,
		`tasks.t1.status: "PENDING" → DONE is not a legal transition of rules[0] (tasks.*.status); from "PENDING": RUNNING, CANCELLED`)
	mustApply(c0, intents.Apply("start").Set("tasks.t1.status", "RUNNING"))
	_, err = c0.Apply(ctx, intents.Apply("new").Set("tasks.t2.status", "RUNNING"))
	expectErr("a new task not PENDING", err, agents.ErrIllegalTransition,
		"tasks.t2.status: a new value must start in PENDING, not RUNNING (rules[0], tasks.*.status)")

	// Writers.
	_, err = writer.Apply(ctx, intents.Apply("meddle").Set("tasks.t1.status", "FAILED"))
	expectErr("not a coder", err, agents.ErrUnauthorized,
		"agent writer may not write tasks.t1.status: rules[0] (tasks.*.status) lets only role:coder, role:lead write there")
	mustApply(writer, intents.Apply("note").Set("tasks.t1.note", "looks good"))

	// Schema.
	_, err = lead.Apply(ctx, intents.Apply("spec").Set("tasks.t1.spec", map[string]any{"title": 7}))
	expectErr("schema", err, agents.ErrInvalid,
		`tasks.t1.spec = {"title":7} does not satisfy the schema of rules[1] (tasks.*.spec): at '/title': got number, want string`)
	mustApply(lead, intents.Apply("spec").Set("tasks.t1.spec.title", "renamed"))

	// Default policy: under queue an intent that names none waits.
	tx, err := lead.Propose(ctx, intents.Propose("hold").Write("queue.q1", intents.OpSet))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	queued := make(chan struct{})
	waiter := w.client("writer", agents.WithDecisionHook(func(d *intents.Decision) {
		if d.Outcome == intents.OutcomeQueued {
			close(queued)
		}
	}))
	go func() {
		_, err := waiter.Apply(ctx, intents.Apply("enqueue").Set("queue.q1.item", 1))
		done <- err
	}()
	<-queued
	if _, err := tx.Commit(ctx, intents.Apply("hold").Set("queue.q1", map[string]any{})); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiting apply: %v", err)
	}

	// Invariant: a third running task breaks the WIP limit.
	for _, id := range []string{"t2", "t3"} {
		mustApply(lead, intents.Apply("plan").Set("tasks."+id, map[string]any{"status": "PENDING", "spec": map[string]any{"title": id}}))
	}
	mustApply(lead, intents.Apply("start").Set("tasks.t2.status", "RUNNING"))
	_, err = c0.Apply(ctx, intents.Apply("start").Set("tasks.t3.status", "RUNNING"))
	var rej *agents.RejectedError
	if !errors.Is(err, agents.ErrPostconditionFailed) || !errors.As(err, &rej) ||
		!strings.Contains(rej.Decision.Detail, "invariant wip `count(values(state.tasks), .status == \"RUNNING\") <= 2` is false") {
		t.Fatalf("WIP: %v", err)
	}

	// Quota: a burst of 3, then rate_limited with the time to retry.
	spam := w.client("spammer")
	var limited *agents.RejectedError
	for i := range 10 {
		_, err := spam.Apply(ctx, intents.Apply("spam").Incr("spam.n", 1))
		if errors.As(err, &limited) {
			if i < 3 || !errors.Is(err, agents.ErrRateLimited) || !limited.Retryable() || !strings.Contains(limited.Decision.Detail, "retry in") {
				t.Fatalf("intent %d: %v", i, err)
			}
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if limited == nil {
		t.Fatal("no rate limit in 10 intents at a quota of 1/s with a burst of 3")
	}
}

// TestWIPInvariantUnderContention: 32 coders race to start 32 tasks, half
// with one-shot applies and half with transactions; at no revision do more
// than 2 run.
func TestWIPInvariantUnderContention(t *testing.T) {
	const coders, limit = 32, 2
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 120*time.Second)
	setRules(t, w, withCoders(coders))
	lead := w.client("lead")
	tasks := map[string]any{}
	for i := range coders {
		tasks[fmt.Sprintf("t%d", i)] = map[string]any{"status": "PENDING"}
	}
	if _, err := lead.Apply(ctx, intents.Apply("plan").Set("tasks", tasks)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	started := 0
	for i := range coders {
		c := w.client(fmt.Sprintf("c%d", i))
		path := fmt.Sprintf("tasks.t%d.status", i)
		wg.Go(func() {
			var err error
			if i%2 == 0 {
				_, err = c.Apply(ctx, intents.Apply("start").Set(path, "RUNNING"))
			} else {
				// A transaction that may start a task reads the board (the
				// invariant's paths), so it conflicts with any other writer
				// there while in flight: it waits its turn, and one that
				// cannot start its task ends at once.
				var tx *agents.Txn
				tx, err = c.Propose(ctx, intents.Propose("start").Write(path, intents.OpSet).Wait(time.Minute))
				if err == nil {
					if _, err = tx.Commit(ctx, intents.Apply("start").Set(path, "RUNNING")); err != nil {
						tx.Abort(ctx)
					}
				}
			}
			switch {
			case err == nil:
				mu.Lock()
				started++
				mu.Unlock()
			case errors.Is(err, agents.ErrPostconditionFailed), errors.Is(err, agents.ErrConflict):
			default:
				t.Errorf("coder %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if started != limit {
		t.Fatalf("%d tasks started, want exactly %d", started, limit)
	}
	// Walk the log: at no revision were more than `limit` running.
	if err := w.svc.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.svc = nil
	core, err := coordinator.OpenCore(w.dir, coordinator.CoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close()
	peak := 0
	err = core.Log().Scan(1, 0, func(ev *intents.Event) error {
		if err := eng.Apply(ev); err != nil {
			return err
		}
		if ev.Type != intents.EventChange {
			return nil
		}
		running := 0
		for i := range coders {
			if v, ok := eng.State().Get(fmt.Sprintf("tasks.t%d.status", i)); ok && v == "RUNNING" {
				running++
			}
		}
		peak = max(peak, running)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if peak != limit {
		t.Fatalf("at the peak %d tasks ran, want %d", peak, limit)
	}
}

// TestRulesReloadAndReplay: decisions before and after a change of rules
// follow their own rules, and a replay of the log decides nothing
// differently: its state and rules equal the live ones at each point.
func TestRulesReloadAndReplay(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 60*time.Second)
	first := setRules(t, w, `{"rules":[{"pattern":"docs.**","writers":["alice"]}]}`)
	alice, bob := w.client("alice"), w.client("bob")
	if _, err := alice.Apply(ctx, intents.Apply("w").Set("docs.a", 1)); err != nil {
		t.Fatal(err)
	}
	_, err := bob.Apply(ctx, intents.Apply("w").Set("docs.b", 1))
	if !errors.Is(err, agents.ErrUnauthorized) {
		t.Fatalf("bob under the first rules: %v", err)
	}
	mid, err := bob.Read(ctx, "docs.a")
	if err != nil {
		t.Fatal(err)
	}
	second := setRules(t, w, `{"rules":[{"pattern":"docs.**","writers":["bob"]}]}`)
	if first.Hash == second.Hash {
		t.Fatal("two files, one hash")
	}
	if _, err := bob.Apply(ctx, intents.Apply("w").Set("docs.b", 2)); err != nil {
		t.Fatalf("bob under the second rules: %v", err)
	}
	if _, err := alice.Apply(ctx, intents.Apply("w").Set("docs.a", 2)); !errors.Is(err, agents.ErrUnauthorized) {
		t.Fatalf("alice under the second rules: %v", err)
	}
	// A file that does not compile changes nothing.
	if _, err := w.svc.SetRules(ctx, []byte(`{"rules":[{"pattern":""}]}`), "test"); err == nil {
		t.Fatal("a bad rules file was accepted")
	}
	if cur, _ := w.svc.Rules(ctx); cur.Hash != second.Hash {
		t.Fatalf("rules in force %s, want %s", cur.Hash, second.Hash)
	}

	if err := w.svc.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	live := replay.Hash(w.svc.Core().Engine().State())
	w.svc = nil
	core, err := coordinator.OpenCore(w.dir, coordinator.CoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close()
	full, err := replay.Run(core.Log(), replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := replay.Hash(full.State()); got != live {
		t.Fatalf("replay hash %s, live %s", got, live)
	}
	if r, _ := full.Rules(); r == nil || r.Hash != second.Hash {
		t.Fatalf("replayed rules %v, want %s", r, second.Hash)
	}
	then, err := replay.Run(core.Log(), replay.Options{Seq: mid.Rev})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := then.Rules(); r == nil || r.Hash != first.Hash {
		t.Fatalf("rules at rev %d: %v, want the first (%s)", mid.Rev, r, first.Hash)
	}
	// A replayed engine decides as the live one did under each rules: bob
	// may write at the end, not in the middle.
	for _, c := range []struct {
		eng  *engine.Engine
		want intents.Outcome
	}{{then, intents.OutcomeRejected}, {full, intents.OutcomeApplied}} {
		evs := c.eng.Submit(time.Now(), engine.Input{Agent: "bob", Raw: []byte(`{"id":"01JD00000000000000000000ZZ","agent":"bob","kind":"apply","writes":[{"path":"docs.c","op":"set","value":1}]}`)}, nil).Events
		var got intents.Outcome
		for _, ev := range evs {
			if ev.Decision != nil {
				got = ev.Decision.Outcome
			}
		}
		if got != c.want {
			t.Fatalf("replayed engine at %d decided bob's write %s, want %s", c.eng.Seq(), got, c.want)
		}
	}
}

// TestLimitsOverTheWire: the rules' limits refuse an intent that carries
// too much, naming the field, its value and the limit.
func TestLimitsOverTheWire(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 30*time.Second)
	setRules(t, w, `{"limits":{"writes":2,"path_depth":3}}`)
	c := w.client("a")
	if _, err := c.Apply(ctx, intents.Apply("ok").Set("a.b", 1).Set("a.c", 1)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Apply(ctx, intents.Apply("many").Set("a.b", 1).Set("a.c", 1).Set("a.d", 1))
	var rej *agents.RejectedError
	if !errors.As(err, &rej) || !errors.Is(err, agents.ErrInvalid) ||
		rej.Decision.Detail != "intent field writes = 3 writes: above the rules' limit of 2" {
		t.Fatalf("three writes: %v", err)
	}
	_, err = c.Apply(ctx, intents.Apply("deep").Set("a.b.c.d", 1))
	if !errors.As(err, &rej) || rej.Decision.Detail != "intent field writes[0].path = 4 segments: above the rules' limit of 3" {
		t.Fatalf("a deep path: %v", err)
	}
}

// TestRecordKindsOverTheWire: two agents stating contradicting facts on one
// subject do not overwrite each other: the second goes to the arbiter,
// which settles it; tasks are claimed by their owners, decisions never
// overwritten.
func TestRecordKindsOverTheWire(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 60*time.Second)
	setRules(t, w, `{"rules":[{"pattern":"facts.*","kind":"fact"},{"pattern":"tasks.*","kind":"task"},{"pattern":"decisions.*","kind":"decision"}]}`)
	r1 := w.client("r1")
	arb, stop := context.WithCancel(ctx)
	defer stop()
	// The arbiter keeps the fact in force: the newcomer loses.
	go agents.RunArbiter(arb, w.connect(), "judge", func(_ context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		if len(c.Conflicts) != 1 || c.Conflicts[0].Kind != intents.ConflictContradiction || !c.State["facts.capital"].Exists {
			return nil, fmt.Errorf("not a contradiction case: %+v", c)
		}
		return &intents.Resolution{Losers: []string{c.ID}, Rationale: "the fact in force has better evidence"}, nil
	})

	if _, err := r1.Apply(ctx, intents.Apply("state").Set("facts.capital", map[string]any{"claim": "Paris"})); !errors.Is(err, agents.ErrInvalid) {
		t.Fatalf("a fact without evidence: %v", err)
	}
	if _, err := r1.Apply(ctx, intents.Apply("state").Set("facts.capital", map[string]any{"claim": "Paris", "evidence": []string{"atlas"}})); err != nil {
		t.Fatal(err)
	}
	escalated := make(chan *intents.Decision, 1)
	r2 := w.client("r2", agents.WithDecisionHook(func(d *intents.Decision) {
		if d.Outcome == intents.OutcomeEscalated {
			escalated <- d
		}
	}))
	_, err := r2.Apply(ctx, intents.Apply("state").Set("facts.capital", map[string]any{"claim": "Lyon", "evidence": []string{"blog"}}))
	var rej *agents.RejectedError
	if !errors.Is(err, agents.ErrArbiterRejected) || !errors.As(err, &rej) || !strings.Contains(rej.Decision.Detail, "better evidence") {
		t.Fatalf("a contradicting fact: %v", err)
	}
	if d := <-escalated; len(d.Conflicts) != 1 || d.Conflicts[0].Kind != intents.ConflictContradiction {
		t.Fatalf("interim decision %+v", d)
	}
	st, err := r2.Read(ctx, "facts.capital")
	if err != nil {
		t.Fatal(err)
	}
	v := st.Values["facts.capital"]
	if !strings.Contains(string(v.Value), "Paris") {
		t.Fatalf("the fact in force %s", v.Value)
	}
	// Superseding it, naming its version, is no contradiction.
	if _, err := r2.Apply(ctx, intents.Apply("state").Set("facts.capital",
		map[string]any{"claim": "Lyon", "evidence": []string{"decree"}, "supersedes": v.Version})); err != nil {
		t.Fatalf("an explicit supersession: %v", err)
	}

	if _, err := r1.Apply(ctx, intents.Apply("claim").Set("tasks.t1", map[string]any{"owner": "r1", "status": "open"})); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Apply(ctx, intents.Apply("steal").Set("tasks.t1.owner", "r2")); !errors.Is(err, agents.ErrUnauthorized) {
		t.Fatalf("changing another's task: %v", err)
	}
	if _, err := r1.Apply(ctx, intents.Apply("decide").Set("decisions.d1", map[string]any{"decision": "ship"})); err != nil {
		t.Fatal(err)
	}
	if _, err := r1.Apply(ctx, intents.Apply("decide").Set("decisions.d1", map[string]any{"decision": "hold"})); !errors.Is(err, agents.ErrIllegalTransition) {
		t.Fatalf("overwriting a decision: %v", err)
	}
}

// TestPreemptOverTheWire: a lead's intent preempts the transaction in its
// way, whose holder learns it; another agent's is refused.
func TestPreemptOverTheWire(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 30*time.Second)
	setRules(t, w, `{"agents":{"boss":{"roles":["lead"]}},"rules":[{"pattern":"board.**","preempt":["role:lead"]}]}`)
	w1, w3, boss := w.client("w1"), w.client("w3"), w.client("boss")
	tx, err := w1.Propose(ctx, intents.Propose("plan").Write("board.plan", intents.OpSet))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w3.Apply(ctx, intents.Apply("plan").Set("board.plan", "w3's")); !errors.Is(err, agents.ErrConflict) {
		t.Fatalf("an agent without the role: %v", err)
	}
	if _, err := boss.Apply(ctx, intents.Apply("plan").Set("board.plan", "the lead's")); err != nil {
		t.Fatalf("the lead: %v", err)
	}
	awaitLost(t, tx)
	if !errors.Is(tx.Err(), agents.ErrPreempted) || !strings.Contains(tx.Err().Error(), "lets role:lead preempt") {
		t.Fatalf("the holder: %v", tx.Err())
	}
}
