package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// The replicated log of record (SPEC §10): in a cluster every durable
// group is one message of COAGENT_LOG, appended by the active coordinator
// before its own Pebble log writes it (eventlog.EnqueueAfter), so that a
// local log is never ahead of the stream: a crash between the two writes
// leaves it behind, and it catches up from the stream. Each append expects
// the stream's last sequence to be the one before it
// (Nats-Expected-Last-Sequence): only one writer can extend the log from
// where it read it, which is what fences a deposed leader.
//
// Appends are pipelined, and there the sequence alone falls short: of a
// deposed leader's two groups in flight, the first fails on the message
// the new leader appended, and the second, which expects the sequence
// after it, lands on top of it, continuing events the log does not hold.
// A leader paused with both groups handed to its connection sends them
// when it resumes, whatever it checks before. So each message also names
// the last event of the message it continues (Coagent-Prev), and the log
// is the chain of messages that each continue the one before: a reader
// skips a message that does not continue what it has read (an orphan),
// as every reader does, so that all fold the same log. The id of the
// message before, checked by the server (Nats-Expected-Last-Msg-Id),
// would keep orphans out of the stream, but nats-server (2.15.2) checks it
// on every replica and does not set it on one that caught up from the
// leader, which then refuses every message that carries it; and an
// expected sequence per subject refuses a message while another of its
// subject is in flight, which would end the pipelining.
//
// A leader whose lease has lapsed still sends a group only once the one
// before it is stored: it makes orphans rarer, and each costs the leader
// it fences a step down.

// ErrFenced is returned (wrapped) when an append to the replicated log
// was refused or went unconfirmed: another coordinator appended first, or
// the stream did not say it stored the group. Nothing of the group, nor of
// what was decided after it, is answered; the coordinator stops being the
// active one and follows the log again.
var ErrFenced = errors.New("cluster: the replicated log did not take the group")

// errLogEmpty is logPosition's error when the replicated log is empty and
// this coordinator's own is not: a coordinator that ran alone, now the
// first of a cluster. It may follow (from the start), and seeds the
// replicated log with its own once it leads.
var errLogEmpty = fmt.Errorf("%w: the replicated log is empty", coordinator.ErrAhead)

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
	var prev ulid.ULID
	var evs []*intents.Event
	size := 0
	flush := func() error {
		if len(evs) == 0 {
			return nil
		}
		m := logMsg(subject, evs, prev)
		ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequence(last))
		if err != nil {
			return fmt.Errorf("%w: seed events %d–%d: %w", ErrFenced, evs[0].Seq, evs[len(evs)-1].Seq, err)
		}
		last, prev, evs, size = ack.Sequence, evs[len(evs)-1].ID, evs[:0], 0
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
// that a reader can find where to start without decoding the groups, and
// the event it continues.
const (
	headerFirst = "Coagent-First"
	headerLast  = "Coagent-Last"
	// headerPrev names the last event of the message this one continues
	// (its id; the zero id before the log's first event). A message
	// without it, of a build before it, is judged by its seqs alone.
	headerPrev = "Coagent-Prev"
)

// logMsg is the log message of the group evs, which continues the event
// whose id is prev.
func logMsg(subject string, evs []*intents.Event, prev ulid.ULID) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = eventlog.AppendGroup(nil, evs)
	m.Header.Set(headerFirst, strconv.FormatUint(evs[0].Seq, 10))
	m.Header.Set(headerLast, strconv.FormatUint(evs[len(evs)-1].Seq, 10))
	m.Header.Set(headerPrev, prev.String())
	return m
}

// logStreamConfig is COAGENT_LOG's configuration.
func logStreamConfig(subj intents.Subjects, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: subj.Stream(intents.StreamLog), Subjects: []string{subj.Log()},
		Description: "the replicated event log of the coordinators: one message per durable group",
		Retention:   jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Replicas: replicas,
		MaxMsgSize: coordinator.MaxWireMessage, Discard: jetstream.DiscardNew,
		// A group sent again while the stream's leader moved is known by
		// its id for this long, and stored once.
		Duplicates: 2 * time.Minute}
}

// replog appends groups to COAGENT_LOG: the Replicator of the active
// member's Core, called on its Service's loop.
type replog struct {
	js      jetstream.JetStream
	subject string
	// last is the stream sequence of the last group appended, or of the
	// stream's last message when the coordinator became active.
	last uint64
	// tip is the id of the last event appended, or of the local log's
	// last when the coordinator became active: the next group continues it.
	tip ulid.ULID
	// leased reports whether the member's lease is in force; while it is
	// not, appends are not pipelined (see above). Nil: always.
	leased func() bool
	// prev is the outcome of the last group appended, which the next one
	// waits for before it sends itself again.
	prev *appended
}

var _ coordinator.Replicator = (*replog)(nil)

// newReplog returns the replog of a member that became active when the
// replicated log's last message was last, appending on pub (the Service's
// publishing connection) after the last event of log; leased is the
// member's lease (see replog.leased).
func newReplog(pub *nats.Conn, subject string, last uint64, log *eventlog.Log, leased func() bool) (*replog, error) {
	js, err := jetstream.New(pub, jetstream.WithPublishAsyncMaxPending(256), jetstream.WithPublishAsyncTimeout(appendTimeout))
	if err != nil {
		return nil, fmt.Errorf("cluster: jetstream: %w", err)
	}
	tip, err := logTip(log)
	if err != nil {
		return nil, fmt.Errorf("cluster: the event the replicated log continues: %w", err)
	}
	return &replog{js: js, subject: subject, last: last, tip: tip.id, leased: leased}, nil
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

// Replicate publishes the events of one group as the next message of the log
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
func (r *replog) Replicate(evs []*intents.Event) (<-chan error, error) {
	first, last := evs[0].Seq, evs[len(evs)-1].Seq
	msg := logMsg(r.subject, evs, r.tip)
	id := groupID(evs)
	expect := r.last
	publish := func() (jetstream.PubAckFuture, error) {
		// A fresh message each time: the client adds its headers to it.
		m := nats.NewMsg(r.subject)
		m.Data = msg.Data
		for k, v := range msg.Header {
			m.Header[k] = v
		}
		return r.js.PublishMsgAsync(m, jetstream.WithExpectLastSequence(expect), jetstream.WithMsgID(id))
	}
	if prev := r.prev; prev != nil && r.leased != nil && !r.leased() {
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
	r.tip = evs[len(evs)-1].ID
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
			// Stored where expected, but on top of the group before it
			// only if that one was stored: else it is an orphan, which
			// readers skip.
			if prev != nil {
				<-prev.done
				if prev.err != nil {
					return fenced("the group before it was not stored")
				}
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

// link is where a reader of the replicated log stands: the seq and id of
// the last event it has folded (zero: none).
type link struct {
	seq uint64
	id  ulid.ULID
}

// logTip returns the link at the end of log: the event the next message
// of the replicated log must continue.
func logTip(log *eventlog.Log) (link, error) {
	last := log.LastSeq()
	if last == 0 {
		return link{}, nil
	}
	ev, err := log.Event(last)
	if err != nil {
		return link{}, fmt.Errorf("read the log's last event: %w", err)
	}
	return link{seq: last, id: ev.ID}, nil
}

// continues reports whether the log message with headers h continues the
// log at l: its first event is the next one, and it names l's event as the
// one it continues. A message without headerPrev, of a build before it, is
// judged by its seqs alone.
func (l link) continues(h nats.Header) (bool, error) {
	first, _, err := logRange(h)
	if err != nil {
		return false, err
	}
	if first != l.seq+1 {
		return false, nil
	}
	p := h.Get(headerPrev)
	if p == "" {
		return true, nil
	}
	id, err := ulid.ParseStrict(p)
	if err != nil {
		return false, fmt.Errorf("log message header %s=%q: %w", headerPrev, p, err)
	}
	return id == l.id, nil
}

// aheadError says a coordinator's log ends past the replicated log's
// last event: the stream lost a tail this log holds (it was never synced
// to a quorum's disks, say, and their power went), or the log holds
// another history. Which one, only the log can tell: it holds the
// stream's last event, or another one of that seq.
type aheadError struct {
	local  uint64    // the last event of this coordinator's log
	last   uint64    // the replicated log's last event
	lastID ulid.ULID // its id
}

func (e *aheadError) Error() string {
	return fmt.Sprintf("%v: this coordinator's log ends at event %d, past the replicated log's last, %d", coordinator.ErrAhead, e.local, e.last)
}

func (e *aheadError) Unwrap() error { return coordinator.ErrAhead }

// positionWindow bounds how far from where the search by halves lands
// logPosition looks for the message that ends with its event. Orphans lie
// only where a leader was deposed, each right after the new leader's
// first message, so the search lands within a few messages of it.
const positionWindow = 32

// logPosition returns the stream sequence from which a reader whose log
// ends at tip reads the replicated log on: the one after the message that
// ends with tip's event, or of a message that names that event as the one
// it continues; the stream's next sequence when it has nothing after. It
// searches the stream by halves, reading one message a step, and then
// around where that lands: the orphans of deposed leaders (see above)
// break the order of seqs the search relies on. It fails if the stream no
// longer holds that event (trimmed below it), if the replicated log holds
// another event of that seq (another history), or if the log ends inside
// a message, which no writer makes.
func logPosition(ctx context.Context, st jetstream.Stream, tip link) (uint64, error) {
	after := tip.seq
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
	type msg struct {
		first, last uint64
		raw         *jetstream.RawStreamMsg
	}
	read := func(seq uint64) (msg, error) {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			return msg{}, fmt.Errorf("read log message %d: %w", seq, err)
		}
		first, last, err := logRange(m.Header)
		if err != nil {
			return msg{}, fmt.Errorf("log message %d: %w", seq, err)
		}
		return msg{first, last, m}, nil
	}
	start, err := read(lo)
	if err != nil {
		return 0, err
	}
	switch {
	case start.first > after+1:
		return 0, fmt.Errorf("%w: the replicated log starts at event %d, and this coordinator's log ends at %d", eventlog.ErrCompacted, start.first, after)
	case after == 0:
		return lo, nil
	}
	first, end := lo, hi
	// The first message whose last event is past after, were the seqs in
	// order.
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := read(mid)
		if err != nil {
			return 0, err
		}
		if m.last > after {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	var other, past bool
	for d := uint64(0); d < positionWindow; d++ {
		for _, seq := range [2]uint64{lo - 1 - d, lo + d} {
			if seq < first || seq > end { // below the first (or wrapped), or past the end
				continue
			}
			m, err := read(seq)
			if err != nil {
				return 0, err
			}
			past = past || m.last > after
			if ok, err := tip.continues(m.raw.Header); err == nil && ok && m.raw.Header.Get(headerPrev) != "" {
				return seq, nil // it names the event: the one before may be trimmed
			}
			if m.last != after {
				continue
			}
			evs, err := eventlog.DecodeGroup(m.raw.Data)
			if err != nil {
				return 0, fmt.Errorf("log message %d: %w", seq, err)
			}
			if evs[len(evs)-1].ID == tip.id {
				return seq + 1, nil
			}
			other = true
		}
	}
	switch {
	case other:
		return 0, fmt.Errorf("%w: event %d differs from the replicated log's: this log holds another history; give this coordinator an empty data directory to join", coordinator.ErrAhead, after)
	case !past:
		last, err := read(end)
		if err != nil {
			return 0, err
		}
		evs, err := eventlog.DecodeGroup(last.raw.Data)
		if err != nil {
			return 0, fmt.Errorf("log message %d: %w", end, err)
		}
		ev := evs[len(evs)-1]
		return 0, &aheadError{local: after, last: ev.Seq, lastID: ev.ID}
	}
	return 0, fmt.Errorf("no message of the replicated log near message %d ends with event %d or continues it: the log and this coordinator's do not continue one another", lo, after)
}
