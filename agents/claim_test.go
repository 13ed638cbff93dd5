package agents_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
)

// leasedBoard is a task board whose claims hold a lease of 300ms: short,
// so that a test waits through several, and three renewals long enough
// for a loaded machine's round trip.
const (
	claimLease  = 300 * time.Millisecond
	leasedBoard = `{"rules":[{"pattern":"tasks.*","kind":"task","lease":"300ms","reclaim_to":"PENDING",
  "transitions":{"PENDING":["RUNNING"],"RUNNING":["DONE","PENDING"]},"initial":["PENDING"]}]}`
)

// newTasks starts a coordinator with rules in force and the tasks ids,
// PENDING, on it.
func newTasks(t *testing.T, rules string, ids ...string) *world {
	t.Helper()
	w := newWorld(t, coordinator.Options{})
	setRules(t, w, rules)
	b := intents.Apply("plan")
	for _, id := range ids {
		b.Set("tasks."+id, map[string]any{"status": "PENDING"})
	}
	if _, err := w.client("lead").Apply(ctxFor(t, 30*time.Second), b); err != nil {
		t.Fatal(err)
	}
	return w
}

// task reads the task record at path.
func task(t *testing.T, c *agents.Client, path string) map[string]any {
	t.Helper()
	st, err := c.Read(ctxFor(t, 30*time.Second), path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := st.Values[path].Decode(&rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// A claim whose handle lives is renewed in the background past several
// lease lengths: the coordinator never reclaims it, and the owner's
// writes under its fence go through.
func TestClaimRenewedWhileHeld(t *testing.T) {
	w := newTasks(t, leasedBoard, "t1")
	ctx := ctxFor(t, 60*time.Second)
	var mu sync.Mutex
	var latest time.Time // the end of the lease the last renewal gave
	w1 := w.client("w1", agents.WithDecisionHook(func(d *intents.Decision) {
		if d.Outcome == intents.OutcomeRenewed && d.LeaseExpires != nil {
			mu.Lock()
			latest = *d.LeaseExpires
			mu.Unlock()
		}
	}))
	cl, err := w1.Claim(ctx, "tasks.t1", map[string]any{"status": "RUNNING"})
	if err != nil {
		t.Fatal(err)
	}
	if cl.ID() == "" || cl.Fence() == 0 || cl.LeaseExpires().IsZero() || cl.Task() != "tasks.t1" {
		t.Fatalf("claim under a leased rule: id %q fence %d expires %v task %q", cl.ID(), cl.Fence(), cl.LeaseExpires(), cl.Task())
	}
	first := cl.LeaseExpires()
	// Renewals that carry the lease four lengths past the first end: the
	// coordinator's clock went through three leases, each renewed in time
	// (a renewal after a reclaim is refused, so none would come).
	natstest.CheckFor(t, 30*time.Second, "renewals past four lease lengths", func() error {
		mu.Lock()
		defer mu.Unlock()
		if want := first.Add(3 * claimLease); latest.Before(want) {
			return fmt.Errorf("the lease ends at %v, want past %v", latest, want)
		}
		return nil
	})
	select {
	case <-cl.Lost():
		t.Fatalf("the claim was lost while renewed: %v", cl.Err())
	default:
	}
	if err := cl.Err(); err != nil {
		t.Fatalf("Err of a held claim: %v", err)
	}
	if rec := task(t, w1, "tasks.t1"); rec["owner"] != "w1" || rec["status"] != "RUNNING" {
		t.Fatalf("the task while claimed: %v", rec)
	}
	if _, err := cl.Apply(ctx, intents.Apply("progress").Set("tasks.t1.note", "half way")); err != nil {
		t.Fatalf("the owner's write under its fence: %v", err)
	}
	// Without the fence the owner's own write is refused.
	if _, err := w1.Apply(ctx, intents.Apply("progress").Set("tasks.t1.note", "unfenced")); !errors.Is(err, agents.ErrFenced) {
		t.Fatalf("the owner's write without the fence: %v, want fenced", err)
	}
}

// A claim whose handle stops renewing is reclaimed when its lease ends:
// Lost closes, Err says reclaimed, the task goes back to PENDING without
// an owner, and a write with the old fence is fenced.
func TestClaimReclaimedWhenRenewalStops(t *testing.T) {
	w := newTasks(t, leasedBoard, "t1")
	ctx := ctxFor(t, 60*time.Second)
	w1 := w.client("w1")
	cl, err := w1.Claim(ctx, "tasks.t1", map[string]any{"status": "RUNNING"})
	if err != nil {
		t.Fatal(err)
	}
	cl.StopRenewing()
	select {
	case <-cl.Lost():
	case <-ctx.Done():
		t.Fatal("the claim whose renewal stopped was never lost")
	}
	if err := cl.Err(); !errors.Is(err, agents.ErrReclaimed) || !errors.Is(err, agents.ErrLeaseExpired) {
		t.Fatalf("Err of a reclaimed claim: %v, want ErrReclaimed and ErrLeaseExpired", err)
	}
	if rec := task(t, w1, "tasks.t1"); rec["owner"] != nil || rec["status"] != "PENDING" {
		t.Fatalf("the task after its lease ended: %v, want no owner and PENDING", rec)
	}
	// The handle sends nothing more; a write the old fence carries is
	// fenced at the coordinator.
	if _, err := cl.Apply(ctx, intents.Apply("finish").Set("tasks.t1.status", "DONE")); !errors.Is(err, agents.ErrReclaimed) {
		t.Fatalf("Apply of a reclaimed claim: %v", err)
	}
	late := intents.Apply("finish").Set("tasks.t1.status", "RUNNING").Fence(cl.Fence())
	if _, err := w1.Apply(ctx, late); !errors.Is(err, agents.ErrFenced) {
		t.Fatalf("a write with the old fence %d: %v, want fenced", cl.Fence(), err)
	}
}

// Closing the client ends the renewal of its claims at once, not at the
// next renewal or the lease's end, and the task comes back when the
// lease ends. The lease is 3s here, so that a renewal that outlived Close
// would hold it up for seconds.
func TestClaimReclaimedAfterClose(t *testing.T) {
	w := newTasks(t, strings.Replace(leasedBoard, "300ms", "3s", 1), "t1")
	ctx := ctxFor(t, 60*time.Second)
	w1, lead := w.client("w1"), w.client("lead")
	if _, err := w1.Claim(ctx, "tasks.t1", nil); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	w1.Close()
	if took := time.Since(began); took > time.Second {
		t.Fatalf("Close took %s with a claim held: it waited on the renewal", took)
	}
	natstest.CheckFor(t, 30*time.Second, "the reclaim of the closed client's task", func() error {
		if rec := task(t, lead, "tasks.t1"); rec["owner"] != nil || rec["status"] != "PENDING" {
			return fmt.Errorf("the task: %v", rec)
		}
		return nil
	})
}

// Two agents claim one task at once: exactly one wins, and the other's
// error names the winner.
func TestClaimRaceOneWins(t *testing.T) {
	w := newTasks(t, leasedBoard, "t1")
	ctx := ctxFor(t, 60*time.Second)
	names := []string{"w1", "w2"}
	clients := map[string]*agents.Client{}
	for _, n := range names {
		clients[n] = w.client(n)
	}
	var wg sync.WaitGroup
	claims, errs := make([]*agents.Claim, 2), make([]error, 2)
	start := make(chan struct{})
	for i, n := range names {
		wg.Go(func() {
			<-start
			claims[i], errs[i] = clients[n].Claim(ctx, "tasks.t1", map[string]any{"status": "RUNNING"})
		})
	}
	close(start)
	wg.Wait()
	won := -1
	for i := range names {
		if errs[i] == nil {
			if won >= 0 {
				t.Fatalf("both won: fences %d and %d", claims[won].Fence(), claims[i].Fence())
			}
			won = i
		}
	}
	if won < 0 {
		t.Fatalf("nobody won: %v; %v", errs[0], errs[1])
	}
	err := errs[1-won]
	var taken *agents.TakenError
	if !errors.Is(err, agents.ErrTaken) || !errors.Is(err, agents.ErrPreconditionFailed) || !errors.As(err, &taken) {
		t.Fatalf("the lost claim: %v, want a *TakenError matching ErrTaken and ErrPreconditionFailed", err)
	}
	if taken.Owner != names[won] || taken.Task != "tasks.t1" {
		t.Fatalf("the lost claim names %q of %q, want %s of tasks.t1", taken.Owner, taken.Task, names[won])
	}
	if rec := task(t, clients["w1"], "tasks.t1"); rec["owner"] != names[won] {
		t.Fatalf("the task: %v, want owned by %s", rec, names[won])
	}
}

// A released task is free: another agent claims it under a higher fence,
// and the released handle writes no more.
func TestClaimReleaseThenClaimAgain(t *testing.T) {
	w := newTasks(t, leasedBoard, "t1")
	ctx := ctxFor(t, 60*time.Second)
	w1, w2 := w.client("w1"), w.client("w2")
	first, err := w1.Claim(ctx, "tasks.t1", map[string]any{"status": "RUNNING"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Release(ctx, map[string]any{"status": "PENDING"}); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := first.Err(); !errors.Is(err, agents.ErrClaimEnded) {
		t.Fatalf("Err after release: %v, want ErrClaimEnded", err)
	}
	select {
	case <-first.Lost():
		t.Fatal("a released claim is lost")
	default:
	}
	if rec := task(t, w1, "tasks.t1"); rec["owner"] != nil || rec["status"] != "PENDING" {
		t.Fatalf("the task after release: %v", rec)
	}
	second, err := w2.Claim(ctx, "tasks.t1", map[string]any{"status": "RUNNING"})
	if err != nil {
		t.Fatalf("claim after release: %v", err)
	}
	if second.Fence() <= first.Fence() {
		t.Fatalf("the second claim's fence %d, want above the first's %d", second.Fence(), first.Fence())
	}
	if _, err := first.Apply(ctx, intents.Apply("late").Set("tasks.t1.status", "DONE")); !errors.Is(err, agents.ErrClaimEnded) {
		t.Fatalf("Apply of a released claim: %v", err)
	}
	// Completing is a release that sets the status.
	if _, err := second.Release(ctx, map[string]any{"status": "DONE"}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if rec := task(t, w2, "tasks.t1"); rec["owner"] != nil || rec["status"] != "DONE" {
		t.Fatalf("the task after completion: %v", rec)
	}
}

// Without a lease rule a claim is a plain apply: no fence, no lease, and
// Release deletes the owner only while it is the agent's.
func TestClaimWithoutLease(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 60*time.Second)
	w1, w2 := w.client("w1"), w.client("w2")
	cl, err := w1.Claim(ctx, "tasks.t-1", map[string]any{"status": "RUNNING"})
	if err != nil {
		t.Fatal(err)
	}
	if cl.Fence() != 0 || cl.ID() != "" || !cl.LeaseExpires().IsZero() {
		t.Fatalf("a claim without a lease rule: fence %d id %q expires %v", cl.Fence(), cl.ID(), cl.LeaseExpires())
	}
	if _, err := w2.Claim(ctx, "tasks.t-1", nil); !errors.Is(err, agents.ErrTaken) {
		t.Fatalf("claim of a held task: %v, want ErrTaken", err)
	}
	if _, err := cl.Apply(ctx, intents.Apply("note").Set("tasks.t-1.note", "x")); err != nil {
		t.Fatalf("Apply without a lease: %v", err)
	}
	if _, err := cl.Release(ctx, map[string]any{"status": "DONE"}); err != nil {
		t.Fatalf("release: %v", err)
	}
	if rec := task(t, w1, "tasks.t-1"); rec["owner"] != nil || rec["status"] != "DONE" || rec["note"] != "x" {
		t.Fatalf("the task after release: %v", rec)
	}
	// A task taken over behind the handle's back is not released by it.
	cl, err = w1.Claim(ctx, "tasks.t-2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Apply(ctx, intents.Apply("take over").Set("tasks.t-2.owner", "w2")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Release(ctx, nil); !errors.Is(err, agents.ErrPreconditionFailed) {
		t.Fatalf("release of a task taken over: %v, want precondition_failed", err)
	}
	select {
	case <-cl.Lost():
	default:
		t.Fatal("a claim whose task was taken over is not lost")
	}
	if rec := task(t, w1, "tasks.t-2"); rec["owner"] != "w2" {
		t.Fatalf("the task taken over: %v", rec)
	}
	if _, err := w1.Claim(ctx, "tasks.t-1", map[string]any{"owner": "w2"}); !errors.Is(err, agents.ErrInvalid) {
		t.Fatalf("a claim that sets the owner: %v, want invalid", err)
	}
}

// ReadMod says who changed a task last and when; Read leaves it out.
func TestReadMod(t *testing.T) {
	w := newTasks(t, leasedBoard, "t1")
	w1 := w.client("w1")
	before := time.Now().Add(-time.Second)
	if _, err := w1.Claim(ctxFor(t, 30*time.Second), "tasks.t1", nil); err != nil {
		t.Fatal(err)
	}
	st, err := w1.ReadMod(ctxFor(t, 30*time.Second), "tasks.t1.owner", "tasks.t1.status")
	if err != nil {
		t.Fatal(err)
	}
	if v := st.Values["tasks.t1.owner"]; v.ModAgent != "w1" || v.ModTime == nil || v.ModTime.Before(before) {
		t.Errorf("owner: mod_agent %q, mod_time %v", v.ModAgent, v.ModTime)
	}
	if v := st.Values["tasks.t1.status"]; v.ModAgent != "lead" {
		t.Errorf("status: mod_agent %q, want lead, who made the task", v.ModAgent)
	}
	if st, err = w1.Read(ctxFor(t, 30*time.Second), "tasks.t1.owner"); err != nil || st.Values["tasks.t1.owner"].ModTime != nil {
		t.Errorf("Read: %+v, %v", st, err)
	}
}

// ClaimNext gives each caller a task of its own from the lane, the highest
// priority first, and says when nothing is claimable.
func TestClaimNextSDK(t *testing.T) {
	w := newTasks(t, leasedBoard, "t1", "t2", "t3")
	if _, err := w.client("lead").Apply(ctxFor(t, 30*time.Second), intents.Apply("prioritize").Set("tasks.t2.priority", 5)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, agent := range []string{"w1", "w2", "w3"} {
		cl, err := w.client(agent).ClaimNext(ctxFor(t, 30*time.Second), "tasks", map[string]any{"status": "RUNNING"})
		if err != nil {
			t.Fatalf("%s: %v", agent, err)
		}
		defer cl.StopRenewing()
		if cl.Fence() == 0 || task(t, w.client(agent), cl.Task())["owner"] != agent {
			t.Fatalf("%s: claim of %s under fence %d", agent, cl.Task(), cl.Fence())
		}
		got = append(got, cl.Task())
	}
	if got[0] != "tasks.t2" || got[1] == got[2] {
		t.Fatalf("tasks given: %v; want tasks.t2 first, then the two others", got)
	}
	if _, err := w.client("w4").ClaimNext(ctxFor(t, 30*time.Second), "tasks", nil); !errors.Is(err, agents.ErrNothingClaimable) {
		t.Fatalf("an empty lane: %v", err)
	}
}

// ClaimNextWait, on a lane with nothing claimable, waits until a task is
// added and claims it.
func TestClaimNextWait(t *testing.T) {
	w := newTasks(t, leasedBoard, "t1")
	held, err := w.client("w1").Claim(ctxFor(t, 30*time.Second), "tasks.t1", map[string]any{"status": "RUNNING"})
	if err != nil {
		t.Fatal(err)
	}
	defer held.StopRenewing()
	type result struct {
		cl  *agents.Claim
		err error
	}
	got := make(chan result, 1)
	go func() {
		cl, err := w.client("w2").ClaimNextWait(ctxFor(t, 30*time.Second), "tasks", map[string]any{"status": "RUNNING"}, 5*time.Second)
		got <- result{cl, err}
	}()
	// w2 waits: the lane's one task is held, and renewed.
	select {
	case r := <-got:
		t.Fatalf("answered while nothing was claimable: %v, %v", r.cl, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := w.client("lead").Apply(ctxFor(t, 30*time.Second), intents.Apply("more").Set("tasks.t2", map[string]any{"status": "PENDING"})); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || r.cl.Task() != "tasks.t2" || r.cl.Fence() == 0 {
		t.Fatalf("the waiting claim once tasks.t2 was added: %+v, %v", r.cl, r.err)
	}
	r.cl.StopRenewing()
}
