package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// lease is the value of the leadership key: who holds it, and until
// when unless renewed. The expiry is in the value, not a TTL of the
// bucket, so that whether a lease lapsed is decided by the compare-and-set
// of one key, and not by when each replica of the bucket's stream expires
// a message (which moves with its leader while a node fails over).
type lease struct {
	Node  string    `json:"node"`
	Until time.Time `json:"until"`
}

// readLease returns the lease in force and its revision (ok false: none).
// It asks the bucket's stream leader, not the nearest replica (as a
// key-value Get does): a replica that lags would show a lease that was
// renewed since as lapsed.
func (m *Member) readLease(ctx context.Context) (l lease, rev uint64, ok bool, err error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + m.subj.LeaderBucket() + "." + intents.LeaderKey})
	msg, err := m.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+m.subj.LeaderBucket(), req)
	if err != nil {
		return lease{}, 0, false, err
	}
	var resp struct {
		Message *struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
			Data []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return lease{}, 0, false, fmt.Errorf("read the leadership key: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return lease{}, 0, false, nil
	case resp.Error != nil:
		return lease{}, 0, false, resp.Error
	case resp.Message == nil:
		return lease{}, 0, false, errors.New("read the leadership key: an empty answer")
	}
	if bytes.Contains(resp.Message.Hdrs, []byte("KV-Operation")) {
		return lease{}, 0, false, nil // deleted or purged: given up
	}
	if err := json.Unmarshal(resp.Message.Data, &l); err != nil {
		// Not a lease this build wrote: taken over as a lapsed one.
		return lease{}, resp.Message.Seq, true, nil
	}
	return l, resp.Message.Seq, true, nil
}

// putLease writes this member's lease, valid for LeaseTTL from now, over
// revision rev (0: create it) and returns the new revision and the
// lease's end as written: the others may take the key from then on.
func (m *Member) putLease(ctx context.Context, rev uint64) (uint64, time.Time, error) {
	l := lease{Node: m.opts.Node, Until: time.Now().Add(m.opts.LeaseTTL)}
	data, _ := json.Marshal(l)
	var err error
	if rev == 0 {
		rev, err = m.kv.Create(ctx, intents.LeaderKey, data)
	} else {
		rev, err = m.kv.Update(ctx, intents.LeaderKey, data, rev)
	}
	return rev, l.Until, err
}

// leaseWatch is what a standby has seen of another member's lease: the
// key's revision, and since when it has seen it unchanged through reads
// that answered.
type leaseWatch struct {
	rev   uint64
	since time.Time // zero: no read answered since the last that failed
}

// tryLead takes the leadership key if nobody holds it, if it is this
// member's own (it stepped down, or restarted, within the lease), or if
// its lease has lapsed: by the end written in it, and either because its
// holder is gone from the cluster (nobody answers on its own subjects) or
// because this member has watched the same revision for a whole lease
// through reads that answered. The watch keeps a standby from taking the
// key of a holder that lives the moment the bucket answers again after
// its stream's election, which no member could write through and which
// may outlast the lease: then the active member, which rides the election
// out (keepLease) and tries to renew as often, keeps the key. A holder
// that is gone has nothing to ride out, and waiting a lease more for it
// would only add a lease to every failover of a node that led the bucket
// (TestRecipeFailover). The compare-and-set on the key's revision makes
// one member win when several try at once.
func (m *Member) tryLead(parent context.Context, w *leaseWatch) (uint64, time.Time, bool) {
	// Every call to the bucket is bounded: one sent to a node that died
	// (the bucket's stream leader) is never answered. A read is answered
	// in milliseconds when the bucket has a leader, so it is given little
	// time, and the next comes soon after one that failed: the end of an
	// election is noticed within a fraction of a lease.
	readCtx, cancel := context.WithTimeout(parent, m.opts.LeaseTTL/8)
	l, rev, ok, err := m.readLease(readCtx)
	cancel()
	if err != nil {
		m.log.Info("read the leadership key", "err", err)
		w.since = time.Time{}
		return 0, time.Time{}, false
	}
	if ok && l.Node != m.opts.Node {
		if w.since.IsZero() || rev != w.rev {
			w.rev, w.since = rev, time.Now()
		}
		if time.Now().Before(l.Until) {
			return 0, time.Time{}, false
		}
		if time.Since(w.since) < m.opts.LeaseTTL && !m.gone(parent, l.Node) {
			return 0, time.Time{}, false
		}
	}
	if !ok {
		rev = 0
	}
	ctx, cancel := context.WithTimeout(parent, m.opts.LeaseTTL/2)
	defer cancel()
	next, until, err := m.putLease(ctx, rev)
	if err != nil {
		m.log.Info("take the leadership key", "err", err)
		return 0, time.Time{}, false
	}
	return next, until, true
}

// gone reports whether member node is absent from the cluster: a read on
// its own subjects (intents.Subjects.NodeAPI), which every member serves
// while it runs, active or standby, finds no responders. A member that
// lives answers, if only that it refuses reads; one whose process died,
// or that lost its connection to the cluster, is not subscribed anywhere
// in it. Anything else (no answer in time) is taken for a member that
// lives.
func (m *Member) gone(parent context.Context, node string) bool {
	ctx, cancel := context.WithTimeout(parent, m.opts.LeaseTTL/8)
	defer cancel()
	_, err := m.nc.RequestWithContext(ctx, m.subj.NodeAPI(node, intents.APIStateGet), []byte(`{"paths":[]}`))
	if errors.Is(err, nats.ErrNoResponders) {
		m.log.Info("the leadership key's holder is gone from the cluster: its lapsed lease is taken without watching it a lease more", "holder", node)
		return true
	}
	return false
}

// casFailed reports whether err says another wrote the key first (the
// compare-and-set failed), rather than that the bucket did not answer.
func casFailed(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// leaseKeeper renews the leadership key a member took, from the moment it
// took it: through the catching up and seeding before it starts deciding
// too, which may outlast a lease on a long log.
type leaseKeeper struct {
	lost    chan error  // another member took the key (one error)
	stop    func()      // ends the renewals
	renewed chan uint64 // after stop: the key's revision, 0 if lost
	// until is the end of the lease last written (Unix nanoseconds): the
	// others may take the key after it, so reads are refused after it
	// (see leased).
	until atomic.Int64
}

// leased reports whether the lease this member wrote last is still in
// force: until it ends no other member can have taken the key, so what
// this one reads is the cluster's latest.
func (k *leaseKeeper) leased() bool { return time.Now().UnixNano() < k.until.Load() }

// keepLease starts renewing the key this member holds at rev, its lease
// written to last until then, every third of the lease. A renewal the
// bucket does not answer (its stream electing a leader while a node
// fails, which takes longer than a lease) is tried again for as long as
// it takes: no other member can take the key meanwhile either, and
// whoever takes it once the bucket answers again fences this member's
// appends to the replicated log, so that nothing it decides after that is
// durable or told. Only reads, which the fence does not cover, stop once
// the lease has lapsed, until a renewal goes through. The key is lost
// only when another member holds it.
func (m *Member) keepLease(rev uint64, until time.Time) *leaseKeeper {
	k := &leaseKeeper{lost: make(chan error, 1), renewed: make(chan uint64, 1)}
	k.until.Store(until.UnixNano())
	renewCtx, stopRenew := context.WithCancel(context.Background())
	k.stop = stopRenew
	go func() {
		defer close(k.renewed)
		tick := time.NewTicker(m.opts.LeaseTTL / 6)
		defer tick.Stop()
		r, next := rev, time.Now().Add(m.opts.LeaseTTL/3)
		lapsed := false
		for {
			select {
			case <-renewCtx.Done():
				k.renewed <- r
				return
			case <-tick.C:
			}
			if time.Now().Before(next) {
				continue
			}
			ctx, cancel := context.WithTimeout(renewCtx, m.opts.LeaseTTL/4)
			n, end, err := m.putLease(ctx, r)
			if renewCtx.Err() != nil {
				cancel()
				continue
			}
			if err != nil && casFailed(err) {
				l, rev, ok, rerr := m.readLease(ctx)
				switch {
				case rerr != nil || !ok:
					// Unread, or given up: the failed compare stands.
				case l.Node == m.opts.Node && rev > r:
					// A write of this member's whose confirmation was lost
					// (the bucket's stream changed leaders meanwhile) moved
					// the revision: the lease is still its own.
					r = rev
					n, end, err = m.putLease(ctx, r)
				case l.Node == m.opts.Node:
					// The compare failed, yet the key reads as this
					// member's at its revision or before: a write of its
					// own is still in the stream's pipeline after an
					// election, ahead of the read. Not lost: tried again,
					// and if another member did take the key meanwhile, a
					// later read names it.
					err = fmt.Errorf("the key still reads as this member's, at revision %d, after a compare-and-set at %d failed (%v)", rev, r, err)
				default:
					err = fmt.Errorf("%w (the key names %s until %s)", err, l.Node, l.Until.Format(time.StampMilli))
				}
			}
			cancel()
			switch {
			case err == nil:
				r, next = n, time.Now().Add(m.opts.LeaseTTL/3)
				k.until.Store(end.UnixNano())
				if lapsed {
					m.log.Warn("the leadership key is renewed again; reads are answered again")
					lapsed = false
				}
			case casFailed(err):
				k.lost <- fmt.Errorf("cluster: renew the leadership key: %w", err)
				k.renewed <- 0
				return
			case !k.leased() && !lapsed:
				m.log.Warn("the leadership key cannot be renewed and its lease has lapsed: reads are refused and decisions, still logged and fenced in the replicated log, are answered unavailable until it is renewed", "err", err)
				lapsed = true
			case !lapsed:
				m.log.Info("renew the leadership key: trying again", "err", err, "lease_left", time.Until(time.Unix(0, k.until.Load())).Round(time.Millisecond))
			}
		}
	}()
	return k
}

// drop stops k and gives the key up if it is still this member's, so that
// a standby takes over at once.
func (m *Member) drop(k *leaseKeeper) {
	k.stop()
	if r := <-k.renewed; r != 0 {
		m.release(r)
	}
}

// release gives the leadership key up if it is still at rev (this
// member's), so that a standby takes over at once.
func (m *Member) release(rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.LeaseTTL)
	defer cancel()
	if err := m.kv.Delete(ctx, intents.LeaderKey, jetstream.LastRevision(rev)); err != nil {
		m.log.Info("the leadership key was not given up (another holds it, or it lapsed)", "err", err)
	}
}
