package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/coagent/coagent/intents"
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
}

// Watcher delivers the changes of a subtree in revision order.
type Watcher struct {
	ch     chan Change
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	err error
}

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

// Watch follows the commits that touch subtree ("" for the whole state)
// from revision from on: every change with a revision above from, each
// once, in order, with no gaps. It first catches up from the coordinator's
// log (log.query), then follows the live feed on COAGENT_EVENTS; it starts
// following the feed before it catches up, so no commit falls between the
// two. To resume after a restart of the watcher or the coordinator, pass
// the last revision seen.
//
// The log must still hold revision from+1: changes compacted away are not
// delivered.
func (c *Client) Watch(ctx context.Context, subtree string, from uint64) (*Watcher, error) {
	if subtree != "" {
		if err := intents.CheckPath(subtree); err != nil {
			return nil, fmt.Errorf("agents: watch %q: %w", subtree, err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	cons, err := c.js.OrderedConsumer(ctx, c.subj.Stream(intents.StreamEvents), jetstream.OrderedConsumerConfig{
		FilterSubjects: c.changeSubjects(subtree),
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("agents: watch %q: %w", subtree, err)
	}
	// Messages creates the consumer on the server now: from here on every
	// change published reaches it.
	live, err := cons.Messages()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("agents: watch %q: follow the feed: %w", subtree, err)
	}
	w := &Watcher{ch: make(chan Change, 64), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer close(w.ch)
		defer live.Stop()
		err := c.watch(ctx, subtree, from, live, w.ch)
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
		live.Stop()
	}()
	return w, nil
}

// changeSubjects are the feed subjects of changes that overlap subtree:
// the subtree, everything under it, and each ancestor (a write that
// replaces the subtree whole).
func (c *Client) changeSubjects(subtree string) []string {
	if subtree == "" {
		return []string{c.subj.EventsChange(">")}
	}
	subjects := []string{c.subj.EventsChange(subtree), c.subj.EventsChange(subtree + ".>")}
	segs := strings.Split(subtree, ".")
	for n := 1; n < len(segs); n++ {
		subjects = append(subjects, c.subj.EventsChange(strings.Join(segs[:n], ".")))
	}
	return subjects
}

func (c *Client) watch(ctx context.Context, subtree string, last uint64, live jetstream.MessagesContext, out chan<- Change) error {
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
	// Catch up from the log.
	for {
		var page struct {
			Events []*intents.Event `json:"events"`
			Next   uint64           `json:"next"`
		}
		q := map[string]any{"type": intents.EventChange, "from": last + 1, "limit": watchPage}
		if subtree != "" {
			q["path"] = subtree
		}
		if err := c.request(ctx, "log.query", q, &page); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("agents: watch %q: catch up from %d: %w", subtree, last+1, err)
		}
		for _, ev := range page.Events {
			if !send(ev) {
				return nil
			}
		}
		if page.Next == 0 || len(page.Events) == 0 {
			break
		}
	}
	// Then the feed; what the log already gave is skipped by revision.
	for {
		m, err := live.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("agents: watch %q: feed: %w", subtree, err)
		}
		var ev intents.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			c.log.Warn("dropped a feed message that does not parse", "subject", m.Subject(), "err", err)
			continue
		}
		if !send(&ev) {
			return nil
		}
	}
}
