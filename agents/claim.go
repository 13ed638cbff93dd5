package agents

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coagent/coagent/intents"
)

// Claim is a task this agent claimed: the task record's owner is the
// agent's name, set by the claim's apply.
//
// Under a board rule of kind task with a lease ({"kind": "task", "lease":
// "30s"}) the claim holds a lease, which the coordinator's decision names
// (ID), fences (Fence) and ends (LeaseExpires). While it is held the
// client renews it in the background, a third of the way through each
// lease, so a long piece of work keeps the task; StopRenewing (or closing
// the client, or the process dying) lets it run out, and then the
// coordinator reclaims the task: it removes the owner, sets the status
// the rule says, and tells the old owner, which closes Lost. Every write
// of the owner to the task carries the fence (Apply and Release add it);
// one with a dead fence is refused, so an owner that was too slow never
// writes over the next one.
//
// Without a lease rule the claim is a plain apply of the owner: Fence is
// 0, LeaseExpires is the zero time, nothing is renewed and nobody takes
// the task back. Apply and Release work the same (with no fence to
// carry), so code written for a leased board runs on one without.
//
// A Claim is safe for concurrent use.
type Claim struct {
	c     *Client
	task  string
	d     *intents.Decision
	lease time.Duration

	// op serializes the claim's intents, so a renewal never races the
	// release that ends it.
	op sync.Mutex

	mu      sync.Mutex
	expires time.Time
	ended   error // why it ended: nil while held
	stop    chan struct{}
	stopped bool
	lost    chan struct{}
}

// ErrTaken is what a claim of a task somebody else holds matches; the
// error is a *TakenError, which names the holder.
var ErrTaken = errors.New("agents: task taken")

// ErrReclaimed is what a claim's Err matches once the coordinator took
// the task back because its lease ended unrenewed. Such an error matches
// ErrLeaseExpired too.
var ErrReclaimed = errors.New("reclaimed")

// ErrClaimEnded is returned by a claim's methods once the agent released
// it.
var ErrClaimEnded = errors.New("agents: claim has ended")

// TakenError is a claim that lost: the task's owner was not absent.
type TakenError struct {
	Task string
	// Owner is who held the task when the client looked, just after the
	// rejection: "" when it was free again by then, or could not be read.
	Owner string
	// Rejected is the claim's decision, precondition_failed.
	Rejected *RejectedError
}

func (e *TakenError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("agents: claim of %s: taken (it was free again when read): %s", e.Task, e.Rejected.Decision.Detail)
	}
	return fmt.Sprintf("agents: claim of %s: taken by %s", e.Task, e.Owner)
}

// Unwrap gives ErrTaken and the rejection, so that errors.Is matches
// ErrTaken and ErrPreconditionFailed, and errors.As a *RejectedError.
func (e *TakenError) Unwrap() []error { return []error{ErrTaken, e.Rejected} }

// Claim claims task (a task record's path, such as "tasks.t1") for this
// agent: one apply that sets <task>.owner to the agent's name, on the
// precondition that nobody owns it, and sets the fields of set under the
// task in the same write (set["status"] = "RUNNING" sets
// <task>.status); a key of set is a path relative to the task, and may
// not be "owner". Of agents claiming at once exactly one wins; the others
// get a *TakenError (errors.Is(err, ErrTaken)), which names the holder.
// Another rejection (a transition the rules forbid, …) is a
// *RejectedError. On applied it returns the claim, renewed in the
// background if the task's rule has a lease (see Claim).
func (c *Client) Claim(ctx context.Context, task string, set map[string]any) (*Claim, error) {
	if err := intents.CheckPath(task); err != nil {
		return nil, fmt.Errorf("agents: %w: claim: task = %q: %w", ErrInvalid, task, err)
	}
	b := intents.Apply("claim").Set(task+".owner", c.name).Pre(intents.StateRef(task+".owner") + " == nil")
	if err := setFields(b, task, set); err != nil {
		return nil, fmt.Errorf("agents: claim %s: %w", task, err)
	}
	in, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("agents: %w: claim %s: %w", ErrInvalid, task, err)
	}
	d, err := c.submit(ctx, in, true)
	if err != nil {
		return nil, err
	}
	if err := expect(d, intents.OutcomeApplied); err != nil {
		var rej *RejectedError
		if errors.As(err, &rej) && d.Reason == intents.ReasonPreconditionFailed {
			return nil, &TakenError{Task: task, Owner: c.owner(ctx, task), Rejected: rej}
		}
		return nil, err
	}
	return c.held(task, d), nil
}

// ErrNothingClaimable is what ClaimNext returns when the lane has no task
// anyone may claim now.
var ErrNothingClaimable = errors.New("nothing claimable")

// laneKey carries, in a submit's context, the lane it claims the next
// task of (the request's header intents.HeaderClaimNext), as a laneClaim.
type laneKey struct{}

// laneClaim is a claim of a lane's next task: the lane, and whether it
// waits for a task (then its requests wait as long as they may).
type laneClaim struct {
	lane string
	wait bool
}

// ClaimNext claims the next claimable task of lane (a path whose members
// are tasks under a task rule with a lease): the coordinator picks, in
// the turn that decides the claim, the one of the highest priority and
// then the least recently changed, so agents asking at once get distinct
// tasks. set's fields are set under the task, as for Claim. With nothing
// claimable it returns an error matching ErrNothingClaimable.
func (c *Client) ClaimNext(ctx context.Context, lane string, set map[string]any) (*Claim, error) {
	return c.claimNext(ctx, lane, set, 0)
}

// ClaimNextWait is ClaimNext, waiting up to wait for a task of lane to
// become claimable (added, released or reclaimed) when none is, as an
// intent waits on a transaction; within the client's request timeout.
func (c *Client) ClaimNextWait(ctx context.Context, lane string, set map[string]any, wait time.Duration) (*Claim, error) {
	if wait <= 0 {
		return nil, fmt.Errorf("agents: %w: claim next: wait = %s: want a positive duration", ErrInvalid, wait)
	}
	return c.claimNext(ctx, lane, set, wait)
}

func (c *Client) claimNext(ctx context.Context, lane string, set map[string]any, wait time.Duration) (*Claim, error) {
	if err := intents.CheckPath(lane); err != nil {
		return nil, fmt.Errorf("agents: %w: claim next: lane = %q: %w", ErrInvalid, lane, err)
	}
	// The template's paths are relative to the task the coordinator
	// picks; it names the owner itself, so that it is an apply with writes.
	b := intents.Apply("claim_next").Set("owner", c.name)
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if k == "owner" || strings.HasPrefix(k, "owner.") {
			return nil, fmt.Errorf("agents: %w: claim next: set[%q]: the claim itself sets the owner", ErrInvalid, k)
		}
		b.Set(k, set[k])
	}
	if wait > 0 {
		b.OnConflict(intents.OnConflictWait).Wait(wait)
	}
	in, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("agents: %w: claim next %s: %w", ErrInvalid, lane, err)
	}
	d, err := c.submit(context.WithValue(ctx, laneKey{}, laneClaim{lane: lane, wait: wait > 0}), in, true)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Code == intents.CodeNothingClaimable {
		return nil, fmt.Errorf("agents: claim next %s: %w: %s", lane, ErrNothingClaimable, apiErr.Description)
	}
	if err != nil {
		return nil, err
	}
	if err := expect(d, intents.OutcomeApplied); err != nil {
		return nil, err
	}
	task := ""
	for p := range d.Versions {
		if t, ok := strings.CutSuffix(p, ".owner"); ok && strings.HasPrefix(t, lane+".") && !strings.Contains(t[len(lane)+1:], ".") {
			task = t
		}
	}
	if task == "" {
		return nil, fmt.Errorf("agents: claim next %s: the decision %s names no task of the lane", lane, d.Intent)
	}
	return c.held(task, d), nil
}

// held is the claim of task that d applied: renewed in the background if
// the task's rule has a lease.
func (c *Client) held(task string, d *intents.Decision) *Claim {
	cl := &Claim{c: c, task: task, d: d, stop: make(chan struct{}), lost: make(chan struct{})}
	if d.Fence == 0 || d.LeaseExpires == nil {
		return cl // no lease: nothing to renew
	}
	// The decision says when the lease ends, not how long it is: the time
	// left now is the lease less the reply's trip.
	cl.expires = *d.LeaseExpires
	cl.lease = time.Until(cl.expires)
	if c.trackClaim(cl) {
		go cl.renewLoop()
	}
	return cl
}

// setFields adds to b a set of each field of set under task, in the
// keys' order, so that equal maps make equal intents.
func setFields(b *intents.Builder, task string, set map[string]any) error {
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if k == "owner" || strings.HasPrefix(k, "owner.") {
			return fmt.Errorf("%w: set[%q]: the claim itself sets and removes the owner", ErrInvalid, k)
		}
		b.Set(task+"."+k, set[k])
	}
	return nil
}

// owner is who owns task now; "" for nobody, or when it cannot be read
// (the board's readers may keep it from this agent).
func (c *Client) owner(ctx context.Context, task string) string {
	st, err := c.Read(ctx, task+".owner")
	if err != nil {
		c.log.Warn("reading who holds a task failed", "task", task, "err", err)
		return ""
	}
	var who string
	if err := st.Values[task+".owner"].Decode(&who); err != nil {
		return ""
	}
	return who
}

// trackClaim records a leased claim, for the notice that it was
// reclaimed, and counts its renewal goroutine for Close to wait on; false
// once the client is closed.
func (c *Client) trackClaim(cl *Claim) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.claims[cl.ID()] = cl
	c.renewers.Add(1)
	return true
}

// Task is the claimed task's path.
func (cl *Claim) Task() string { return cl.task }

// ID names the claim's lease (the id of the intent that claimed the
// task), as renewals and the coordinator's notices do; "" without a
// lease.
func (cl *Claim) ID() string { return cl.d.Txn }

// Fence is the fencing token the owner's writes to the task carry; 0
// without a lease.
func (cl *Claim) Fence() uint64 { return cl.d.Fence }

// Decision is the claim's applied decision.
func (cl *Claim) Decision() *intents.Decision { return cl.d }

// LeaseExpires is when the lease ends unless renewed again; the zero time
// without a lease.
func (cl *Claim) LeaseExpires() time.Time {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.expires
}

// Lost is closed when the client learns that the claim ended without a
// release of its own: the coordinator's notice that it reclaimed the
// task, or a renewal or write refused as expired or fenced.
func (cl *Claim) Lost() <-chan struct{} { return cl.lost }

// Err is nil while the claim is held, and then says how it ended:
// ErrClaimEnded after Release; when it was lost, an error matching
// ErrLeaseExpired (and ErrReclaimed when the coordinator said it took the
// task back) or ErrFenced.
func (cl *Claim) Err() error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.ended
}

// renewLoop renews the lease a third of the way through it until the
// claim ends, renewal is stopped, or the client closes.
func (cl *Claim) renewLoop() {
	defer cl.c.renewers.Done()
	every := max(cl.lease/3, 10*time.Millisecond)
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-cl.stop:
			return
		case <-cl.c.done:
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), cl.LeaseExpires())
		err := cl.renew(ctx)
		cancel()
		var rej *RejectedError
		switch {
		case err == nil:
			timer.Reset(every)
		case errors.Is(err, ErrClaimEnded), errors.As(err, &rej), cl.Err() != nil:
			return
		case !time.Now().Before(cl.LeaseExpires()):
			// Could not reach the coordinator while the lease lasted: the
			// coordinator has reclaimed the task, or will as soon as it
			// runs. A write now would be fenced.
			cl.end(fmt.Errorf("agents: claim %s of %s: %w while the coordinator was unreachable (last: %w)",
				cl.ID(), cl.task, ErrLeaseExpired, err), true)
			return
		default:
			cl.c.log.Warn("renewing a claim's lease failed; trying again", "claim", cl.ID(), "task", cl.task, "err", err)
			timer.Reset(every / 3)
		}
	}
}

// Renew extends the lease now, by the lease it has (the rule's, or the
// last renewal's). The background renewal calls it; a caller need not.
// It returns the claim's Err once the claim has ended, and a
// *RejectedError when the coordinator refuses it, which ends the claim:
// lease_expired (the task was reclaimed) or fenced. Without a lease it
// does nothing.
func (cl *Claim) Renew(ctx context.Context) error {
	if cl.Fence() == 0 {
		return cl.Err()
	}
	return cl.renew(ctx)
}

func (cl *Claim) renew(ctx context.Context) error {
	cl.op.Lock()
	defer cl.op.Unlock()
	if err := cl.Err(); err != nil {
		return err
	}
	d, err := cl.c.Submit(ctx, &intents.Intent{Kind: intents.KindRenew, Txn: cl.ID(), Fence: cl.Fence()})
	if err != nil {
		return err
	}
	if err := expect(d, intents.OutcomeRenewed); err != nil {
		cl.end(cl.lostBy(err), true)
		return err
	}
	if d.LeaseExpires != nil {
		cl.mu.Lock()
		cl.expires = *d.LeaseExpires
		cl.mu.Unlock()
	}
	return nil
}

// lostBy is the claim's Err for a refusal err that ended it: a lease
// that ended is a reclaim.
func (cl *Claim) lostBy(err error) error {
	if errors.Is(err, ErrLeaseExpired) {
		return fmt.Errorf("agents: claim %s of %s: %w: %w", cl.ID(), cl.task, ErrReclaimed, err)
	}
	return fmt.Errorf("agents: claim %s of %s: %w", cl.ID(), cl.task, err)
}

// StopRenewing stops the background renewal: unless released first, the
// claim ends when its lease runs out, and the coordinator reclaims the
// task.
func (cl *Claim) StopRenewing() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if !cl.stopped {
		cl.stopped = true
		close(cl.stop)
	}
}

// end records how the claim ended; lost says it was not the agent's own
// release.
func (cl *Claim) end(why error, lost bool) {
	cl.c.mu.Lock()
	if cl.c.claims[cl.ID()] == cl {
		delete(cl.c.claims, cl.ID())
	}
	cl.c.mu.Unlock()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.ended != nil {
		return
	}
	cl.ended = why
	if !cl.stopped {
		cl.stopped = true
		close(cl.stop)
	}
	if lost {
		close(cl.lost)
	}
}

// Apply builds b (made with intents.Apply) and submits it with the
// claim's fence, which a write of the owner to a task claimed under a
// lease must carry; it returns as Client.Apply does. A write refused as
// fenced ends the claim (it was lost before); one whose writes delete the
// task's owner (or the task) ends it as released. To release the task,
// Release is simpler.
func (cl *Claim) Apply(ctx context.Context, b *intents.Builder) (*intents.Decision, error) {
	in, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("agents: %w: %w", ErrInvalid, err)
	}
	if in.Kind != intents.KindApply {
		return nil, fmt.Errorf("agents: a claim's Apply of a %s intent; build it with intents.Apply", in.Kind)
	}
	in.Fence = cl.Fence()
	return cl.submit(ctx, in)
}

// Release ends the claim: one apply, carrying the fence, that deletes the
// task's owner and sets the fields of set under the task (keys as for
// Client.Claim): set["status"] = "DONE" completes the task, "PENDING"
// hands it back. Without a lease, the apply's precondition is that the
// agent still owns the task. On applied the claim ends (Err is
// ErrClaimEnded) and its renewal stops. A release refused as fenced or
// expired ends the claim as lost; another rejection (a transition the
// rules forbid) leaves it held and renewed, to release with other
// fields.
func (cl *Claim) Release(ctx context.Context, set map[string]any) (*intents.Decision, error) {
	b := intents.Apply("release").Delete(cl.task + ".owner")
	if err := setFields(b, cl.task, set); err != nil {
		return nil, fmt.Errorf("agents: release %s: %w", cl.task, err)
	}
	if cl.Fence() == 0 {
		b.Pre(intents.StateRef(cl.task+".owner") + " == agent")
	}
	b.Fence(cl.Fence())
	in, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("agents: %w: release %s: %w", ErrInvalid, cl.task, err)
	}
	return cl.submit(ctx, in)
}

// submit sends in, an apply of the owner carrying the claim's fence, and
// ends the claim as its decision says.
func (cl *Claim) submit(ctx context.Context, in *intents.Intent) (*intents.Decision, error) {
	cl.op.Lock()
	defer cl.op.Unlock()
	if err := cl.Err(); err != nil {
		return nil, err
	}
	d, err := cl.c.submit(ctx, in, true)
	if err != nil {
		return nil, err
	}
	err = expect(d, intents.OutcomeApplied)
	switch {
	case err == nil && cl.releases(in):
		cl.end(ErrClaimEnded, false)
	case errors.Is(err, ErrFenced), errors.Is(err, ErrLeaseExpired):
		cl.end(cl.lostBy(err), true)
	case errors.Is(err, ErrPreconditionFailed) && cl.Fence() == 0 && cl.releases(in):
		// Without a lease a release's precondition is the ownership: the
		// task is no longer the agent's.
		cl.end(fmt.Errorf("agents: claim of %s: %w", cl.task, err), true)
	}
	return d, err
}

// releases reports whether in's writes delete the task's owner, or
// something it is under.
func (cl *Claim) releases(in *intents.Intent) bool {
	owner := cl.task + ".owner"
	for _, w := range in.Writes {
		if w.Op == intents.OpDelete && (w.Path == owner || strings.HasPrefix(owner, w.Path+".")) {
			return true
		}
	}
	return false
}
