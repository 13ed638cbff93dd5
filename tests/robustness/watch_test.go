package robustness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// watcher follows the changes of one subtree through the SDK's Watch, from
// the first revision on, for the whole run: whatever dies meanwhile, it
// must be given every change of the log that touches its subtree, each
// once, in order, with the writes the log holds (SPEC §6: a watcher
// resumes from a revision and sees no gap).
type watcher struct {
	subtree string
	w       *agents.Watcher
	cancel  context.CancelFunc
	done    chan struct{}
	// more is signalled at each change given (it holds one signal: a
	// reader looks at got afterwards).
	more chan struct{}

	mu  sync.Mutex
	got []agents.Change
	err error      // why the watch ended before it was stopped
	log syncBuffer // the client's warnings: why it asked for new consumers
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// watchSubtrees are what a run's watchers follow: the whole state, and one
// board of the three.
var watchSubtrees = []string{"", "rb1"}

// startWatchers starts a watcher of each of watchSubtrees, each on a
// connection of its own from connect, once a coordinator answers.
func startWatchers(t *testing.T, connect func() *nats.Conn) []*watcher {
	t.Helper()
	var ws []*watcher
	for i, subtree := range watchSubtrees {
		ctx, cancel := context.WithCancel(context.Background())
		wa := &watcher{subtree: subtree, done: make(chan struct{}), more: make(chan struct{}, 1)}
		c, err := agents.Connect(ctx, connect(), "rbw"+strconv.Itoa(i),
			agents.WithLogger(slog.New(slog.NewTextHandler(&wa.log, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		if err != nil {
			cancel()
			t.Fatalf("watcher of %q: %v", subtree, err)
		}
		w, err := c.Watch(ctx, subtree, 0)
		if err != nil {
			cancel()
			t.Fatalf("watcher of %q: %v", subtree, err)
		}
		wa.w, wa.cancel = w, func() { w.Stop(); cancel() }
		go func() {
			defer close(wa.done)
			for ch := range w.Changes() {
				wa.mu.Lock()
				wa.got = append(wa.got, ch)
				wa.mu.Unlock()
				select {
				case wa.more <- struct{}{}:
				default:
				}
			}
			wa.mu.Lock()
			wa.err = w.Err()
			wa.mu.Unlock()
		}()
		ws = append(ws, wa)
	}
	return ws
}

// logChanges reads the change events of the log in dir, of a coordinator
// that has stopped.
func logChanges(dir string) ([]*intents.Event, error) {
	l, err := eventlog.Open(dir, &eventlog.Options{})
	if err != nil {
		return nil, fmt.Errorf("open the log: %w", err)
	}
	defer l.Close()
	var changes []*intents.Event
	err = l.Scan(l.FirstSeq(), l.LastSeq(), func(ev *intents.Event) error {
		if ev.Type == intents.EventChange && ev.Change != nil {
			changes = append(changes, ev)
		}
		return nil
	})
	return changes, err
}

// markPath is written once at the end of a run, inside every watched
// subtree: once a watcher was given its change, it was given everything
// before it it will ever be.
const markPath = "rb1.end"

// awaitWatchers writes markPath through nc, once the traffic ended and
// with a coordinator up, and waits, up to d, until every watcher was given
// that change. A watcher that is not is found by checkWatchers.
func awaitWatchers(ws []*watcher, nc *nats.Conn, subj intents.Subjects, d time.Duration) error {
	deadline := time.Now().Add(d)
	body := fmt.Sprintf(`{"id":%q,"agent":"rbm","kind":"apply","writes":[{"path":%q,"op":"set","value":true}]}`, ulid.Make(), markPath)
	var dec intents.Decision
	for {
		m, err := nc.Request(subj.Submit("rbm"), []byte(body), 2*time.Second)
		if err == nil && m.Header.Get("Nats-Service-Error-Code") == "" {
			if err := json.Unmarshal(m.Data, &dec); err != nil || dec.Outcome != intents.OutcomeApplied {
				return fmt.Errorf("the run's last write: %s %v", m.Data, err)
			}
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the run's last write: no coordinator answered: %v", err)
		}
	}
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	for _, w := range ws {
	await:
		for {
			w.mu.Lock()
			n := len(w.got)
			reached := n > 0 && w.got[n-1].Rev >= dec.Rev
			w.mu.Unlock()
			if reached {
				break
			}
			select {
			case <-w.more:
			case <-w.done:
				break await
			case <-timeout.C:
				return nil // checkWatchers says what each was given
			}
		}
	}
	return nil
}

// checkWatchers stops each watcher and checks that it was given exactly
// the changes the log holds of its subtree: every one, each once, in the
// log's order, with the log's writes. Unless the feed may have had other
// writers (a deposed coordinator of a cluster's), it also checks that the
// watcher never had to read from the log what the change feed lacked: a
// watcher heals a gap in the feed, which is still a coordinator's fault.
func checkWatchers(ws []*watcher, changes []*intents.Event, otherWriters bool) error {
	var errs []error
	for _, w := range ws {
		var want []agents.Change
		for _, ev := range changes {
			ch := agents.Change{Rev: ev.Seq}
			for _, a := range ev.Change.Writes {
				if w.subtree == "" || intents.Overlaps(a.Path, w.subtree) {
					ch.Writes = append(ch.Writes, a)
				}
			}
			if len(ch.Writes) > 0 {
				want = append(want, ch)
			}
		}
		w.cancel()
		<-w.done
		if err := compareChanges(w.got, want); err != nil {
			if w.err != nil {
				err = fmt.Errorf("%w (the watch ended: %v)", err, w.err)
			}
			if l := w.log.String(); l != "" {
				err = fmt.Errorf("%w; its client logged:\n%s", err, l)
			}
			errs = append(errs, fmt.Errorf("the watcher of %q: %w", w.subtree, err))
		}
		if n := w.w.Filled(); n > 0 && !otherWriters {
			errs = append(errs, fmt.Errorf("the watcher of %q read %d changes from the log that the change feed lacked; its client logged:\n%s", w.subtree, n, w.log.String()))
		}
	}
	return errors.Join(errs...)
}

// compareChanges says where got first departs from want.
func compareChanges(got, want []agents.Change) error {
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if g.Rev != w.Rev {
			return fmt.Errorf("change %d of %d given is revision %d, and the log's is %d (the one before: %d)", i+1, len(got), g.Rev, w.Rev, prevRev(want, i))
		}
		if len(g.Writes) != len(w.Writes) {
			return fmt.Errorf("revision %d: given %d writes of the subtree, the log holds %d", g.Rev, len(g.Writes), len(w.Writes))
		}
		for j := range g.Writes {
			a, b := g.Writes[j], w.Writes[j]
			if a.Path != b.Path || a.Op != b.Op || a.NewVersion != b.NewVersion || !bytes.Equal(a.Value, b.Value) {
				return fmt.Errorf("revision %d: given %s %s v%d %s, the log holds %s %s v%d %s", g.Rev, a.Op, a.Path, a.NewVersion, a.Value, b.Op, b.Path, b.NewVersion, b.Value)
			}
		}
	}
	switch {
	case len(got) < len(want):
		return fmt.Errorf("given %d changes of the log's %d: none from revision %d on", len(got), len(want), want[len(got)].Rev)
	case len(got) > len(want):
		return fmt.Errorf("given %d changes, the log holds %d: revision %d is not in it", len(got), len(want), got[len(want)].Rev)
	}
	return nil
}

func prevRev(cs []agents.Change, i int) uint64 {
	if i == 0 {
		return 0
	}
	return cs[i-1].Rev
}
