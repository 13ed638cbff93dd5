package agents_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
)

// TestShardRouting: with a board on shard s2, a client sends its intents
// and reads there itself (the default shard sees none of them), a
// transaction granted there commits there, a waiting intent's final
// decision comes from there, and a read of both shards' boards says each
// shard's rev.
func TestShardRouting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := natstest.Run(t)
	dir := t.TempDir()
	def := coordtest.StartOn(t, natstest.Connect(t, ns), filepath.Join(dir, "def"), coordinator.Options{})
	s2 := coordtest.StartOn(t, natstest.Connect(t, ns), filepath.Join(dir, "s2"),
		coordinator.Options{Prefix: intents.Subjects{}.Shard("s2").Prefix, Shard: "s2"})

	// report moves to s2, as coagent shards assign does.
	adopted, err := agents.MoveBoard(ctx, natstest.Connect(t, ns), intents.Subjects{}, "report", intents.DefaultShard, "s2")
	if err != nil || adopted.Handoff.Kind != intents.HandoffAdopt || adopted.Handoff.Board != "report" {
		t.Fatalf("MoveBoard: %+v %v", adopted, err)
	}
	// Again: the release is answered as before, and s2 refuses to adopt
	// what it owns.
	var api *agents.APIError
	if _, err := agents.MoveBoard(ctx, natstest.Connect(t, ns), intents.Subjects{}, "report", intents.DefaultShard, "s2"); !errors.As(err, &api) ||
		api.Code != string(intents.ReasonOutOfScope) || !strings.Contains(api.Description, "shard.adopt") {
		t.Fatalf("report moved twice from the default shard: %v", err)
	}
	nc := natstest.Connect(t, ns)
	c, err := agents.Connect(ctx, nc, "w1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d, err := c.Apply(ctx, intents.Apply("title").Set("report.title", "Q3")); err != nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("apply on report: %+v %v", d, err)
	}
	if _, err := c.Apply(ctx, intents.Apply("open").Set("tasks.t1", "open")); err != nil {
		t.Fatal(err)
	}
	// The default shard never saw report's intent: sent to s2 directly.
	if n := received(t, def); n != 1 {
		t.Fatalf("the default shard received %d intents, want 1 (tasks.t1's)", n)
	}

	// A transaction on s2, and an intent that waits on it there.
	txn, err := c.Propose(ctx, intents.Propose("edit").Set("report.title", nil).Lease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := agents.Connect(ctx, natstest.Connect(t, ns), "w2")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	waited := make(chan *intents.Decision, 1)
	go func() {
		d, err := c2.Apply(ctx, intents.Apply("after").Set("report.title", "Q5").OnConflict(intents.OnConflictWait).Wait(20*time.Second))
		if err != nil {
			t.Errorf("the waiting apply: %v", err)
		}
		waited <- d
	}()
	natstest.CheckFor(t, 10*time.Second, "the apply waits", func() error {
		if metric(t, s2, "coagent_waiters_parked") == 0 {
			return context.DeadlineExceeded
		}
		return nil
	})
	if d, err := txn.Commit(ctx, intents.Apply("edit").Set("report.title", "Q4")); err != nil || d.Outcome != intents.OutcomeCommitted {
		t.Fatalf("commit on s2: %+v %v", d, err)
	}
	if d := <-waited; d == nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("the waiting apply's final decision: %+v", d)
	}

	// Published, the intent is stored on s2's intents stream, and its
	// decision collected from there.
	id, err := c.Publish(ctx, &intents.Intent{Kind: intents.KindApply, Writes: []intents.Write{{Path: "report.pub", Op: intents.OpIncr}}})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := c.Decision(ctx, id); err != nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("a published intent of report: %+v %v", d, err)
	}

	// A watch of report follows s2's log and feed.
	w, err := c.Watch(ctx, "report", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var seen []string
	for len(seen) < 3 {
		select {
		case ch := <-w.Changes():
			for _, a := range ch.Writes {
				seen = append(seen, string(a.Value))
			}
		case <-ctx.Done():
			t.Fatalf("the watch of report saw %v", seen)
		}
	}
	if strings.Join(seen[:3], " ") != `"Q3" "Q4" "Q5"` {
		t.Fatalf("the watch of report saw %v", seen)
	}

	st, err := c.Read(ctx, "report.title", "tasks.t1")
	if err != nil {
		t.Fatal(err)
	}
	if string(st.Values["report.title"].Value) != `"Q5"` || string(st.Values["tasks.t1"].Value) != `"open"` ||
		st.Rev != 0 || st.Revs["s2"] == 0 || st.Revs[intents.DefaultShard] == 0 {
		t.Fatalf("read across shards: %+v", st)
	}

	// An apply of both shards' boards goes to the shard of its first,
	// which coordinates it; applied, its decision names every path's
	// version, and a read that follows sees both parts.
	before := received(t, def)
	d, err := c.Apply(ctx, intents.Apply("close").
		ReadAt("report.title", st.Values["report.title"].Version).
		Set("report.status", "closed").Set("tasks.t1", "done"))
	if err != nil || d.Outcome != intents.OutcomeApplied || d.Versions["report.status"] != 1 || d.Versions["tasks.t1"] != 2 {
		t.Fatalf("apply of both shards' boards: %+v %v", d, err)
	}
	if n := received(t, def); n != before {
		t.Fatalf("the default shard received %d intents of the cross-shard apply, want none: s2 coordinates it", n-before)
	}
	st, err = c.Read(ctx, "report.status", "tasks.t1")
	if err != nil || string(st.Values["report.status"].Value) != `"closed"` || string(st.Values["tasks.t1"].Value) != `"done"` {
		t.Fatalf("read after the cross-shard apply: %+v %v", st, err)
	}
}

// received is how many intents svc took in, from its metrics.
func received(t *testing.T, svc *coordinator.Service) int {
	t.Helper()
	return int(metric(t, svc, "coagent_intents_received_total"))
}

// metric sums the series of the metric name of svc.
func metric(t *testing.T, svc *coordinator.Service, name string) float64 {
	t.Helper()
	mfs, err := svc.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
