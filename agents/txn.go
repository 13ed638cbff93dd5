package agents

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coagent/coagent/intents"
)

// Txn is a granted transaction: the coordinator holds its write set for
// this agent until it commits, aborts or its lease runs out. While it is
// open the client renews the lease in the background, a third of the way
// through each lease, so a long piece of work keeps it; StopRenewing (or
// closing the client, or the process dying) lets it run out.
type Txn struct {
	c     *Client
	grant *intents.Decision
	lease time.Duration

	// op serializes the transaction's intents, so a renewal never races
	// the commit that ends it.
	op sync.Mutex

	mu      sync.Mutex
	expires time.Time
	ended   error // why it ended: nil while open
	stop    chan struct{}
	stopped bool
	lost    chan struct{}
}

// ID is the transaction id of the grant.
func (t *Txn) ID() string { return t.grant.Txn }

// Fence is the fencing token of the grant.
func (t *Txn) Fence() uint64 { return t.grant.Fence }

// Grant is the granted decision.
func (t *Txn) Grant() *intents.Decision { return t.grant }

// LeaseExpires is when the lease ends unless renewed again.
func (t *Txn) LeaseExpires() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.expires
}

// Lost is closed when the client learns that the transaction ended without
// a commit or abort of its own: the coordinator's notice that the lease ran
// out, an arbiter's preemption (an aborted decision for the propose), or a
// renewal or commit refused as expired or fenced.
func (t *Txn) Lost() <-chan struct{} { return t.lost }

// Err is nil while the transaction is open, and then says how it ended:
// ErrTxnEnded after a commit or abort; when it was lost, an error matching
// ErrLeaseExpired, ErrFenced or ErrPreempted.
func (t *Txn) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ended
}

// Propose builds b (made with intents.Propose) and asks for a transaction
// over its write set. On granted it returns the open transaction, renewed in
// the background; on a rejection a *RejectedError. A propose that waits
// (on_conflict wait) or escalates returns when its final decision comes.
func (c *Client) Propose(ctx context.Context, b *intents.Builder) (*Txn, error) {
	in, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("agents: %w: %w", ErrInvalid, err)
	}
	if in.Kind != intents.KindPropose {
		return nil, fmt.Errorf("agents: Propose of a %s intent; build it with intents.Propose", in.Kind)
	}
	d, err := c.submit(ctx, in, true)
	if err != nil {
		return nil, err
	}
	if err := expect(d, intents.OutcomeGranted); err != nil {
		return nil, err
	}
	lease := time.Duration(in.LeaseMS) * time.Millisecond
	t := &Txn{c: c, grant: d, lease: lease, stop: make(chan struct{}), lost: make(chan struct{})}
	if d.LeaseExpires != nil {
		t.expires = *d.LeaseExpires
		if lease == 0 {
			lease = time.Until(t.expires)
		}
	}
	t.lease = lease
	if c.track(t) && lease > 0 {
		go t.renewLoop()
	}
	return t, nil
}

// track records an open transaction, for the notice that its lease ran
// out, and counts its renewal goroutine for Close to wait on; false once
// the client is closed.
func (c *Client) track(t *Txn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.txns[t.ID()] = t
	c.renewers.Add(1)
	return true
}

// renewLoop renews the lease a third of the way through it until the
// transaction ends, renewal is stopped, or the client closes.
func (t *Txn) renewLoop() {
	defer t.c.renewers.Done()
	every := max(t.lease/3, 10*time.Millisecond)
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-t.stop:
			return
		case <-t.c.done:
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), t.LeaseExpires())
		err := t.renew(ctx)
		cancel()
		var rej *RejectedError
		switch {
		case err == nil:
			timer.Reset(every)
		case errors.Is(err, ErrTxnEnded), errors.As(err, &rej):
			return
		case !time.Now().Before(t.LeaseExpires()):
			// Could not reach the coordinator while the lease lasted: the
			// coordinator has expired it. A commit now would be fenced.
			t.end(fmt.Errorf("agents: transaction %s: lease ran out while the coordinator was unreachable: %w", t.ID(), err), true)
			return
		default:
			t.c.log.Warn("renewing the lease failed; trying again", "txn", t.ID(), "err", err)
			timer.Reset(every / 3)
		}
	}
}

// Renew extends the lease now, by the lease the transaction was proposed
// with. The background renewal calls it; a caller need not.
func (t *Txn) Renew(ctx context.Context) error {
	return t.renew(ctx)
}

func (t *Txn) renew(ctx context.Context) error {
	t.op.Lock()
	defer t.op.Unlock()
	if err := t.Err(); err != nil {
		return err
	}
	in := &intents.Intent{Kind: intents.KindRenew, Txn: t.ID(), Fence: t.Fence(), LeaseMS: t.lease.Milliseconds()}
	d, err := t.c.Submit(ctx, in)
	if err != nil {
		return err
	}
	if err := expect(d, intents.OutcomeRenewed); err != nil {
		t.end(err, true)
		return err
	}
	if d.LeaseExpires != nil {
		t.mu.Lock()
		t.expires = *d.LeaseExpires
		t.mu.Unlock()
	}
	return nil
}

// StopRenewing stops the background renewal: unless committed or aborted,
// the transaction ends when its lease runs out.
func (t *Txn) StopRenewing() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		close(t.stop)
	}
}

// end records how the transaction ended; lost says it was not the agent's
// own commit or abort.
func (t *Txn) end(why error, lost bool) {
	t.c.mu.Lock()
	delete(t.c.txns, t.ID())
	t.c.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended != nil {
		return
	}
	t.ended = why
	if !t.stopped {
		t.stopped = true
		close(t.stop)
	}
	if lost {
		close(t.lost)
	}
}

// Commit writes b's writes (with their values) and checks b's
// postconditions; b is made with intents.Apply (its kind and reads are not
// used), and its writes must lie inside the granted write set. On committed the
// transaction ends. A commit rejected for a postcondition or for writing
// out of scope leaves it open (and renewed) so the agent can correct it; a
// fenced or expired one ends it.
func (t *Txn) Commit(ctx context.Context, b *intents.Builder) (*intents.Decision, error) {
	in, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("agents: %w: %w", ErrInvalid, err)
	}
	t.op.Lock()
	defer t.op.Unlock()
	if err := t.Err(); err != nil {
		return nil, err
	}
	commit := &intents.Intent{Kind: intents.KindCommit, Txn: t.ID(), Fence: t.Fence(), Action: in.Action,
		Writes: in.Writes, Pre: in.Pre, Post: in.Post, Priority: in.Priority, Meta: in.Meta}
	d, err := t.c.Submit(ctx, commit)
	if err != nil {
		return nil, err
	}
	err = expect(d, intents.OutcomeCommitted)
	switch {
	case err == nil:
		t.end(ErrTxnEnded, false)
	case errors.Is(err, ErrFenced), errors.Is(err, ErrLeaseExpired):
		t.end(err, true)
	}
	return d, err
}

// Abort ends the transaction without writing anything.
func (t *Txn) Abort(ctx context.Context) error {
	t.op.Lock()
	defer t.op.Unlock()
	if err := t.Err(); err != nil {
		return err
	}
	d, err := t.c.Submit(ctx, &intents.Intent{Kind: intents.KindAbort, Txn: t.ID(), Fence: t.Fence()})
	if err != nil {
		return err
	}
	err = expect(d, intents.OutcomeAborted)
	switch {
	case err == nil:
		t.end(ErrTxnEnded, false)
	case errors.Is(err, ErrFenced), errors.Is(err, ErrLeaseExpired):
		t.end(err, true)
	}
	return err
}
