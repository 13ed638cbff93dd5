package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The change feed, COAGENT_EVENTS, carries each change once per board it
// wrote to, in the log's order, and a watcher resumes from a revision
// (SPEC §6): a change missing from it is a change some watcher never
// sees. To cost an intent little, the feeder holds a group's changes for
// the groups that follow within feedLinger and puts them in one message
// per board (intents.FeedMessage), and most messages go out without
// waiting for JetStream or asking for an acknowledgement (what each of
// these saved is in docs/performance.md). So a message the stream did not
// take must show otherwise: while a stream's leader moves (a NATS node
// restarted), what is sent to it is dropped, and the messages after it
// are stored. So each message expects the stream's last sequence to be
// the one before it (Nats-Expected-Last-Sequence): once one is dropped,
// every later one is refused too, the stream holds a prefix of what was
// sent, and the next acknowledged message says so. The feeder then mends
// the feed from the log: it reads the feed's last change and publishes
// again every change of the log after it. It runs on its own goroutine, so
// that neither mending nor a stream that does not answer holds up the
// replies.

// feedAckEvery is how many changes in a row go on the feed without asking
// for an acknowledgement.
const feedAckEvery = 63

// feedQueue bounds the groups' changes waiting for the feeder; past it,
// the output stage drops them and the feeder mends the feed from the log.
const feedQueue = 1024

// mendBack bounds how many messages a mend reads back from the feed's end
// to find its last change.
const mendBack = 64

// mendEvery bounds how often the feeder tries to mend the feed while the
// stream does not answer.
const mendEvery = 250 * time.Millisecond

// feeder puts changes on the change feed, in order and without gaps.
type feeder struct {
	s  *Service
	in chan []*intents.Event
	// behind is set when the output stage dropped changes (in was full).
	behind chan struct{}
	done   chan struct{}

	// Owned by run.
	last    uint64 // the stream sequence of the last message sent
	sent    uint64 // the revision of the last change sent
	unacked int    // messages sent since the last acknowledged one
	pending []feedAck
	broken  error // the feed lacks what was sent: mend it
	// started is set by the first mend; floor is the revision the feed
	// need not carry changes up to, when it was empty then.
	started bool
	floor   uint64
	// prev is the revision of the last change of the last message sent,
	// and boards the same per board, as far as known since the last
	// mend: the chain of the messages (intents.FeedMessage). st is the
	// feed's stream, once a mend found it.
	prev   uint64
	boards map[string]uint64
	st     jetstream.Stream
	quiet  time.Time // no lookup of a board's last message before
	// gap is the planted bug feed-gap: the next mend skips a change.
	gap bool
	// build is where a message is built, kept from one to the next:
	// grown by append from nothing, each message would allocate about
	// twice its size; finish copies it out at its size.
	build []byte
}

// feedAck is an acknowledged message on its way: it should be stored as
// message want.
type feedAck struct {
	f    jetstream.PubAckFuture
	want uint64
}

func newFeeder(s *Service) *feeder {
	return &feeder{s: s, in: make(chan []*intents.Event, feedQueue), behind: make(chan struct{}, 1),
		done: make(chan struct{}), boards: map[string]uint64{}, gap: s.planted().FeedGap}
}

// add hands a group's changes to the feeder, or, if it is that far
// behind, drops them and tells it to mend the feed from the log.
func (f *feeder) add(changes []*intents.Event) {
	if len(changes) == 0 {
		return
	}
	select {
	case f.in <- changes:
	default:
		select {
		case f.behind <- struct{}{}:
		default:
		}
	}
}

// run publishes what add hands it until in is closed: the changes of the
// groups that come within feedLinger of the first, together. Once the
// feed lacks what was sent, what comes is dropped, and the feed is mended
// from the log at the next tick, and at every tick after until the stream
// answers.
func (f *feeder) run() {
	defer close(f.done)
	tick := time.NewTicker(mendEvery)
	defer tick.Stop()
	linger := time.NewTimer(feedLinger)
	linger.Stop()
	var (
		held    []*intents.Event
		lingerC <-chan time.Time
	)
	flush := func() {
		if f.reap(); f.broken == nil && len(held) > 0 {
			f.publish(held)
		}
		held, lingerC = held[:0], nil
		linger.Stop()
	}
	for {
		select {
		case changes, ok := <-f.in:
			if !ok {
				if flush(); f.broken != nil {
					f.mend()
				}
				return
			}
			held = append(held, changes...)
			switch {
			case len(held) >= feedHoldMax:
				flush()
			case lingerC == nil:
				linger.Reset(feedLinger)
				lingerC = linger.C
			}
		case <-lingerC:
			flush()
		case <-f.behind:
			f.broken = errors.New("the feeder fell behind the log")
		case <-tick.C:
			if f.reap(); f.broken != nil {
				f.mend()
			}
		}
	}
}

// feedLinger is how long the feeder holds a group's changes for the
// groups after it, so that they share the feed's messages: the server
// stores a message with a write of its own, and wakes for each.
// feedHoldMax bounds the changes it holds.
const (
	feedLinger  = 2 * time.Millisecond
	feedHoldMax = 1024
)

// feedLookupPause is how long the feeder does not ask the stream for a
// board's last message after it failed to answer.
const feedLookupPause = 5 * time.Second

// feedBatchBytes bounds the changes one feed message carries, so that it
// stays well within the server's max_payload (1 MB by default); a change
// larger than it goes alone.
const feedBatchBytes = 128 << 10

// publish sends the changes after the last sent: in runs of one board, each
// a message on the board's subject (intents.FeedMessage), a change that
// wrote to several boards in a message of each, one after the other. The
// runs keep the log's order across boards, so a watcher of every board
// sees each revision in order, once it skips the ones it has.
func (f *feeder) publish(changes []*intents.Event) {
	var (
		prev    *nats.Msg
		m       feedMsg // the message being built
		scratch []byte  // each change's encoding, until m copies it
	)
	flush := func() {
		if m.n == 0 {
			return
		}
		if prev != nil {
			f.send(prev, false)
		}
		prev = f.finish(&m)
	}
	for _, ev := range changes {
		if f.broken != nil {
			return
		}
		if ev.Seq <= f.sent {
			continue // sent by a mend
		}
		data, err := intents.AppendEventJSON(scratch[:0], f.s.anyone().change(ev))
		if err != nil {
			f.s.log.Error("encode event", "seq", ev.Seq, "err", err)
			continue
		}
		for _, b := range ev.Change.Boards() {
			if m.n > 0 && (b != m.board || len(m.buf)+len(data) > feedBatchBytes) {
				flush()
			}
			if m.n == 0 {
				f.start(&m, b)
			}
			m.add(ev.Seq, data)
		}
		scratch = data
		f.sent = ev.Seq
	}
	flush()
	if prev != nil {
		f.send(prev, true)
	}
}

// feedMsg is a change feed message being built: changes of one board.
type feedMsg struct {
	board string
	buf   []byte
	n     int    // changes in buf
	last  uint64 // the revision of the last
}

// start begins m as the next message on board's subject, chained to the
// feed's last message and to the board's (intents.FeedMessage).
func (f *feeder) start(m *feedMsg, board string) {
	m.board, m.n, m.last = board, 0, 0
	m.buf = append(f.build[:0], `{"prev":`...)
	m.buf = strconv.AppendUint(m.buf, f.prev, 10)
	m.buf = append(m.buf, `,"board_prev":`...)
	m.buf = strconv.AppendUint(m.buf, f.boardPrev(board), 10)
	m.buf = append(m.buf, `,"changes":[`...)
}

func (m *feedMsg) add(rev uint64, change []byte) {
	if m.n > 0 {
		m.buf = append(m.buf, ',')
	}
	m.buf, m.n, m.last = append(m.buf, change...), m.n+1, rev
}

// finish ends m and returns it as a message, the last of the chain from
// then on.
func (f *feeder) finish(m *feedMsg) *nats.Msg {
	f.prev, f.boards[m.board] = m.last, m.last
	data := make([]byte, len(m.buf)+len("]}"))
	copy(data[copy(data, m.buf):], "]}")
	if cap(m.buf) <= 2*feedBatchBytes {
		f.build = m.buf[:0] // a change larger than a message's bound grows it past: let that go
	}
	msg := &nats.Msg{Subject: f.s.subj.EventsChange(m.board), Data: data}
	*m = feedMsg{}
	return msg
}

// boardPrev is the revision of the last change on board's subject: as
// sent since the last mend, or else as the stream holds it. 0 if there is
// none, or the stream could not say (a watcher then has no chain to check
// at this message). A stream that does not answer is not asked again
// for feedLookupPause, so that it cannot hold up the feed a second per
// board.
func (f *feeder) boardPrev(board string) uint64 {
	if rev, ok := f.boards[board]; ok || f.st == nil || time.Now().Before(f.quiet) {
		return rev
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m, err := f.st.GetLastMsgForSubject(ctx, f.s.subj.EventsChange(board))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		f.boards[board] = 0
		return 0
	}
	if err != nil {
		f.s.log.Warn("the change feed's last message on a board could not be read; new boards' messages go unchained to their board for a while", "board", board, "err", err, "for", feedLookupPause)
		f.quiet = time.Now().Add(feedLookupPause)
		return 0
	}
	evs, err := intents.DecodeFeed(m.Data)
	if err != nil {
		return 0
	}
	rev := evs[len(evs)-1].Seq
	f.boards[board] = rev
	return rev
}

// send sends m as the stream's next message, asking for an
// acknowledgement if last, or if feedAckEvery went without.
func (f *feeder) send(m *nats.Msg, last bool) {
	if f.broken != nil {
		return
	}
	expect := f.last
	f.last++
	if !last && f.unacked < feedAckEvery {
		f.unacked++
		m.Header = nats.Header{jetstream.ExpectedLastSeqHeader: []string{strconv.FormatUint(expect, 10)}}
		if err := f.s.pub.PublishMsg(m); err != nil {
			f.broken = fmt.Errorf("publish on %s: %w", m.Subject, err)
		}
		return
	}
	f.unacked = 0
	ack, err := f.s.feed.PublishMsgAsync(m, jetstream.WithExpectLastSequence(expect))
	if err != nil {
		f.broken = fmt.Errorf("publish on %s: %w", m.Subject, err)
		return
	}
	f.pending = append(f.pending, feedAck{f: ack, want: f.last})
}

// reap takes the acknowledgements that came, in order, and notes the first
// that says the stream did not store its message where expected.
func (f *feeder) reap() {
	n := 0
	for _, p := range f.pending {
		var err error
		select {
		case ack := <-p.f.Ok():
			if ack.Sequence != p.want {
				err = fmt.Errorf("stored as message %d, where %d was expected", ack.Sequence, p.want)
			}
		case err = <-p.f.Err():
		default:
			f.pending = f.pending[:copy(f.pending, f.pending[n:])]
			return
		}
		n++
		if err != nil && f.broken == nil {
			f.broken = err
		}
	}
	f.pending = f.pending[:0]
}

// mend reads the feed's last change and publishes every change of the log
// after it, the rest of that change's paths first. It leaves broken set if
// the stream did not answer.
func (f *feeder) mend() {
	s := f.s
	cause := f.broken
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f.pending, f.unacked = f.pending[:0], 0
	lg := s.core.Log()
	st, err := s.js.Stream(ctx, s.subj.Stream(intents.StreamEvents))
	if err != nil {
		f.broken = fmt.Errorf("read the feed: %w", err)
		return
	}
	// What was sent since the last mend may not be on the feed: the
	// chain goes on from what the stream holds.
	f.st, f.prev = st, 0
	clear(f.boards)
	end := lg.LastSeq() // durable: what the feed may carry
	info, err := st.Info(ctx)
	if err != nil {
		f.broken = fmt.Errorf("read the feed: %w", err)
		return
	}
	m, err := st.GetLastMsgForSubject(ctx, s.subj.EventsChange(">"))
	var last intents.Event
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		// An empty feed is a new one (or one whose changes all aged out)
		// when the feeder starts: nobody watching it can have seen
		// anything to continue from. Later, it lost what this feeder sent.
		f.last = info.State.LastSeq
		if !f.started {
			f.started, f.sent, f.floor, f.broken = true, max(f.sent, end), max(f.sent, end), nil
			return
		}
		last.Seq = f.floor
		m = nil
	case err != nil:
		f.broken = fmt.Errorf("read the feed's last message: %w", err)
		return
	default:
		f.last = max(info.State.LastSeq, m.Sequence)
	}
	f.started = true
	// The last change on the feed: the last message's, unless another
	// wrote after it what is not a feed message.
	for back := 0; m != nil; back++ {
		evs, err := intents.DecodeFeed(m.Data)
		if err == nil {
			last = *evs[len(evs)-1]
			break
		}
		if back == mendBack || m.Sequence <= info.State.FirstSeq {
			s.log.Error("the change feed's last messages are not changes; the feed goes on after the log's end", "subject", m.Subject, "sequence", m.Sequence, "err", err)
			f.sent, f.broken = max(f.sent, end), nil
			return
		}
		prev, err := st.GetMsg(ctx, m.Sequence-1)
		if err != nil {
			f.broken = fmt.Errorf("read the feed's message %d: %w", m.Sequence-1, err)
			return
		}
		m = prev
	}
	f.sent, f.broken = min(last.Seq, end), nil
	if m != nil {
		f.prev = last.Seq
	}
	if m != nil && last.Change != nil {
		// A change that wrote to several boards goes in a message of
		// each: send those that did not go. (The subject of a wire v2
		// message names a path of the board.)
		boards := last.Change.Boards()
		board := intents.Board(strings.TrimPrefix(m.Subject, s.subj.EventsChange("")))
		if i := slices.Index(boards, board); i >= 0 && i < len(boards)-1 {
			data, err := json.Marshal(&last)
			if err == nil {
				for _, rest := range boards[i+1:] {
					var fm feedMsg
					f.start(&fm, rest)
					fm.add(last.Seq, data)
					f.send(f.finish(&fm), false)
				}
			}
		}
	}
	from, n := last.Seq+1, 0
	if from <= end {
		// In runs, each acknowledged at its end, as the groups' are.
		run := make([]*intents.Event, 0, feedAckEvery+1)
		err = lg.Scan(max(from, lg.FirstSeq()), end, func(ev *intents.Event) error {
			if ev.Type != intents.EventChange {
				return nil
			}
			if f.gap {
				f.gap, f.sent = false, ev.Seq
				return nil
			}
			if run = append(run, ev); len(run) == cap(run) {
				f.publish(run)
				run = run[:0]
			}
			n++
			return nil
		})
		f.publish(run)
	}
	f.sent = max(f.sent, end)
	if err != nil {
		s.log.Error("the change feed could not be mended from the log; it goes on after the log's end", "from", from, "err", err)
	}
	if cause != nil || n > 0 {
		s.log.Info("the change feed caught up with the log", "from", from, "changes", n, "cause", errString(cause))
	}
}

// errString is err's text, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
