package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// world is a real embedded NATS server with JetStream and a coordinator on
// a real Pebble directory, which a test may restart.
type world struct {
	t    *testing.T
	ns   *server.Server
	dir  string
	opts coordinator.Options
	svc  *coordinator.Service
}

func newWorld(t *testing.T, opts coordinator.Options) *world {
	t.Helper()
	w := &world{t: t, ns: natstest.Run(t), dir: filepath.Join(t.TempDir(), "log"), opts: opts}
	w.start()
	return w
}

// start starts a coordinator on w.dir; each is shut down when the test
// ends, if the test has not shut it down before.
func (w *world) start() {
	w.t.Helper()
	w.svc = coordtest.StartOn(w.t, w.connect(), w.dir, w.opts)
}

// restart stops the coordinator and starts it again on the same log.
func (w *world) restart() {
	w.t.Helper()
	if err := w.svc.Shutdown(context.Background()); err != nil {
		w.t.Fatal(err)
	}
	w.svc = nil
	w.start()
}

func (w *world) connect() *nats.Conn {
	w.t.Helper()
	return natstest.Connect(w.t, w.ns)
}

func (w *world) client(name string, opts ...agents.Option) *agents.Client {
	w.t.Helper()
	c, err := agents.Connect(context.Background(), w.connect(), name, opts...)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// releases returns the transaction ends the coordinator publishes, keyed
// by transaction id, so a test can wait for a lease to run out.
func (w *world) releases() <-chan *intents.Release {
	w.t.Helper()
	ch := make(chan *intents.Release, 64)
	nc := w.connect()
	// Commits and aborts are release events, lease ends expire events.
	_, err := nc.Subscribe(intents.Subjects{}.AllEvents(), func(m *nats.Msg) {
		var ev intents.Event
		if json.Unmarshal(m.Data, &ev) == nil && ev.Release != nil {
			ch <- ev.Release
		}
	})
	if err != nil {
		w.t.Fatal(err)
	}
	nc.Flush()
	return ch
}

// awaitLost waits for tx to be lost: preempted, or its lease ended.
func awaitLost(t *testing.T, tx *agents.Txn) {
	t.Helper()
	select {
	case <-tx.Lost():
	case <-time.After(10 * time.Second):
		t.Fatalf("txn %s was not lost in 10s (err %v)", tx.ID(), tx.Err())
	}
}

func awaitRelease(t *testing.T, ch <-chan *intents.Release, txn string, cause intents.ReleaseCause) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case r := <-ch:
			if r.Txn == txn {
				if r.Cause != cause {
					t.Fatalf("txn %s ended %s, want %s", txn, r.Cause, cause)
				}
				return
			}
		case <-timeout:
			t.Fatalf("txn %s did not end (%s) in 10s", txn, cause)
		}
	}
}

// TestTypedErrors makes the coordinator reject an intent for each reason
// it gives today, through the SDK, and checks the error matches the
// reason's sentinel and carries the decision.
func TestTypedErrors(t *testing.T) {
	w := newWorld(t, coordinator.Options{Core: coordinator.CoreOptions{
		Engine: engineConfig(),
	}})
	ctx := ctxFor(t, 60*time.Second)
	alice, bob := w.client("alice"), w.client("bob")
	rel := w.releases()

	if _, err := alice.Apply(ctx, intents.Apply("seed").Set("docs.a", 1).Set("docs.b", 1)); err != nil {
		t.Fatal(err)
	}
	// bob holds docs.a for the conflicts below.
	hold, err := bob.Propose(ctx, intents.Propose("hold").Read("docs.a").Write("docs.a", intents.OpSet).Lease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	st, err := alice.Read(ctx, "docs.b")
	if err != nil {
		t.Fatal(err)
	}
	oldB := st.Values["docs.b"].Version
	if _, err := alice.Apply(ctx, intents.Apply("bump").Incr("docs.b", 1)); err != nil {
		t.Fatal(err)
	}

	check := func(t *testing.T, name string, err error, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s: err = %v, want %v", name, err, want)
		}
		var rej *agents.RejectedError
		if !errors.As(err, &rej) || rej.Decision == nil || rej.Decision.Outcome != intents.OutcomeRejected {
			t.Fatalf("%s: err = %#v, want a *RejectedError with the decision", name, err)
		}
		for _, other := range []error{agents.ErrInvalid, agents.ErrConflict, agents.ErrFenced, agents.ErrDeadlock} {
			if other != want && errors.Is(err, other) {
				t.Fatalf("%s: err %v also matches %v", name, err, other)
			}
		}
	}

	t.Run("invalid", func(t *testing.T) {
		// Refused before it is sent, naming the field.
		_, err := alice.Apply(ctx, intents.Apply("x").Set("docs..c", 1))
		var verr *intents.ValidationError
		if !errors.Is(err, agents.ErrInvalid) || !errors.As(err, &verr) || verr.Field != "writes[0].path" {
			t.Fatalf("local validation: %v", err)
		}
		// Refused by the coordinator: an intent id is one agent's.
		in, _ := intents.Apply("x").Set("docs.c", 1).Build()
		in.ID = ulid.Make().String()
		if _, err := alice.Submit(ctx, in); err != nil {
			t.Fatal(err)
		}
		// The stream drops bob's copy as a duplicate message id, so bob's
		// client gets its decision by asking the coordinator again.
		bob2 := w.client("bob", agents.WithResend(100*time.Millisecond))
		d, err := bob2.Submit(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		check(t, "invalid", &agents.RejectedError{Decision: d}, agents.ErrInvalid)
	})
	t.Run("unauthorized", func(t *testing.T) {
		in, _ := intents.Apply("x").Set("docs.c", 1).Build()
		in.Agent = "bob" // alice's connection, bob's name
		d, err := alice.Submit(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		check(t, "unauthorized", &agents.RejectedError{Decision: d}, agents.ErrUnauthorized)
	})
	t.Run("precondition_failed", func(t *testing.T) {
		_, err := alice.Apply(ctx, intents.Apply("x").Set("docs.c", 1).Pre(`state.docs.b == 100`))
		check(t, "precondition", err, agents.ErrPreconditionFailed)
	})
	t.Run("postcondition_failed", func(t *testing.T) {
		_, err := alice.Apply(ctx, intents.Apply("x").Set("docs.c", 5).Post(`state.docs.c < 5`))
		check(t, "postcondition", err, agents.ErrPostconditionFailed)
	})
	t.Run("conflict", func(t *testing.T) {
		_, err := alice.Apply(ctx, intents.Apply("x").Set("docs.a", 2))
		check(t, "conflict", err, agents.ErrConflict)
		var rej *agents.RejectedError
		errors.As(err, &rej)
		if !rej.Retryable() || len(rej.Decision.Conflicts) == 0 || rej.Decision.Conflicts[0].WithAgent != "bob" {
			t.Fatalf("conflict decision %+v: want retryable, naming bob", rej.Decision)
		}
	})
	t.Run("stale_read", func(t *testing.T) {
		_, err := alice.Apply(ctx, intents.Apply("x").ReadAt("docs.b", oldB).Set("docs.d", 1))
		check(t, "stale", err, agents.ErrStaleRead)
	})
	t.Run("wait_timeout", func(t *testing.T) {
		_, err := alice.Apply(ctx, intents.Apply("x").Set("docs.a", 3).Wait(50*time.Millisecond))
		check(t, "wait", err, agents.ErrWaitTimeout)
	})
	t.Run("arbiter_rejected", func(t *testing.T) {
		// No arbiter runs: the deadline's fallback rejects.
		_, err := alice.Apply(ctx, intents.Apply("x").Set("docs.a", 4).Escalate())
		check(t, "arbiter", err, agents.ErrArbiterRejected)
	})
	t.Run("out_of_scope", func(t *testing.T) {
		tx, err := alice.Propose(ctx, intents.Propose("x").Write("docs.e", intents.OpSet))
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Commit(ctx, intents.Apply("x").Set("docs.f", 1))
		check(t, "scope", err, agents.ErrOutOfScope)
		if tx.Err() != nil {
			t.Fatalf("an out-of-scope commit ended the txn: %v", tx.Err())
		}
		if _, err := tx.Commit(ctx, intents.Apply("x").Set("docs.e", 1)); err != nil {
			t.Fatalf("corrected commit: %v", err)
		}
		if !errors.Is(tx.Err(), agents.ErrTxnEnded) {
			t.Fatalf("after commit Err = %v", tx.Err())
		}
	})
	t.Run("fenced_and_lease_expired", func(t *testing.T) {
		tx, err := alice.Propose(ctx, intents.Propose("x").Write("docs.g", intents.OpSet).Lease(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		tx.StopRenewing()
		awaitRelease(t, rel, tx.ID(), intents.CauseExpired)
		awaitLost(t, tx) // the coordinator's notice
		if err := tx.Renew(ctx); !errors.Is(err, agents.ErrLeaseExpired) {
			t.Fatalf("Renew of a lost txn: %v", err)
		}
		// On the wire: a renew after expiry is lease_expired, a commit fenced.
		d, err := alice.Submit(ctx, &intents.Intent{Kind: intents.KindRenew, Txn: tx.ID(), Fence: tx.Fence(), LeaseMS: 1000})
		if err != nil {
			t.Fatal(err)
		}
		check(t, "renew", &agents.RejectedError{Decision: d}, agents.ErrLeaseExpired)
		d, err = alice.Submit(ctx, &intents.Intent{Kind: intents.KindCommit, Txn: tx.ID(), Fence: tx.Fence(),
			Writes: []intents.Write{{Path: "docs.g", Op: intents.OpSet, Value: json.RawMessage("1")}}})
		if err != nil {
			t.Fatal(err)
		}
		check(t, "commit", &agents.RejectedError{Decision: d}, agents.ErrFenced)
	})
	t.Run("rate_limited", func(t *testing.T) {
		// engineConfig allows 3 transactions per agent.
		var open []*agents.Txn
		for i := 0; ; i++ {
			tx, err := alice.Propose(ctx, intents.Propose("x").Write(fmt.Sprintf("rl.k%d", i), intents.OpSet))
			if err != nil {
				check(t, "rate", err, agents.ErrRateLimited)
				break
			}
			open = append(open, tx)
			if i > 10 {
				t.Fatal("no rate limit after 10 transactions")
			}
		}
		for _, tx := range open {
			if err := tx.Abort(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("deadlock", func(t *testing.T) {
		// alice holds T1 on dl.x, bob holds T2 on dl.y; each then waits on
		// the other's: the younger waiter is rejected with deadlock.
		t1, err := alice.Propose(ctx, intents.Propose("x").Write("dl.x", intents.OpSet))
		if err != nil {
			t.Fatal(err)
		}
		t2, err := bob.Propose(ctx, intents.Propose("x").Write("dl.y", intents.OpSet))
		if err != nil {
			t.Fatal(err)
		}
		first := make(chan error, 1)
		queued := make(chan struct{})
		alice2 := w.client("alice", agents.WithDecisionHook(func(d *intents.Decision) {
			if d.Outcome == intents.OutcomeQueued {
				close(queued)
			}
		}))
		go func() {
			_, err := alice2.Apply(ctx, intents.Apply("x").Set("dl.y", 1).Wait(20*time.Second))
			first <- err
		}()
		<-queued
		_, err = bob.Apply(ctx, intents.Apply("x").Set("dl.x", 1).Wait(20*time.Second))
		check(t, "deadlock", err, agents.ErrDeadlock)
		t2.Abort(ctx)
		if err := <-first; err != nil {
			t.Fatalf("the older waiter: %v", err)
		}
		t1.Abort(ctx)
	})
	hold.Abort(ctx)
}

func engineConfig() (c engine.Config) {
	c.ArbiterTimeout = 300 * time.Millisecond
	c.MaxTxnsPerAgent = 3
	c.MaxParkedPerAgent = 100
	return c
}

// TestReasonErrorsCoverSpec checks that every reason of SPEC §3 has its
// own sentinel.
func TestReasonErrorsCoverSpec(t *testing.T) {
	seen := map[error]intents.Reason{}
	for _, r := range intents.Reasons {
		err := agents.ReasonError(r)
		if err == agents.ErrUnknownReason {
			t.Fatalf("reason %s has no sentinel", r)
		}
		if prev, dup := seen[err]; dup {
			t.Fatalf("reasons %s and %s share a sentinel", prev, r)
		}
		seen[err] = r
	}
	if agents.ReasonError("new_reason") != agents.ErrUnknownReason {
		t.Fatal("an unknown reason must match ErrUnknownReason")
	}
}

// TestUpdateUnderContention has 32 goroutines increment one counter with
// Update: every increment lands exactly once.
func TestUpdateUnderContention(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 120*time.Second)
	const workers, each = 32, 5
	clients := make([]*agents.Client, 8)
	for i := range clients {
		clients[i] = w.client(fmt.Sprintf("u%d", i), agents.WithRetries(1000), agents.WithBackoff(time.Millisecond, 50*time.Millisecond))
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	var mu sync.Mutex
	calls := 0
	for g := range workers {
		c := clients[g%len(clients)]
		wg.Go(func() {
			for range each {
				_, err := agents.UpdateJSON(ctx, c, "counters.hot", func(n float64, _ bool) (float64, error) {
					mu.Lock()
					calls++
					mu.Unlock()
					return n + 1, nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st, err := clients[0].Read(ctx, "counters.hot")
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	if err := st.Values["counters.hot"].Decode(&n); err != nil {
		t.Fatal(err)
	}
	if n != workers*each {
		t.Fatalf("counter = %v after %d updates", n, workers*each)
	}
	if v := st.Values["counters.hot"].Version; v != workers*each {
		t.Fatalf("version = %d, want one per update (%d)", v, workers*each)
	}
	t.Logf("%d updates took %d calls of fn", workers*each, calls)
}

// TestUpdateGivesUpAfterRetries: a writer that always loses the race
// stops after its retries with the conflict.
func TestUpdateGivesUpAfterRetries(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 30*time.Second)
	c := w.client("loser", agents.WithRetries(2), agents.WithBackoff(time.Millisecond, 2*time.Millisecond))
	other := w.client("winner")
	calls := 0
	_, err := c.Update(ctx, "k.v", func(old any) (any, error) {
		calls++
		// Someone else writes between our read and our write, every time.
		if _, err := other.Apply(ctx, intents.Apply("x").Incr("k.v", 1)); err != nil {
			return nil, err
		}
		return "mine", nil
	})
	if !errors.Is(err, agents.ErrStaleRead) || calls != 3 {
		t.Fatalf("err = %v after %d calls; want stale read after 3", err, calls)
	}
	boom := errors.New("boom")
	if _, err := c.Update(ctx, "k.v", func(any) (any, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("fn's error: %v", err)
	}
}

// TestLeaseRenewal: a transaction far longer than its lease stays alive
// while the client renews it; stopped, the lease runs out.
func TestLeaseRenewal(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 60*time.Second)
	renewed := make(chan *intents.Decision, 100)
	c := w.client("long", agents.WithDecisionHook(func(d *intents.Decision) {
		if d.Outcome == intents.OutcomeRenewed {
			renewed <- d
		}
	}))
	rel := w.releases()
	// Long enough that a renewal sent a third of the way through lands
	// before the end even under the race detector on a loaded machine (a
	// lease of 1 s did not, once): the client gives a lease up whose
	// renewal it cannot get in time.
	const lease = 3 * time.Second
	tx, err := c.Propose(ctx, intents.Propose("long").Write("work.out", intents.OpSet).Lease(lease))
	if err != nil {
		t.Fatal(err)
	}
	first := tx.LeaseExpires()
	// Wait for renewals that carry the lease well past its first end.
	for waiting := true; waiting; {
		select {
		case d := <-renewed:
			waiting = !d.LeaseExpires.After(first.Add(2 * lease))
		case <-tx.Lost():
			t.Fatalf("lost the lease while renewing: %v", tx.Err())
		case <-ctx.Done():
			t.Fatal("no renewal carried the lease past its first end")
		}
	}
	if !time.Now().After(first) {
		t.Fatal("renewals came faster than the lease: the test proves nothing")
	}
	if _, err := tx.Commit(ctx, intents.Apply("long").Set("work.out", "done")); err != nil {
		t.Fatalf("commit after %s of renewals: %v", time.Since(first), err)
	}
	awaitRelease(t, rel, tx.ID(), intents.CauseCommitted)

	tx2, err := c.Propose(ctx, intents.Propose("long").Write("work.out2", intents.OpSet).Lease(lease))
	if err != nil {
		t.Fatal(err)
	}
	tx2.StopRenewing()
	awaitRelease(t, rel, tx2.ID(), intents.CauseExpired)
	awaitLost(t, tx2) // the coordinator's notice
	if _, err := tx2.Commit(ctx, intents.Apply("long").Set("work.out2", "late")); !errors.Is(err, agents.ErrLeaseExpired) {
		t.Fatalf("commit after the lease ran out: %v, want lease expired", err)
	}
	if !errors.Is(tx2.Err(), agents.ErrLeaseExpired) {
		t.Fatalf("Err after the lease ran out: %v", tx2.Err())
	}
}

// TestResendGetsRecordedDecision: a decision sent while the client was not
// listening is not lost: the client asks again with the same id and gets
// the recorded decision, and nothing is applied twice.
func TestResendGetsRecordedDecision(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 30*time.Second)
	in := &intents.Intent{ID: ulid.Make().String(), Agent: "late", Kind: intents.KindApply,
		Writes: []intents.Write{{Path: "n.v", Op: intents.OpIncr}}}
	raw, _ := json.Marshal(in)
	// Submitted and decided before any client of "late" listens: the
	// decision was the reply to another connection's request.
	nc := w.connect()
	reply, err := nc.Request(intents.Subjects{}.API(intents.APISubmit), raw, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var first intents.Decision
	json.Unmarshal(reply.Data, &first)
	if first.Outcome != intents.OutcomeApplied {
		t.Fatalf("first decision %+v", first)
	}
	c := w.client("late", agents.WithResend(100*time.Millisecond))
	d, err := c.Submit(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != intents.OutcomeApplied || !d.Duplicate || d.Rev != first.Rev {
		t.Fatalf("resent decision %+v, want the recorded one (rev %d) marked duplicate", d, first.Rev)
	}
	st, _ := c.Read(ctx, "n.v")
	if string(st.Values["n.v"].Value) != "1" {
		t.Fatalf("n.v = %s: applied twice?", st.Values["n.v"].Value)
	}
}

// TestNoticesAndWaits: an intent waiting on a transaction tells its
// holder, and is applied when the holder commits.
func TestNoticesAndWaits(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 30*time.Second)
	writer := w.client("writer")
	queued := make(chan *intents.Decision, 1)
	editor := w.client("editor", agents.WithDecisionHook(func(d *intents.Decision) {
		if d.Outcome == intents.OutcomeQueued {
			queued <- d
		}
	}))
	tx, err := writer.Propose(ctx, intents.Propose("cite").Read("materials.m1").Write("report.s1", intents.OpSet))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := editor.Apply(ctx, intents.Apply("demote").Set("materials.m1.status", "demoted").Wait(20*time.Second))
		done <- err
	}()
	q := <-queued
	select {
	case n := <-writer.Notices():
		if n.Kind != intents.NoticeWaiting || n.Txn != tx.ID() || n.Intent != q.Intent || n.From != "editor" {
			t.Fatalf("notice %+v, want editor's %s waiting on %s", n, q.Intent, tx.ID())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder was not told")
	}
	if _, err := tx.Commit(ctx, intents.Apply("cite").Set("report.s1", "text")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiting apply: %v", err)
	}
}

// TestWatchAcrossRestart: a watch sees every change under its subtree once
// and in order, across a coordinator restart; a new watch from a revision
// resumes there without a gap.
func TestWatchAcrossRestart(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 60*time.Second)
	c := w.client("watcher")
	apply := func(i int) uint64 {
		t.Helper()
		d, err := c.Apply(ctx, intents.Apply("w").Set(fmt.Sprintf("docs.d%d.body", i%3), i).Set(fmt.Sprintf("other.x%d", i), i))
		if err != nil {
			t.Fatal(err)
		}
		return d.Rev
	}
	var revs []uint64
	for i := range 5 {
		revs = append(revs, apply(i))
	}
	wa, err := c.Watch(ctx, "docs", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wa.Stop()
	for i := 5; i < 10; i++ {
		revs = append(revs, apply(i))
	}
	w.restart()
	for i := 10; i < 15; i++ {
		revs = append(revs, apply(i))
	}
	next := func(wa *agents.Watcher) agents.Change {
		t.Helper()
		select {
		case ch, ok := <-wa.Changes():
			if !ok {
				t.Fatalf("watch ended: %v", wa.Err())
			}
			return ch
		case <-time.After(10 * time.Second):
			t.Fatal("no change in 10s")
		}
		return agents.Change{}
	}
	for i, rev := range revs {
		ch := next(wa)
		if ch.Rev != rev || len(ch.Writes) != 1 || ch.Writes[0].Path != fmt.Sprintf("docs.d%d.body", i%3) {
			t.Fatalf("change %d = %+v, want rev %d writing docs.d%d.body only", i, ch, rev, i%3)
		}
	}
	// A new watch from the middle resumes exactly there.
	from := revs[6]
	wb, err := c.Watch(ctx, "docs.d1", from)
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Stop()
	for i := 7; i < len(revs); i++ {
		if i%3 != 1 {
			continue
		}
		if ch := next(wb); ch.Rev != revs[i] {
			t.Fatalf("resumed watch: rev %d, want %d", ch.Rev, revs[i])
		}
	}
	// And it stays live.
	rev := apply(16)
	if ch := next(wb); ch.Rev != rev {
		t.Fatalf("live change rev %d, want %d", ch.Rev, rev)
	}
}

// TestPreemptedTxnIsLost: an arbiter that lets an escalated intent win
// preempts the transaction in its way; the holder's Txn learns it.
func TestPreemptedTxnIsLost(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 30*time.Second)
	holder, rival := w.client("holder"), w.client("rival")
	arb, stop := context.WithCancel(ctx)
	defer stop()
	go agents.RunArbiter(arb, w.connect(), "judge", func(_ context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		return arbiter.Priority("judge", c), nil
	})
	tx, err := holder.Propose(ctx, intents.Propose("hold").Write("doc.intro", intents.OpSet))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rival.Apply(ctx, intents.Apply("rewrite").Set("doc.intro", "mine").Priority(5).Escalate()); err != nil {
		t.Fatalf("the higher-priority rewrite: %v", err)
	}
	select {
	case <-tx.Lost():
	case <-ctx.Done():
		t.Fatal("the holder's txn never learned it was preempted")
	}
	if !errors.Is(tx.Err(), agents.ErrPreempted) {
		t.Fatalf("Err = %v, want preempted", tx.Err())
	}
	if _, err := tx.Commit(ctx, intents.Apply("hold").Set("doc.intro", "late")); !errors.Is(err, agents.ErrPreempted) {
		t.Fatalf("Commit after preemption: %v", err)
	}
}
