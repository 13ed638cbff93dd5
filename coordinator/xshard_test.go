package coordinator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/oklog/ulid/v2"
)

// TestCrossShardApplies: agents that know nothing of shards increment
// tasks.n (the default shard's) and report.n (s2's) together in one
// apply, through either shard, while others increment each alone. Every
// cross-shard apply told applied is in both states once, every one
// refused in neither: in the end tasks.n and report.n differ by exactly
// what the single-board increments applied. A cross-shard apply whose
// part another shard refuses is refused with that shard's reason, and
// each shard's log replays to its live state.
func TestCrossShardApplies(t *testing.T) {
	ns := natstest.Run(t)
	def, defDir := shardOf(t, ns, "")
	s2, s2Dir := shardOf(t, ns, "s2")
	moveBoard(t, def, s2, "report")
	nc := natstest.Connect(t, ns)
	base := intents.Subjects{}
	submit := func(subject, body string) (*intents.Decision, error) {
		return natstest.RequestErr[intents.Decision](nc, subject, body, 10*time.Second)
	}

	var cross, tasks, report atomic.Int64
	var wg sync.WaitGroup
	const rounds = 60
	for i := range 4 {
		wg.Go(func() {
			agent := fmt.Sprintf("x%d", i)
			subj := []intents.Subjects{base, base.Shard("s2")}[i%2]
			for range rounds {
				body := fmt.Sprintf(`{"id":%q,"agent":%q,"kind":"apply","writes":[{"path":"tasks.n","op":"incr","value":1},{"path":"report.n","op":"incr","value":1}]}`,
					ulid.Make().String(), agent)
				d, err := submit(subj.Submit(agent), body)
				switch {
				case err != nil:
					t.Errorf("cross-shard apply: %v", err)
					return
				case d.Outcome == intents.OutcomeApplied:
					cross.Add(1)
				case d.Outcome != intents.OutcomeRejected || d.Reason != intents.ReasonConflict || !d.Retryable:
					t.Errorf("cross-shard apply: %+v", d)
					return
				}
			}
		})
	}
	for i, board := range []string{"tasks", "report"} {
		n := []*atomic.Int64{&tasks, &report}[i]
		wg.Go(func() {
			agent := "one-" + board
			for range rounds {
				body := fmt.Sprintf(`{"id":%q,"agent":%q,"kind":"apply","writes":[{"path":"%s.n","op":"incr","value":1}]}`, ulid.Make().String(), agent, board)
				d, err := submit(base.Submit(agent), body)
				switch {
				case err != nil:
					t.Errorf("incr of %s: %v", board, err)
					return
				case d.Outcome == intents.OutcomeApplied:
					n.Add(1)
				case d.Outcome != intents.OutcomeRejected || d.Reason != intents.ReasonConflict:
					t.Errorf("incr of %s: %+v", board, d)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if cross.Load() == 0 {
		t.Fatal("no cross-shard apply was applied")
	}
	read := func(svc *Service, path string) float64 {
		var v any
		svc.call(context.Background(), func() { v, _ = svc.core.Engine().State().Get(path) })
		f, _ := v.(float64)
		return f
	}
	natstest.CheckFor(t, 10*time.Second, "every part finished", func() error {
		tn, rn := read(def, "tasks.n"), read(s2, "report.n")
		if tn != float64(cross.Load()+tasks.Load()) || rn != float64(cross.Load()+report.Load()) {
			return fmt.Errorf("tasks.n = %v, report.n = %v; applied %d together, %d and %d alone", tn, rn, cross.Load(), tasks.Load(), report.Load())
		}
		return nil
	})
	t.Logf("%d cross-shard applies applied, %d and %d single-board ones", cross.Load(), tasks.Load(), report.Load())

	// s2 refuses its part: the whole apply is refused with its reason, and
	// the default shard's part is dropped.
	before := read(def, "tasks.n")
	d, err := submit(base.Submit("x9"), fmt.Sprintf(`{"id":%q,"agent":"x9","kind":"apply","pre":["state.report.n == -1"],"writes":[{"path":"tasks.n","op":"incr","value":1},{"path":"report.n","op":"incr","value":1}]}`, ulid.Make().String()))
	if err != nil || d.Outcome != intents.OutcomeRejected || d.Reason != intents.ReasonPreconditionFailed {
		t.Fatalf("an apply whose s2 part fails its precondition: %+v %v", d, err)
	}
	if got := read(def, "tasks.n"); got != before {
		t.Fatalf("tasks.n went from %v to %v on a refused apply", before, got)
	}
	// A condition over both shards' boards cannot be split.
	d, err = submit(base.Submit("x9"), fmt.Sprintf(`{"id":%q,"agent":"x9","kind":"apply","pre":["state.report.n == state.tasks.n"],"writes":[{"path":"tasks.m","op":"set","value":1}]}`, ulid.Make().String()))
	if err != nil || d.Outcome != intents.OutcomeRejected || d.Reason != intents.ReasonOutOfScope || d.Retryable {
		t.Fatalf("a condition over two shards' boards: %+v %v", d, err)
	}

	verifyShard(t, def, defDir)
	verifyShard(t, s2, s2Dir)
}

// verifyShard stops svc and checks that its log replays to the state it
// had.
func verifyShard(t *testing.T, svc *Service, dir string) {
	t.Helper()
	live := liveHash(t, svc)
	if err := svc.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	log, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	if got, err := replay.Verify(log, engine.Config{}, nil); err != nil || got != live {
		t.Fatalf("shard %s: replay %v, hash %s, live %s", shardName(svc.opts.Shard), err, got, live)
	}
}

// TestCrossShardInDoubt: a participant whose coordinator decided but
// never told it (every finish lost) asks, and ends its part as decided.
// A committed apply is answered only once every shard has applied its
// part: while the coordinator cannot tell s2, its agent waits; and a
// third agent that reads the apply's effect on the coordinator's board
// and then the participant's path waits for the part and sees it applied.
func TestCrossShardInDoubt(t *testing.T) {
	ns := natstest.Run(t)
	def, _ := shardOf(t, ns, "")
	s2, _ := shardOf(t, ns, "s2")
	s3, _ := shardOf(t, ns, "s3")
	moveBoard(t, def, s2, "report")
	moveBoard(t, def, s3, "other")
	nc := natstest.Connect(t, ns)
	inDoubt := func(n float64) func() error {
		return func() error {
			if got := gauge(scrape(t, s2.Registry()), "coagent_xshard_in_doubt"); got != n {
				return fmt.Errorf("coagent_xshard_in_doubt = %v on s2, want %v", got, n)
			}
			return nil
		}
	}
	submit := func(body string) <-chan *intents.Decision {
		out := make(chan *intents.Decision, 1)
		go func() {
			d, err := natstest.RequestErr[intents.Decision](nc, intents.Subjects{}.Submit("x1"), fmt.Sprintf(body, ulid.Make().String()), 20*time.Second)
			if err != nil {
				t.Errorf("cross-shard apply: %v", err)
			}
			out <- d
		}()
		return out
	}
	read := func(path string) string {
		t.Helper()
		st, err := natstest.RequestErr[stateReply](nc, intents.Subjects{}.API(intents.APIStateGet), fmt.Sprintf(`{"paths":[%q]}`, path), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(st.Values[path].Value)
	}

	def.xs.lose.Store(true)
	answered := submit(`{"id":%q,"agent":"x1","kind":"apply","writes":[{"path":"tasks.n","op":"incr","value":1},{"path":"report.n","op":"incr","value":1}]}`)
	natstest.CheckFor(t, 10*time.Second, "the commit point", func() error {
		if got := read("tasks.n"); got != "1" {
			return fmt.Errorf("tasks.n = %s", got)
		}
		return nil
	})
	// tasks.n reads 1: report.n must too, though s2 was not told. The
	// read waits for s2 to ask the coordinator and apply its part.
	if got := read("report.n"); got != "1" {
		t.Fatalf("report.n = %s after tasks.n read 1", got)
	}
	natstest.CheckFor(t, 10*time.Second, "nothing in doubt on s2", inDoubt(0))
	select {
	case d := <-answered:
		t.Fatalf("answered before the coordinator knew every part applied: %+v", d)
	default:
	}
	if n := gauge(scrape(t, def.Registry()), "coagent_xshard_unanswered"); n != 1 {
		t.Fatalf("coagent_xshard_unanswered = %v on the coordinator, want 1", n)
	}
	def.xs.lose.Store(false)
	if d := <-answered; d == nil || d.Outcome != intents.OutcomeApplied || d.Versions["report.n"] != 1 || d.Versions["tasks.n"] != 1 {
		t.Fatalf("the committed apply: %+v", d)
	}

	// Refused by s3's part: answered at once, and s2, which prepared its
	// part but is never told of the abort, asks and drops it.
	def.xs.lose.Store(true)
	d := <-submit(`{"id":%q,"agent":"x1","kind":"apply","pre":["state.other.n == 7"],"writes":[{"path":"tasks.n","op":"incr","value":1},{"path":"report.n","op":"incr","value":1},{"path":"other.n","op":"incr","value":1}]}`)
	if d == nil || d.Outcome != intents.OutcomeRejected || d.Reason != intents.ReasonPreconditionFailed || !strings.Contains(d.Detail, "shard s3 refused its part") {
		t.Fatalf("the refused apply: %+v", d)
	}
	if got := read("report.n"); got != "1" {
		t.Fatalf("report.n = %s after a refused apply", got)
	}
	natstest.CheckFor(t, 10*time.Second, "nothing in doubt on s2", inDoubt(0))
}

// TestCrossShardNeverBegun: a prepare that names a coordinator which never
// began the intent (sent by a client, not a coordinator) holds its paths
// only until the participant asks that coordinator: told it has no
// record of the intent, the participant drops the part, and its path is
// free again with nothing applied.
func TestCrossShardNeverBegun(t *testing.T) {
	ns := natstest.Run(t)
	def, _ := shardOf(t, ns, "")
	s2, s2Dir := shardOf(t, ns, "s2")
	moveBoard(t, def, s2, "report")
	nc := natstest.Connect(t, ns)

	id := ulid.Make().String()
	forged := fmt.Sprintf(`{"phase":"prepare","intent":%q,"coord":%q,"parts":[{"shard":"s2","intent":{"id":%q,"agent":"x1","kind":"apply","writes":[{"path":"report.n","op":"set","value":5}]}}]}`,
		id, intents.DefaultShard, id)
	v, err := natstest.RequestErr[intents.XVote](nc, intents.Subjects{}.Shard("s2").API(intents.APIShardPrepare), forged, 10*time.Second)
	if err != nil || !v.Prepared {
		t.Fatalf("the forged prepare: %+v %v", v, err)
	}
	if got := gauge(scrape(t, s2.Registry()), "coagent_xshard_in_doubt"); got != 1 {
		t.Fatalf("coagent_xshard_in_doubt = %v on s2 after the prepare, want 1", got)
	}
	natstest.CheckFor(t, 10*time.Second, "the part dropped", func() error {
		if got := gauge(scrape(t, s2.Registry()), "coagent_xshard_in_doubt"); got != 0 {
			return fmt.Errorf("coagent_xshard_in_doubt = %v on s2, want 0", got)
		}
		return nil
	})
	d, err := natstest.RequestErr[intents.Decision](nc, intents.Subjects{}.Submit("x2"),
		fmt.Sprintf(`{"id":%q,"agent":"x2","kind":"apply","writes":[{"path":"report.n","op":"incr","value":1}]}`, ulid.Make().String()), 10*time.Second)
	if err != nil || d.Outcome != intents.OutcomeApplied || d.Versions["report.n"] != 1 {
		t.Fatalf("an incr of report.n once the part is dropped: %+v %v", d, err)
	}
	verifyShard(t, s2, s2Dir)
}
