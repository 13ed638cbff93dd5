package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/bugs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The replicated log of record (SPEC §10): in a cluster every durable
// group is one message of COAGENT_LOG, appended by the active coordinator
// before its own Pebble log writes it (eventlog.EnqueueAfter), so that a
// local log is never ahead of the stream: a crash between the two writes
// leaves it behind, and it catches up from the stream. Each append expects
// the stream's last sequence to be the one before it
// (Nats-Expected-Last-Sequence): only one writer can ever extend the log,
// which is what fences a deposed leader.
//
// Appends are pipelined, and there the sequence alone falls short: of a
// deposed leader's two groups in flight, the first fails on the message
// the new leader appended, and the second, which expects the sequence
// after it, lands on top of it, continuing events the log does not hold.
// So a leader whose lease has lapsed (it was paused, or cut off) sends a
// group only once the one before it is stored. The id of the message
// before (Nats-Expected-Last-Msg-Id) would close the hole for good, but
// nats-server (2.15.2) checks it on every replica and does not set it on
// one that caught up from the leader, which then refuses every message
// that carries it: a restarted node never became current again.

// ErrFenced is returned (wrapped) when an append to the replicated log
// was refused or went unconfirmed: another coordinator appended first, or
// the stream did not say it stored the group. Nothing of the group, nor of
// what was decided after it, is answered; the coordinator stops being the
// active one and follows the log again.
var ErrFenced = errors.New("coordinator: the replicated log did not take the group")

// ErrAhead is returned (wrapped) when a coordinator's own log holds
// events the replicated log does not: it cannot follow that log.
var ErrAhead = errors.New("coordinator: the event log is ahead of the replicated log")

// errLogEmpty is logPosition's error when the replicated log is empty and
// this coordinator's own is not: a coordinator that ran alone, now the
// first of a cluster. It may follow (from the start), and seeds the
// replicated log with its own once it leads.
var errLogEmpty = fmt.Errorf("%w: the replicated log is empty", ErrAhead)

// seedChunk bounds the bytes of one message when a log seeds the
// replicated log, well under the stream's maximum message size.
const seedChunk = 1 << 20

// seed appends the whole of log to an empty replicated log, in messages
// of consecutive events of at most seedChunk bytes (half the server's
// max_payload, if that is less), and returns the
// stream sequence of the last. The first append expects an empty stream,
// so a seed can never land on top of another's.
func seed(ctx context.Context, js jetstream.JetStream, subject string, log *eventlog.Log) (uint64, error) {
	if log.FirstSeq() > 1 {
		return 0, fmt.Errorf("this coordinator's log starts at event %d (compacted), so it cannot seed the replicated log: start the cluster from a log that was never compacted, or from empty directories", log.FirstSeq())
	}
	// A server may take less than the stream would (its max_payload).
	chunk := min(seedChunk, int(js.Conn().MaxPayload())/2)
	var last uint64
	var evs []*intents.Event
	size := 0
	flush := func() error {
		if len(evs) == 0 {
			return nil
		}
		m := nats.NewMsg(subject)
		m.Data = eventlog.AppendGroup(nil, evs)
		m.Header.Set(headerFirst, strconv.FormatUint(evs[0].Seq, 10))
		m.Header.Set(headerLast, strconv.FormatUint(evs[len(evs)-1].Seq, 10))
		ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequence(last))
		if err != nil {
			return fmt.Errorf("%w: seed events %d–%d: %w", ErrFenced, evs[0].Seq, evs[len(evs)-1].Seq, err)
		}
		last, evs, size = ack.Sequence, evs[:0], 0
		return nil
	}
	err := log.Scan(1, log.LastSeq(), func(ev *intents.Event) error {
		n := len(eventlog.AppendEvent(nil, ev))
		if size+n > chunk {
			if err := flush(); err != nil {
				return err
			}
		}
		evs, size = append(evs, ev), size+n
		return nil
	})
	if err == nil {
		err = flush()
	}
	return last, err
}

// The headers of a log message: the seqs of its first and last events, so
// that a reader can find where to start without decoding the groups.
const (
	headerFirst = "Coagent-First"
	headerLast  = "Coagent-Last"
)

// logStreamConfig is COAGENT_LOG's configuration.
func logStreamConfig(subj intents.Subjects, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: subj.Stream(intents.StreamLog), Subjects: []string{subj.Log()},
		Description: "the replicated event log of the coordinators: one message per durable group",
		Retention:   jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Replicas: replicas,
		MaxMsgSize: MaxWireMessage, Discard: jetstream.DiscardNew,
		// A group sent again while the stream's leader moved is known by
		// its id for this long, and stored once.
		Duplicates: 2 * time.Minute}
}

// replog appends groups to COAGENT_LOG; the loop's, through the Core.
type replog struct {
	js      jetstream.JetStream
	subject string
	// last is the stream sequence of the last group appended, or of the
	// stream's last message when the coordinator became active.
	last uint64
	// leased reports whether the member's lease is in force; while it is
	// not, appends are not pipelined (see above). Nil: always.
	leased func() bool
	// planted is the bugs of Options.Bugs that an append plants.
	planted bugs.Set
	// prev is the outcome of the last group appended, which the next one
	// waits for before it sends itself again.
	prev *appended
}

// appended is the outcome of one append, once done is closed.
type appended struct {
	done chan struct{}
	err  error
}

// appendTimeout bounds how long a group waits for the stream to confirm
// it: past it the group is not answered, and the coordinator steps down.
// resendAfter is how long it waits for one confirmation before it sends
// the group again: a message sent to a stream leader that died is never
// answered, and the new one needs it again.
const (
	appendTimeout = 10 * time.Second
	resendAfter   = time.Second
)

// append publishes the events of one group as the next message of the log
// and returns a channel that yields once: nil when the stream stored it
// where expected, an ErrFenced error otherwise.
//
// Appends are pipelined, each expecting the one before it. While the
// stream's leader moves (a node died), a group is sent again, under the
// same message id, so that one stored already is not stored twice (the
// stream answers a duplicate with its sequence); a group that found the
// stream one short, because the group before it was being sent again,
// waits for that one and is sent again once. Whatever else the stream
// says — a sequence taken by another writer, a group before it that
// failed — fails the group, and with it every later one.
func (r *replog) append(evs []*intents.Event) (<-chan error, error) {
	first, last := evs[0].Seq, evs[len(evs)-1].Seq
	data := eventlog.AppendGroup(nil, evs)
	id := groupID(evs)
	expect := r.last
	publish := func() (jetstream.PubAckFuture, error) {
		m := nats.NewMsg(r.subject)
		m.Data = data
		m.Header.Set(headerFirst, strconv.FormatUint(first, 10))
		m.Header.Set(headerLast, strconv.FormatUint(last, 10))
		if r.planted.UnfencedAppends {
			return r.js.PublishMsgAsync(m, jetstream.WithMsgID(id))
		}
		return r.js.PublishMsgAsync(m, jetstream.WithExpectLastSequence(expect), jetstream.WithMsgID(id))
	}
	if prev := r.prev; prev != nil && r.leased != nil && !r.leased() && !r.planted.PipelineLapsed {
		<-prev.done
		if prev.err != nil {
			return nil, fmt.Errorf("%w: append events %d–%d: the group before it was not stored", ErrFenced, first, last)
		}
	}
	f, err := publish()
	if err != nil {
		return nil, fmt.Errorf("%w: append events %d–%d: %w", ErrFenced, first, last, err)
	}
	r.last++
	want, prev := r.last, r.prev
	res := &appended{done: make(chan struct{})}
	r.prev = res
	ready := make(chan error, 1)
	go func() {
		res.err = r.confirm(f, publish, prev, want, first, last)
		close(res.done)
		ready <- res.err
	}()
	return ready, nil
}

// groupID is the message id of the group evs in the replicated log. It is
// this group's alone: its first event's id is unique to the coordinator
// that decided it, so a deposed leader's group of the same seqs is never
// taken for this one.
func groupID(evs []*intents.Event) string {
	return fmt.Sprintf("%x-%d", evs[0].ID[:], evs[len(evs)-1].Seq)
}

// confirm waits for the group's confirmation, sending it again as append
// says, and returns nil once the stream stored it as message want.
func (r *replog) confirm(f jetstream.PubAckFuture, publish func() (jetstream.PubAckFuture, error), prev *appended, want, first, last uint64) error {
	fenced := func(format string, args ...any) error {
		return fmt.Errorf("%w: events %d–%d as message %d: %s", ErrFenced, first, last, want, fmt.Sprintf(format, args...))
	}
	deadline := time.Now().Add(appendTimeout)
	short := 0 // times the stream was found one short after prev was done
	for {
		var err error
		wait := time.NewTimer(resendAfter)
		select {
		case ack := <-f.Ok():
			wait.Stop()
			if ack.Sequence != want {
				return fenced("stored as message %d of %s", ack.Sequence, ack.Stream)
			}
			return nil
		case err = <-f.Err():
			wait.Stop()
		case <-wait.C:
			err = errUnconfirmed
		}
		switch {
		case wrongLast(err):
			if prev != nil {
				<-prev.done
				if prev.err != nil {
					return fenced("the group before it was not stored")
				}
			}
			if short++; short > 1 || prev == nil {
				return fenced("%v", err)
			}
		case !transient(err):
			return fenced("%v", err)
		}
		if time.Now().After(deadline) {
			return fenced("not confirmed within %s: %v", appendTimeout, err)
		}
		if f, err = publish(); err != nil {
			return fenced("%v", err)
		}
	}
}

// errUnconfirmed is confirm's: no answer within resendAfter.
var errUnconfirmed = errors.New("no confirmation yet")

// wrongLast reports whether the stream refused a message because its last
// sequence was not the one expected.
func wrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// transient reports whether an append may succeed if sent again: nobody
// answered (no leader yet), or JetStream said it cannot now.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503
	}
	return errors.Is(err, errUnconfirmed) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, nats.ErrTimeout)
}

// logRange returns the seqs of the first and last events of a log
// message, from its headers.
func logRange(h nats.Header) (first, last uint64, err error) {
	first, err1 := strconv.ParseUint(h.Get(headerFirst), 10, 64)
	last, err2 := strconv.ParseUint(h.Get(headerLast), 10, 64)
	if err := errors.Join(err1, err2); err != nil || first == 0 || last < first {
		return 0, 0, fmt.Errorf("log message headers %s=%q %s=%q: want two event seqs, first ≤ last", headerFirst, h.Get(headerFirst), headerLast, h.Get(headerLast))
	}
	return first, last, nil
}

// logPosition returns the stream sequence of the message that holds event
// after+1, the first a log ending at event after lacks: the stream's next
// sequence when it has nothing after. It searches the stream by halves,
// reading one message a step. It fails if the stream no longer holds that
// event (trimmed below it), or if the log ends inside a message, which no
// writer makes.
func logPosition(ctx context.Context, st jetstream.Stream, after uint64) (uint64, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	lo, hi := info.State.FirstSeq, info.State.LastSeq
	if info.State.Msgs == 0 {
		if after > 0 {
			return hi + 1, fmt.Errorf("%w: this coordinator's log ends at event %d", errLogEmpty, after)
		}
		return hi + 1, nil
	}
	rangeAt := func(seq uint64) (uint64, uint64, error) {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			return 0, 0, fmt.Errorf("read log message %d: %w", seq, err)
		}
		return logRange(m.Header)
	}
	first, _, err := rangeAt(lo)
	if err != nil {
		return 0, err
	}
	if first > after+1 {
		return 0, fmt.Errorf("%w: the replicated log starts at event %d, and this coordinator's log ends at %d", eventlog.ErrCompacted, first, after)
	}
	// The answer is the first message whose last event is past after.
	for lo < hi {
		mid := lo + (hi-lo)/2
		_, last, err := rangeAt(mid)
		if err != nil {
			return 0, err
		}
		if last > after {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	first, last, err := rangeAt(lo)
	if err != nil {
		return 0, err
	}
	switch {
	case last < after:
		return 0, fmt.Errorf("%w: this coordinator's log ends at event %d, past the replicated log's last (%d): it holds another history; give it an empty data directory to join", ErrAhead, after, last)
	case last == after:
		return lo + 1, nil // nothing after
	case first != after+1:
		return 0, fmt.Errorf("the replicated log's message %d holds events %d–%d, and this coordinator's log ends at %d: they do not continue one another", lo, first, last, after)
	}
	return lo, nil
}
