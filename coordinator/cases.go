package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go/jetstream"
)

// caseQueue keeps the arbiters' queue (COAGENT_ARBITER) to the cases still
// open: a case leaves it when it settles, by an arbiter's resolution, the
// fallback at its deadline, or its intent's final decision otherwise, so
// that an arbiter started later is not handed cases nobody can resolve.
//
// The subject of every case is the one SPEC §6 names, so a case is
// removed by its stream sequence (STREAM.MSG.DELETE), which its PubAck
// gives. The map from case to sequence lives in this process only; at
// start it is rebuilt from the stream itself (load), which holds only
// cases that were open when they were sent, few and bounded by
// ArbiterTimeout: the ones settled while no coordinator ran are removed
// then. A case an arbiter has taken and acknowledged has left the stream
// already; deleting it again is not an error.
//
// One goroutine (run) owns the map: the output stage sends it, in group
// order, the cases it published (with their PubAck futures) and the ids
// settled, so a case's sequence is always known before its settlement is
// handled. It ends when ops is closed.
type caseQueue struct {
	svc    *Service
	stream jetstream.Stream // set by load
	ops    chan caseOp
	done   chan struct{}
	seqs   map[string]uint64 // run-owned: case id → stream sequence
}

// caseOp is a case published (ack set) or a case settled.
type caseOp struct {
	id  string
	ack jetstream.PubAckFuture
}

func newCaseQueue(s *Service) *caseQueue {
	return &caseQueue{svc: s, ops: make(chan caseOp, 1024), done: make(chan struct{}), seqs: map[string]uint64{}}
}

// load reads the arbiters' queue at start: a case still open (open
// reports it) is noted with its sequence, and left where it is; any other
// is removed. It returns the ids of the open cases it found, which need
// not be sent again. It runs before run starts.
func (q *caseQueue) load(ctx context.Context, open func(id string) bool) (map[string]bool, error) {
	s := q.svc
	stream, err := s.js.Stream(ctx, s.subj.Stream(intents.StreamArbiter))
	if err != nil {
		return nil, err
	}
	q.stream = stream
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	found := map[string]bool{}
	if info.State.Msgs == 0 {
		return found, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // taken by an arbiter, or removed
		}
		if err != nil {
			return nil, err
		}
		id := m.Header.Get(jetstream.MsgIDHeader)
		if id != "" && open(id) && !found[id] {
			found[id] = true
			q.seqs[id] = seq
			continue
		}
		// Settled, or a second copy of an open case (sent again at a
		// restart past the duplicate window).
		if err := stream.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, err
		}
	}
	return found, nil
}

// published notes a case sent to the queue; ack is its PubAck (nil if the
// publish failed).
func (q *caseQueue) published(id string, ack jetstream.PubAckFuture) {
	if ack != nil {
		q.send(caseOp{id: id, ack: ack})
	}
}

// settled removes the case id from the queue, if it is there.
func (q *caseQueue) settled(id string) { q.send(caseOp{id: id}) }

// send hands op to run without ever holding up the output stage, which
// calls it: with JetStream stalled, run waits on acknowledgements and its
// queue fills, and a reply must not wait for a case's bookkeeping. What
// does not fit is only a settled case left on the queue, which an
// arbiter's resolution then finds settled, as before cases left it.
func (q *caseQueue) send(op caseOp) {
	select {
	case q.ops <- op:
	default:
		q.svc.log.Warn("the arbiters' queue keeper is behind; a case stays on the queue when it settles", "escalation", op.id)
	}
}

// caseAckWait bounds the wait for a case's PubAck.
const caseAckWait = 10 * time.Second

func (q *caseQueue) run() {
	defer close(q.done)
	s := q.svc
	for op := range q.ops {
		if op.ack != nil {
			select {
			case a := <-op.ack.Ok():
				q.seqs[op.id] = a.Sequence // a duplicate's is the first copy's
			case err := <-op.ack.Err():
				s.log.Warn("an arbiter case was not queued", "escalation", op.id, "err", err)
			case <-time.After(caseAckWait):
				s.log.Warn("an arbiter case was not acknowledged by JetStream in time; it stays on the queue when it settles",
					"escalation", op.id, "wait", caseAckWait)
			}
			continue
		}
		seq, ok := q.seqs[op.id]
		if !ok {
			continue
		}
		delete(q.seqs, op.id)
		ctx, cancel := context.WithTimeout(context.Background(), caseAckWait)
		err := q.stream.DeleteMsg(ctx, seq)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful):
			// The server refused: nearly always because the message is
			// gone already, an arbiter having taken and acknowledged it
			// (the server says so only in prose).
			s.log.Debug("a settled case was not on the arbiters' queue", "escalation", op.id, "seq", seq, "err", err)
		case err != nil:
			s.log.Warn("a settled case stays on the arbiters' queue", "escalation", op.id, "seq", seq, "err", err)
		}
	}
}
