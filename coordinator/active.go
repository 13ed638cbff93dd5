package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// Replicator stores each group the Core commits in a log of record before
// the Core's own log writes it (package coordinator/cluster's replicated
// log): the local log is then never ahead of the record, and a group is
// answered only once both have it.
type Replicator interface {
	// Replicate sends the events of one group, in the order the Core
	// commits them. The channel it returns yields once: nil when the
	// record holds the group, an error otherwise, which fails the group's
	// write and stops the Service (Service.Err). An error returned at once
	// fails the Core as well: nothing is decided after it.
	Replicate(evs []*intents.Event) (<-chan error, error)
}

// ErrAhead is returned (wrapped) when a coordinator's own log holds
// events a log of record does not: Core.Follow finds that an event it
// holds differs from the one it is handed, and a cluster member that its
// log ends past the replicated log's. It cannot follow that log.
var ErrAhead = errors.New("coordinator: the event log is ahead of the replicated log")

// Active is how a member of a cluster starts its Service as the active
// coordinator (StartActive).
type Active struct {
	// Node names the member: its answers are stamped with it, and it
	// answers reads on its own subjects too (intents.Subjects.NodeAPI).
	Node string
	// Leased reports whether the member's lease is in force; while it is
	// not, reads are refused and decisions answered unavailable, since
	// another member may have taken over. Nil: always.
	Leased func() bool
	// Setup, if positive, bounds each JetStream call that sets the streams
	// up: a stream electing a leader never answers one sent meanwhile, and
	// the member had rather start again.
	Setup time.Duration
	// Core, if set, is the Core the member followed the log of record
	// with, to decide with as it is rather than open the log again and
	// rebuild the engine (80–600 ms on a takeover). StartActive takes it,
	// setting the field to nil, once it gets that far; what it does not
	// take the caller closes.
	Core *Core
	// Replicator, if set, makes the Replicator of the Service's Core,
	// given the connection the Service publishes on (its replies and
	// appends go out together) and the Core's log, which the first group
	// continues. An error fails the start.
	Replicator func(pub *nats.Conn, log *eventlog.Log) (Replicator, error)
}

// Wait waits until the last group the Core committed or followed is
// durable, or ctx ends; nil if there is none.
func (c *Core) Wait(ctx context.Context) error {
	if c.pending == nil {
		return nil
	}
	return c.pending.Wait(ctx)
}

// snapshotWait bounds how long SaveSnapshot waits for the last group: a
// replicated one is given up by its Replicator within 10s.
const snapshotWait = 15 * time.Second

// SaveSnapshot commits what the loop has decided, waits for it to be
// durable and saves the engine's snapshot at its last event, if it is not
// saved yet, so that an export of the log taken next (eventlog.Export)
// holds it. It runs on the loop, and fails if the Service stopped first.
// Safe for concurrent use.
func (s *Service) SaveSnapshot(ctx context.Context) error {
	var err error
	if !s.call(ctx, func() {
		s.flush()
		err = s.core.snapshotNow(ctx)
	}) {
		return fmt.Errorf("coordinator: snapshot: %w", errUnavailable)
	}
	return err
}

// snapshotNow saves the engine's snapshot at its last event once that is
// durable, if it is not saved yet; the loop's, with nothing decided and
// not committed.
func (c *Core) snapshotNow(ctx context.Context) error {
	if c.failed != nil {
		return c.failed
	}
	if len(c.out) > 0 {
		return errors.New("coordinator: snapshot: events decided and not committed")
	}
	if c.pending != nil {
		waitCtx, cancel := context.WithTimeout(ctx, snapshotWait)
		err := c.pending.Wait(waitCtx)
		cancel()
		if err != nil {
			return fmt.Errorf("coordinator: snapshot: the last group: %w", err)
		}
	}
	if c.eng.Seq() == 0 || c.eng.Seq() == c.lastSnap {
		return nil
	}
	return c.snapshot()
}

// Holds reports whether the asker of a request whose reply subject is
// reply holds role under the board rules in force, as Options.Auth
// reads it (see viewerOf), and which agent it is ("" when the reply
// subject is no agent's inbox).
func (s *Service) Holds(reply, role string) (agent string, ok bool) {
	v := s.viewerOf(reply)
	return v.Agent, v.set.Holds(v.Viewer, role)
}
