package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// seed appends core's log to the replicated log if it is still empty.
func (m *Member) seed(ctx context.Context, core *coordinator.Core) error {
	info, err := m.logs.Info(ctx)
	if err != nil {
		return fmt.Errorf("cluster: read the replicated log: %w", err)
	}
	if info.State.Msgs > 0 {
		return nil // another seeded it, or wrote: following tells whether that is this history
	}
	began := time.Now()
	last, err := seed(ctx, m.js, m.subj.Log(), core.Log())
	if err != nil {
		return fmt.Errorf("cluster: seed the replicated log: %w", err)
	}
	m.log.Warn("seeded the replicated log with this coordinator's log", "events", core.Log().LastSeq(), "messages", last,
		"took", time.Since(began).Round(time.Millisecond))
	return nil
}

// catchUp waits until the standby has folded the log's last message, as
// the stream has it now that this member holds the key, and returns that
// message's sequence.
func (m *Member) catchUp(ctx context.Context, folding chan error, lost chan error) (uint64, error) {
	// The log's stream may be electing a leader (the node that led it
	// died with the coordinator that led), which takes longer than a
	// lease: it is asked again for as long as this member holds the key
	// (keepLease renews it meanwhile). Giving up sooner hands the key to
	// another member that waits on the same election.
	var info *jetstream.StreamInfo
	for {
		infoCtx, cancel := context.WithTimeout(ctx, m.opts.LeaseTTL/4)
		var err error
		info, err = m.logs.Info(infoCtx)
		cancel()
		if err == nil {
			break
		}
		select {
		case err := <-lost:
			lost <- err // for lead, which is not reached: drop
			return 0, err
		case <-ctx.Done():
			return 0, fmt.Errorf("cluster: read the replicated log's end: %w", err)
		case <-time.After(50 * time.Millisecond): // an error may come at once
		}
	}
	last := info.State.LastSeq
	m.catching.Store(true)
	defer m.catching.Store(false)
	for {
		m.mu.Lock()
		at := m.mu.logSeq
		m.mu.Unlock()
		if at >= last {
			return last, nil
		}
		select {
		case <-m.progress:
		case err := <-folding:
			folding <- err
			if err == nil {
				err = errors.New("the follower stopped")
			}
			return 0, err
		case err := <-lost:
			lost <- err // for lead, which is not reached: drop
			return 0, err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// lead runs the Service while this member holds the key, which k keeps
// renewing: it stops the Service when k loses the key, when the Service
// stops by itself (an append refused), or when ctx ends. The Service
// decides with core, the Core the member followed the log with, if its
// start gets that far (coordinator.Active.Core); lead closes it
// otherwise.
func (m *Member) lead(ctx context.Context, k *leaseKeeper, last uint64, core *coordinator.Core) error {
	lost := k.lost
	release := func() { m.drop(k) }
	// A stream the Service sets up may be electing a leader (its node
	// died with the coordinator that led), and a request sent to it
	// meanwhile is never answered: each step of the set-up is given a
	// quarter of a lease, and the start is tried again while the lease
	// holds (after eight tries, with twice the time each, up to two
	// leases), rather than the key handed to another member that would
	// wait the same.
	at := &coordinator.Active{Node: m.opts.Node, Leased: k.leased, Setup: m.opts.LeaseTTL / 4, Core: core,
		Replicator: func(pub *nats.Conn, log *eventlog.Log) (coordinator.Replicator, error) {
			return newReplog(pub, m.subj.Log(), last, log, k.leased)
		}}
	defer func() {
		if at.Core != nil { // StartActive never took it
			at.Core.Close()
		}
	}()
	svc, err := coordinator.StartActive(ctx, m.nc, m.dir, m.opts.Options, at)
	for try := 1; err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && k.leased(); try++ {
		m.log.Info("starting the service: a stream did not answer, trying again", "err", err)
		if try >= 8 { // past any election: JetStream is slow, not electing
			at.Setup = min(2*at.Setup, 2*m.opts.LeaseTTL)
		}
		svc, err = coordinator.StartActive(ctx, m.nc, m.dir, m.opts.Options, at)
	}
	if err != nil {
		release()
		return err
	}
	m.setRole(intents.RoleActive, svc)
	stopSnapshots := m.startSnapshots(ctx, svc)
	m.log.Info("active: this coordinator decides", "log_message", last, "events", svc.Core().Log().LastSeq())
	if m.opts.OnActive != nil {
		if err := m.opts.OnActive(ctx, svc); err != nil {
			m.log.Error("on becoming active", "err", err)
		}
	}
	var why error
	select {
	case <-ctx.Done():
	case why = <-lost:
	case <-svc.Done():
		why = svc.Err()
	}
	stopSnapshots()
	// No longer active from here: a status asked while the Service drains
	// must not show two active coordinators.
	m.setRole(intents.RoleStandby, nil)
	if why != nil {
		m.log.Warn("stepping down", "err", why)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	if err := svc.Shutdown(stopCtx); err != nil && why == nil {
		why = err
	}
	m.log.Info("the service stopped", "took", time.Since(began).Round(time.Millisecond))
	release()
	if why != nil && !fatal(why) {
		m.log.Warn("stepped down: another coordinator may take over")
	}
	return why
}
