package agents

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Change is one commit as far as it concerns a watched subtree.
type Change struct {
	Rev    uint64 // the commit's revision
	Time   time.Time
	Agent  string
	Intent string
	Txn    string
	// Writes are the commit's writes that overlap the subtree: inside it,
	// or to an ancestor that replaced it.
	Writes []intents.Applied
	// Redacted names what of Writes the board rules' readers keep from
	// this agent: a write's own path (its value is absent) or paths under
	// it (removed from its value).
	Redacted []string
}

// Watcher delivers the changes of a subtree in revision order.
type Watcher struct {
	ch     chan Change
	cancel context.CancelFunc
	done   chan struct{}

	filled atomic.Int64

	mu  sync.Mutex
	err error
}

// Filled is how many changes the watch has read from the log because the
// change feed lacked them: its messages are chained (each names the
// revision of the last change before it), and a message that follows one
// the watcher did not get makes it ask the log for what is missing. Another
// writer on the feed's stream (a deposed coordinator) can take a
// message's place; otherwise a feed that lacks a change is a fault of the
// coordinator's.
func (w *Watcher) Filled() int { return int(w.filled.Load()) }

// Changes is the stream of changes. It is closed when the watch ends: ctx
// ended, Stop was called, or an error (Err says which).
func (w *Watcher) Changes() <-chan Change { return w.ch }

// Err is why the watch ended, once Changes is closed: nil after Stop or
// the end of ctx.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Stop ends the watch and waits for it to let go of its resources.
func (w *Watcher) Stop() {
	w.cancel()
	<-w.done
}

// watchPage is how many events one catch-up query asks for.
const watchPage = 1000

// watchHeartbeat is how often a quiet feed consumer says it is alive; two
// missed in a row, and the watcher asks for a new consumer.
const watchHeartbeat = 5 * time.Second

// watchQuiet is how long the watcher waits for a feed message before it
// asks whether its consumer still exists and has nothing to deliver. The
// client's reader does not always report missed heartbeats: after a
// reconnection to another server it pulls again from a consumer that went
// away with the server it lived on, and waits for good.
const watchQuiet = 3 * watchHeartbeat

// Watch follows the commits that touch subtree ("" for the whole state)
// on the shard that owns its board when the watch begins (the whole
// state: the default shard's)
// from revision from on: every change with a revision above from, each
// once, in order, with no gaps. It first catches up from the coordinator's
// log (log.query), then follows the change feed on COAGENT_EVENTS through
// a consumer the coordinator makes for it (feed.follow: agents may pull
// from the feed but not make consumers of their own); it starts following
// the feed before it catches up, so no commit falls between the two. To
// resume after a restart of the watcher or the coordinator, pass the last
// revision seen.
//
// What the board rules' readers keep from this agent is not delivered:
// such a write comes without its value, and Change.Redacted names what is
// kept. (The feed itself carries only what every agent may read; a change
// it redacts is asked for again through log.query, which shows the agent
// what it may read.)
//
// The log must still hold revision from+1: changes compacted away are not
// delivered.
//
// A coordinator that refuses the feed consumer for now (rate_limited: the
// connection or the agent made too many within 30 s) or cannot answer
// (unavailable, or none answers: none runs, or one is taking over) is
// asked again, after a pause that grows from 100 ms to 5 s with jitter,
// until ctx ends; Watch then returns ctx's error. Any other failure is
// returned at once. Once watching, a consumer that fails, or that stays
// quiet while it holds messages, is replaced with a new one from the
// message after the last delivered, asked for the same way.
func (c *Client) Watch(ctx context.Context, subtree string, from uint64) (*Watcher, error) {
	if subtree != "" {
		if err := intents.CheckPath(subtree); err != nil {
			return nil, fmt.Errorf("agents: watch %q: %w", subtree, err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	c.loadShards(ctx, false)
	f := &feed{c: c, subtree: subtree, subj: c.subj.Shard(c.shardOf(subtree))}
	for attempt := 0; ; attempt++ {
		err := f.follow(ctx, 0)
		if err == nil {
			break
		}
		if !retryFollow(err) {
			cancel()
			return nil, fmt.Errorf("agents: watch %q: %w", subtree, err)
		}
		c.log.Warn("asking for a feed consumer failed; trying again", "err", err, "attempt", attempt+1)
		if !sleep(ctx, followBackoff(attempt)) {
			cancel()
			return nil, fmt.Errorf("agents: watch %q: %w (after %w)", subtree, context.Cause(ctx), err)
		}
	}
	w := &Watcher{ch: make(chan Change, 64), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer close(w.ch)
		defer f.stop()
		err := c.watch(ctx, subtree, from, f, w)
		if ctx.Err() == nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
		}
	}()
	go func() {
		// MessagesContext.Next does not take a context: stopping the
		// iterator is what ends a Next blocked on a quiet feed.
		<-ctx.Done()
		f.stop()
	}()
	return w, nil
}

// The pauses between two asks for a feed consumer: from
// followBackoffBase, doubling up to followBackoffMax. A refusal
// (rate_limited) lasts until the oldest of the connection's consumers is
// 30 s old, and a coordinator that is unavailable is busy or changing
// hands: asking at once, or in step with the other watchers, would only
// add to it.
const (
	followBackoffBase = 100 * time.Millisecond
	followBackoffMax  = 5 * time.Second
)

// followBackoff is the pause after the ask numbered attempt (from 0)
// failed: at random between half its bound and its bound, so that
// watchers refused together do not ask again together, and none asks in a
// tight loop.
func followBackoff(attempt int) time.Duration {
	bound := followBackoffMax
	if attempt < 30 {
		bound = min(bound, followBackoffBase<<attempt)
	}
	return bound/2 + rand.N(bound/2+1)
}

// retryFollow reports whether a failed feed.follow may succeed if asked
// again: the coordinator refused it for the requester's quota
// (rate_limited), could not answer it (unavailable), or none answered (no
// coordinator runs, or one is taking over).
func retryFollow(err error) bool {
	var api *APIError
	if errors.As(err, &api) {
		return api.Code == string(intents.ReasonRateLimited) || api.Code == codeUnavailable
	}
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
}

// feed reads the change feed through consumers the coordinator makes, in
// order and without gaps: it checks that each message is the one after
// the last (the consumer's own sequence), and when one is missing, the
// consumer is gone or has gone quiet, it asks for a new consumer from the
// stream sequence after the last message it got.
type feed struct {
	c       *Client
	subtree string
	// subj are the subjects of the shard that owns the subtree's board
	// when the watch began: its log and its feed are read.
	subj intents.Subjects

	mu   sync.Mutex
	cons jetstream.Consumer
	it   jetstream.MessagesContext
	next uint64 // the stream sequence of the next message wanted
	seq  uint64 // the consumer sequence of the last message taken
	done bool
}

// follow asks the coordinator for a consumer from stream sequence start
// (0: what comes next) and starts pulling from it.
func (f *feed) follow(ctx context.Context, start uint64) error {
	var r struct {
		Stream   string `json:"stream"`
		Consumer string `json:"consumer"`
		StartSeq uint64 `json:"start_seq"`
	}
	q := map[string]any{}
	if f.subtree != "" {
		q["path"] = f.subtree
	}
	if start > 0 {
		q["start_seq"] = start
	}
	if err := f.c.requestOn(ctx, f.subj, intents.APIFeedFollow, q, &r); err != nil {
		return err
	}
	cons, err := f.c.js.Consumer(ctx, r.Stream, r.Consumer)
	if err != nil {
		return fmt.Errorf("feed consumer %s: %w", r.Consumer, err)
	}
	it, err := cons.Messages(jetstream.PullHeartbeat(watchHeartbeat))
	if err != nil {
		return fmt.Errorf("feed consumer %s: %w", r.Consumer, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		it.Stop()
		return jetstream.ErrMsgIteratorClosed
	}
	if f.it != nil {
		f.it.Stop()
	}
	f.cons, f.it, f.next, f.seq = cons, it, r.StartSeq, 0
	return nil
}

// stop ends the feed; a Next blocked in it returns.
func (f *feed) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = true
	if f.it != nil {
		f.it.Stop()
	}
}

// Next returns the next message of the feed, asking for a new consumer as
// often as the one in use fails.
func (f *feed) Next(ctx context.Context) (jetstream.Msg, error) {
	for {
		f.mu.Lock()
		cons, it, done := f.cons, f.it, f.done
		f.mu.Unlock()
		if done {
			return nil, jetstream.ErrMsgIteratorClosed
		}
		m, err := it.Next(jetstream.NextMaxWait(watchQuiet))
		if errors.Is(err, nats.ErrTimeout) {
			if stalled := f.stalled(ctx, cons); stalled == nil {
				continue // a quiet feed
			} else {
				err = stalled
			}
		}
		if err == nil {
			meta, merr := m.Metadata()
			switch {
			case merr != nil:
				err = merr
			case meta.Sequence.Consumer != f.seq+1:
				err = fmt.Errorf("feed message %d of its consumer after %d: a gap", meta.Sequence.Consumer, f.seq)
			default:
				f.seq, f.next = meta.Sequence.Consumer, meta.Sequence.Stream+1
				return m, nil
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		f.mu.Lock()
		done = f.done
		f.mu.Unlock()
		if done || errors.Is(err, jetstream.ErrMsgIteratorClosed) && ctx.Err() != nil {
			return nil, jetstream.ErrMsgIteratorClosed
		}
		f.c.log.Warn("the change feed consumer failed; asking for another", "err", err, "from_stream_seq", f.next)
		for attempt := 0; ; attempt++ {
			ferr := f.follow(ctx, f.next)
			if ferr == nil {
				break
			}
			if errors.Is(ferr, jetstream.ErrMsgIteratorClosed) {
				return nil, ferr
			}
			f.c.log.Warn("asking for a feed consumer failed; trying again", "err", ferr, "attempt", attempt+1)
			if !sleep(ctx, followBackoff(attempt)) {
				return nil, ctx.Err()
			}
		}
	}
}

// stalled asks whether cons, which delivered nothing for watchQuiet, is
// gone or holds messages it did not deliver: nil if neither.
func (f *feed) stalled(ctx context.Context, cons jetstream.Consumer) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := cons.Info(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("the feed consumer delivered nothing for %s, and its information: %w", watchQuiet, err)
	case info.NumPending > 0:
		return fmt.Errorf("the feed consumer delivered nothing for %s while %d messages wait", watchQuiet, info.NumPending)
	}
	return nil
}

func (c *Client) watch(ctx context.Context, subtree string, last uint64, live *feed, w *Watcher) error {
	out := w.ch
	send := func(ev *intents.Event) bool {
		if ev.Seq <= last || ev.Change == nil {
			return true
		}
		last = ev.Seq
		ch := Change{Rev: ev.Seq, Time: ev.Time, Agent: ev.Agent, Intent: ev.Intent, Txn: ev.Txn}
		for _, a := range ev.Change.Writes {
			if subtree == "" || intents.Overlaps(a.Path, subtree) {
				ch.Writes = append(ch.Writes, a)
			}
		}
		for _, p := range ev.Change.Redacted {
			if subtree == "" || intents.Overlaps(p, subtree) {
				ch.Redacted = append(ch.Redacted, p)
			}
		}
		if len(ch.Writes) == 0 {
			return true
		}
		select {
		case out <- ch:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// query asks the log for the changes of subtree from seq on, as this
	// agent may see them.
	query := func(from uint64, limit int) ([]*intents.Event, uint64, error) {
		var page struct {
			Events []*intents.Event `json:"events"`
			Next   uint64           `json:"next"`
		}
		q := map[string]any{"type": intents.EventChange, "from": from, "limit": limit}
		if subtree != "" {
			q["path"] = subtree
		}
		err := c.requestOn(ctx, live.subj, intents.APILogQuery, q, &page)
		return page.Events, page.Next, err
	}
	// catchUp delivers the changes of the log after the last delivered
	// and below until (0: to the log's end), and says how many.
	catchUp := func(until uint64) (int, bool, error) {
		n := 0
		for from := last + 1; until == 0 || from < until; {
			evs, next, err := query(from, watchPage)
			if err != nil {
				if ctx.Err() != nil {
					return n, false, nil
				}
				return n, false, fmt.Errorf("agents: watch %q: catch up from %d: %w", subtree, from, err)
			}
			for _, ev := range evs {
				if until > 0 && ev.Seq >= until {
					return n, true, nil
				}
				before := last
				if !send(ev) {
					return n, false, nil
				}
				if last > before {
					n++
				}
			}
			if next == 0 {
				break
			}
			from = next
		}
		return n, true, nil
	}
	if _, ok, err := catchUp(0); !ok {
		return err
	}
	// Then the feed; what the log already gave is skipped by revision.
	// seen is the last revision the feed's messages (or the log) covered:
	// a message chained to a later one follows one this watcher did not
	// get, and what it lacks is asked of the log.
	seen := last
	for {
		m, err := live.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("agents: watch %q: feed: %w", subtree, err)
		}
		fm, err := intents.DecodeFeedMessage(m.Data())
		if err != nil {
			c.log.Warn("dropped a feed message that does not parse", "subject", m.Subject(), "err", err)
			continue
		}
		chain := fm.BoardPrev
		if subtree == "" {
			chain = fm.Prev
		}
		if first := fm.Changes[0].Seq; chain > seen && first > last+1 {
			n, ok, err := catchUp(first)
			if !ok {
				return err
			}
			if n > 0 {
				w.filled.Add(int64(n))
				c.log.Warn("the change feed lacked changes; they were read from the log", "subtree", subtree,
					"changes", n, "before", first, "chained_to", chain, "seen", seen)
			}
		}
		seen = max(seen, fm.Changes[len(fm.Changes)-1].Seq)
		for _, ev := range fm.Changes {
			if ev.Seq <= last || !touches(ev, subtree) {
				continue
			}
			if len(ev.Change.Redacted) > 0 {
				// The feed keeps from everyone what the readers rules
				// keep from anyone; the log shows this agent what it
				// may read.
				got, _, err := query(ev.Seq, 1)
				switch {
				case err != nil:
					if ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("agents: watch %q: read change %d: %w", subtree, ev.Seq, err)
				case len(got) == 1 && got[0].Seq == ev.Seq:
					ev = got[0]
				}
			}
			if !send(ev) {
				return nil
			}
		}
	}
}

// touches reports whether change ev wrote to subtree ("" for the whole
// state): a feed message carries the changes of a board, a watcher keeps
// those of its subtree.
func touches(ev *intents.Event, subtree string) bool {
	if subtree == "" {
		return true
	}
	for _, w := range ev.Change.Writes {
		if intents.Overlaps(w.Path, subtree) {
			return true
		}
	}
	return false
}
