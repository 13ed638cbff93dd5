package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go/jetstream"
)

// follow is the standby: it folds the replicated log into the local one
// until it takes the leadership key and has read the log to its last
// message; it returns the key's keeper, renewing it from the moment it was
// taken, that message's sequence, and the Core it followed with, for the
// Service to decide with (the caller closes it if it does not).
func (m *Member) follow(ctx context.Context) (k *leaseKeeper, last uint64, handed *coordinator.Core, err error) {
	m.setRole(intents.RoleStandby, nil)
	core, tip, pos, err := m.openFollowing(ctx)
	if core == nil {
		return nil, 0, nil, err
	}
	defer func() {
		if handed == nil {
			core.Close()
		}
	}()
	seedable := errors.Is(err, errLogEmpty)
	if seedable {
		m.log.Warn("the replicated log is empty and this coordinator's log is not: it will seed the replicated log with its own if it leads; the other coordinators must start from empty data directories",
			"events", core.Log().LastSeq())
		err = nil
	}
	if err != nil {
		return nil, 0, nil, fmt.Errorf("cluster: find this log's end in %s: %w", m.subj.Stream(intents.StreamLog), err)
	}
	m.mu.Lock()
	m.mu.seq, m.mu.logSeq = core.Log().LastSeq(), pos-1
	m.mu.Unlock()
	// A standby's reads are the API's (coordinator.Standby), answered from
	// the Core it folds into.
	reads, err := coordinator.ServeStandby(m.nc, core, m.opts.Node, m.opts.Options)
	if err != nil {
		return nil, 0, nil, err
	}
	defer reads.Stop() // before core closes
	it, err := m.consume(ctx, pos)
	if err != nil {
		return nil, 0, nil, err
	}
	folding, quit := make(chan error, 1), make(chan struct{})
	go func() { folding <- m.tail(core, reads, tip, it, quit) }()
	stop := func() error {
		close(quit)
		err := <-folding
		return errors.Join(err, core.Wait(context.Background()))
	}
	m.log.Info("standby: following the replicated log", "from_message", pos, "events", core.Log().LastSeq())

	watch, err := m.kv.Watch(ctx, intents.LeaderKey, jetstream.UpdatesOnly())
	if err != nil {
		return nil, 0, nil, errors.Join(fmt.Errorf("cluster: watch the leadership key: %w", err), stop())
	}
	// Stopping the watcher deletes its consumer, a request that waits out
	// the client's timeout (5s) while the bucket's consumers elect
	// leaders: not on the way to taking over.
	defer func() { go watch.Stop() }()
	tick := time.NewTicker(m.opts.LeaseTTL / 4)
	defer tick.Stop()
	var seen leaseWatch
	for {
		if rev, until, ok := m.tryLead(ctx, &seen); ok {
			k := m.keepLease(rev, until)
			if seedable {
				if err := m.seed(ctx, core); err != nil {
					m.drop(k)
					return nil, 0, nil, errors.Join(err, stop())
				}
			}
			last, err := m.catchUp(ctx, folding, k.lost)
			if err == nil {
				err = stop()
			} else {
				err = errors.Join(err, stop())
			}
			if err != nil {
				m.drop(k)
				return nil, 0, nil, err
			}
			return k, last, core, nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, nil, errors.Join(ctx.Err(), stop())
		case err := <-folding:
			folding <- err // for stop
			return nil, 0, nil, errors.Join(err, stop())
		case <-watch.Updates():
		case <-tick.C:
		}
	}
}

// consume reads the replicated log from message pos on.
func (m *Member) consume(ctx context.Context, pos uint64) (jetstream.MessagesContext, error) {
	cons, err := m.logs.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: pos})
	if err != nil {
		return nil, fmt.Errorf("cluster: follow %s: %w", m.subj.Stream(intents.StreamLog), err)
	}
	// Heartbeats every second: a follower whose pull was lost (a node
	// restarted, a leader moved) finds out and pulls again within
	// seconds, not the default's ten.
	it, err := cons.Messages(jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return nil, fmt.Errorf("cluster: follow %s: %w", m.subj.Stream(intents.StreamLog), err)
	}
	if m.opts.wrapFollow != nil {
		it = m.opts.wrapFollow(it)
	}
	return it, nil
}

// DefaultFollowStall is how long a standby's reader of the replicated
// log may deliver nothing while the log holds messages past the one
// folded last, before the standby replaces it with a new one. The
// client's reader recovers by itself from what it sees (missed
// heartbeats, a reconnection, a consumer deleted), but not from all that
// befalls a cluster: one was seen to wait for good after a node of the
// cluster was killed, and a standby that stopped following can neither
// answer current reads nor take over.
const DefaultFollowStall = 5 * time.Second

// catchingStall is the stall of a member's reader while it holds the key
// and waits for it to reach the log's end.
const catchingStall = 500 * time.Millisecond

// tail folds the replicated log into core through reads, core's log
// ending at tip, from it, until quit closes (nil) or folding fails. It replaces a reader that
// stalled (see DefaultFollowStall) with a new one from the message after
// the last read.
func (m *Member) tail(core *coordinator.Core, reads *coordinator.Standby, tip link, it jetstream.MessagesContext, quit <-chan struct{}) error {
	stall := m.opts.followStall
	if stall == 0 {
		stall = DefaultFollowStall
	}
	// A member waiting to take over has no time to lose on a reader that
	// stalled: the stream's leader died with the active coordinator, and
	// with it the reader's consumer, which the client recreates only
	// seconds after the election.
	hurried := min(stall, catchingStall)
	check := time.NewTicker(min(hurried/2, time.Second))
	defer check.Stop()
	at := func() uint64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.mu.logSeq
	}
	for {
		folded, gate := make(chan error, 1), &foldGate{}
		go func(it jetstream.MessagesContext) { folded <- m.fold(core, reads, &tip, it, gate) }(it)
		// A reader is given up without waiting for it to stop: stopping
		// a reader that is making its consumer again (the stream's leader
		// died) waits for that to end, seconds after the election, and
		// the member may be taking over meanwhile. The gate keeps what
		// it still delivers from being folded.
		abandon := func() error {
			gate.close()
			go it.Stop()
			select {
			case err := <-folded:
				return err
			default:
				return nil
			}
		}
		last, moved := at(), time.Now()
	watch:
		for {
			select {
			case err := <-folded:
				if err == nil {
					err = errors.New("cluster: the replicated log's reader closed")
				}
				return err
			case <-quit:
				return abandon()
			case <-check.C:
			}
			if now := at(); now != last {
				last, moved = now, time.Now()
				continue
			}
			if quiet := time.Since(moved); quiet < stall && (quiet < hurried || !m.catching.Load()) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := m.logs.Info(ctx)
			cancel()
			if err != nil || info.State.LastSeq <= last {
				moved = time.Now() // nothing to follow, or no one to ask: not a stall
				continue
			}
			m.log.Warn("the replicated log's reader delivered nothing while the log holds more: reading it anew",
				"folded", last, "log_last", info.State.LastSeq, "for", time.Since(moved).Round(time.Millisecond))
			break watch
		}
		if err := abandon(); err != nil {
			return err
		}
		// A request sent while the cluster elects a leader (the stream's,
		// or JetStream's own) is never answered: each is given little
		// time, and sent again soon.
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			next, err := m.consume(ctx, at()+1)
			cancel()
			if err == nil {
				it = next
				break
			}
			m.log.Info("read the replicated log anew: trying again", "err", err)
			select {
			case <-quit:
				return nil
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
}

// fold folds each message of the log that continues tip into core
// through reads, and
// moves tip, until the iterator stops. A message that does not continue
// it is skipped: a deposed leader's orphan (see replog), or one folded
// already.
func (m *Member) fold(core *coordinator.Core, reads *coordinator.Standby, tip *link, it jetstream.MessagesContext, gate *foldGate) error {
	for {
		msg, err := it.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cluster: read the replicated log: %w", err)
		}
		if folded, err := m.foldOne(core, reads, tip, msg, gate); !folded || err != nil {
			return err
		}
		select {
		case m.progress <- struct{}{}:
		default:
		}
	}
}

// foldGate shuts a reader's folding: once closed, nothing it delivers is
// folded.
type foldGate struct {
	mu   sync.Mutex
	shut bool
}

// close returns once no message is being folded, and none will be.
func (g *foldGate) close() {
	g.mu.Lock()
	g.shut = true
	g.mu.Unlock()
}

// foldOne folds msg, unless gate is shut (folded false).
func (m *Member) foldOne(core *coordinator.Core, reads *coordinator.Standby, tip *link, msg jetstream.Msg, gate *foldGate) (folded bool, err error) {
	gate.mu.Lock()
	defer gate.mu.Unlock()
	if gate.shut {
		return false, nil
	}
	meta, err := msg.Metadata()
	if err != nil {
		return false, fmt.Errorf("cluster: read the replicated log: %w", err)
	}
	ok, err := tip.continues(msg.Headers())
	if err != nil {
		return false, fmt.Errorf("cluster: message %d of the replicated log: %w", meta.Sequence.Stream, err)
	}
	if ok || m.opts.Bugs != nil && m.opts.Bugs.UnchainedReads {
		evs, err := eventlog.DecodeGroup(msg.Data())
		if err != nil {
			return false, fmt.Errorf("cluster: message %d of the replicated log: %w", meta.Sequence.Stream, err)
		}
		if err := reads.Follow(evs); err != nil {
			return false, fmt.Errorf("cluster: message %d of the replicated log: %w", meta.Sequence.Stream, err)
		}
		if last := evs[len(evs)-1]; last.Seq > tip.seq {
			*tip = link{seq: last.Seq, id: last.ID}
		}
	} else {
		first, last, _ := logRange(msg.Headers())
		m.log.Warn("skipped a message of the replicated log that does not continue the log read so far: a deposed coordinator's group, stored after another's, or one read already",
			"message", meta.Sequence.Stream, "first", first, "last", last, "continues", msg.Headers().Get(headerPrev), "log_ends_at", tip.seq)
	}
	m.mu.Lock()
	m.mu.seq, m.mu.logSeq, m.mu.folded = core.Engine().Seq(), meta.Sequence.Stream, meta.Timestamp
	m.mu.Unlock()
	return true, nil
}
