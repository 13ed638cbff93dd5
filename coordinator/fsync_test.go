package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// gatedFS holds every fsync of the write-ahead log while it is shut: the
// disk has not confirmed anything written since the last sync that ended.
type gatedFS struct {
	vfs.FS
	mu      sync.Mutex
	shut    chan struct{} // nil while open; closed to open it again
	entered chan struct{} // told once a sync waits
}

func (fs *gatedFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return gatedFile{File: f, fs: fs}, nil
}

func (fs *gatedFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	if err != nil {
		return f, err
	}
	return gatedFile{File: f, fs: fs}, nil
}

// shutNow makes the next fsyncs wait until open is called.
func (fs *gatedFS) shutNow() (entered <-chan struct{}, open func()) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.shut, fs.entered = make(chan struct{}), make(chan struct{})
	shut := fs.shut
	var once sync.Once
	return fs.entered, func() {
		once.Do(func() {
			fs.mu.Lock()
			fs.shut = nil
			fs.mu.Unlock()
			close(shut)
		})
	}
}

func (fs *gatedFS) wait() {
	fs.mu.Lock()
	shut, entered := fs.shut, fs.entered
	if shut != nil && entered != nil {
		close(entered)
		fs.entered = nil
	}
	fs.mu.Unlock()
	if shut != nil {
		<-shut
	}
}

type gatedFile struct {
	vfs.File
	fs *gatedFS
}

func (f gatedFile) Sync() error {
	f.fs.wait()
	return f.File.Sync()
}

func (f gatedFile) SyncData() error {
	f.fs.wait()
	return f.File.SyncData()
}

// Nothing is answered, published or stored on the feed before the fsync
// that makes it durable has ended: with the write-ahead log's fsync held,
// an applied submit gets no reply, its change is not on the feed and the
// decision of an intent of the stream is not on its agent's subject; they
// all come once the fsync ends.
func TestNothingToldBeforeFsync(t *testing.T) {
	ns := natstest.Run(t)
	fs := &gatedFS{FS: vfs.Default}
	opts := Options{}
	opts.Core.Log = eventlog.Options{Pebble: &pebble.Options{FS: fs}}
	startService(t, ns, t.TempDir(), opts)
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	submit := func(id, path string) (*nats.Msg, error) {
		in := `{"id":"` + id + `","agent":"w","kind":"apply","writes":[{"path":"` + path + `","op":"incr"}]}`
		return nc.Request(subj.Submit("w"), []byte(in), 10*time.Second)
	}
	if _, err := submit("01JD0000000000000000000001", "warm.fs"); err != nil {
		t.Fatal(err)
	}

	// told says what was published: each path a feed message's changes
	// wrote, or the subject of any other message.
	told := make(chan string, 8)
	for _, s := range []string{subj.EventsChange("fs"), subj.Decisions("s")} {
		if _, err := nc.Subscribe(s, func(m *nats.Msg) {
			if m.Subject != subj.EventsChange("fs") {
				told <- m.Subject
				return
			}
			evs, err := intents.DecodeFeed(m.Data)
			if err != nil {
				t.Errorf("feed message %s: %v", m.Data, err)
			}
			for _, ev := range evs {
				for _, w := range ev.Change.Writes {
					told <- w.Path
				}
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	entered, open := fs.shutNow()
	t.Cleanup(open)
	replied := make(chan *nats.Msg, 1)
	go func() {
		m, err := submit("01JD0000000000000000000002", "fs.x")
		if err != nil {
			t.Errorf("submit: %v", err)
		}
		replied <- m
	}()
	streamed := `{"id":"01JD0000000000000000000003","agent":"s","kind":"apply","writes":[{"path":"fs.y","op":"incr"}]}`
	if err := nc.Publish(subj.Intents("s"), []byte(streamed)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no fsync of the log after a submit")
	}
	// The fsync is held: whatever the coordinator would tell early it has
	// had time to send, and the connection's round trip has brought it.
	hold := time.NewTimer(300 * time.Millisecond)
	defer hold.Stop()
	select {
	case m := <-replied:
		t.Fatalf("the submit was answered before its fsync ended: %s", m.Data)
	case s := <-told:
		t.Fatalf("%s was published before its fsync ended", s)
	case <-hold.C:
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-replied:
		t.Fatalf("the submit was answered before its fsync ended: %s", m.Data)
	case s := <-told:
		t.Fatalf("%s was published before its fsync ended", s)
	default:
	}

	open()
	var d intents.Decision
	select {
	case m := <-replied:
		if m == nil {
			t.FailNow()
		}
		if err := json.Unmarshal(m.Data, &d); err != nil || d.Outcome != intents.OutcomeApplied {
			t.Fatalf("reply after the fsync: %s (%v)", m.Data, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reply once the fsync ended")
	}
	want := map[string]bool{"fs.x": true, "fs.y": true, subj.Decisions("s"): true}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for len(want) > 0 {
		select {
		case s := <-told:
			delete(want, s)
		case <-ctx.Done():
			t.Fatalf("not published once the fsync ended: %v", want)
		}
	}
}

// A group whose changes make more than a run of unacknowledged feed
// messages (feedAckEvery) puts every one on the feed, in order, and its
// acknowledgements all come back: the plain publishes between the
// acknowledged ones are stored too. Its one change writes to a board per
// path, and goes in a message of each.
func TestFeedLongGroup(t *testing.T) {
	ns := natstest.Run(t)
	svc := startService(t, ns, t.TempDir(), Options{})
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	const boards = 3*(feedAckEvery+1) + 5
	var writes []string
	for i := range boards {
		writes = append(writes, fmt.Sprintf(`{"path":"long%03d.p","op":"set","value":%d}`, i, i))
	}
	in := `{"id":"01JD0000000000000000000009","agent":"w","kind":"apply","writes":[` + strings.Join(writes, ",") + `]}`
	m, err := nc.Request(subj.Submit("w"), []byte(in), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var d intents.Decision
	if err := json.Unmarshal(m.Data, &d); err != nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("%s: %v", m.Data, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, subj.Stream(intents.StreamEvents))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj.EventsChange(">")}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range boards {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("after %d of %d change messages: %v", i, boards, err)
		}
		if want := subj.EventsChange(fmt.Sprintf("long%03d", i)); m.Subject() != want {
			t.Fatalf("change message %d is %s, want %s", i, m.Subject(), want)
		}
		evs, err := intents.DecodeFeed(m.Data())
		if err != nil || len(evs) != 1 || evs[0].Seq != d.Rev || len(evs[0].Change.Writes) != boards {
			t.Fatalf("change message %d: %s (%v), want the change of rev %d whole", i, m.Data(), err, d.Rev)
		}
	}
	for svc.feed.PublishAsyncPending() > 0 {
		select {
		case <-svc.feed.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatalf("%d of the feed's acknowledgements never came", svc.feed.PublishAsyncPending())
		}
	}
}

// feedFixture is a service and a client of it, for the change feed's
// tests.
type feedFixture struct {
	svc    *Service
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	subj   intents.Subjects
}

func newFeedFixture(t *testing.T, opts Options) *feedFixture {
	t.Helper()
	ns := natstest.Run(t)
	f := &feedFixture{svc: startService(t, ns, t.TempDir(), opts), nc: natstest.Connect(t, ns)}
	var err error
	if f.js, err = jetstream.New(f.nc); err != nil {
		t.Fatal(err)
	}
	if f.stream, err = f.js.Stream(context.Background(), f.subj.Stream(intents.StreamEvents)); err != nil {
		t.Fatal(err)
	}
	return f
}

// incr submits one intent that increments each of paths.
func (f *feedFixture) incr(t *testing.T, paths ...string) {
	t.Helper()
	var ws []string
	for _, p := range paths {
		ws = append(ws, fmt.Sprintf(`{"path":%q,"op":"incr","value":1}`, p))
	}
	in := fmt.Sprintf(`{"id":%q,"agent":"w","kind":"apply","writes":[%s]}`, ulid.Make(), strings.Join(ws, ","))
	m, err := f.nc.Request(f.subj.Submit("w"), []byte(in), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var d intents.Decision
	if err := json.Unmarshal(m.Data, &d); err != nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("%s: %v", m.Data, err)
	}
}

// watchedAsLogged reads the feed's messages under subtree ("" for all) as
// a watcher does, skipping a revision it has, and fails unless it finds
// the log's changes of the subtree, each once, in order.
func (f *feedFixture) watchedAsLogged(t *testing.T, subtree string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var want []uint64
	lg := f.svc.core.Log()
	if err := lg.Scan(1, lg.LastSeq(), func(ev *intents.Event) error {
		if ev.Type != intents.EventChange {
			return nil
		}
		for _, w := range ev.Change.Writes {
			if subtree == "" || intents.Overlaps(w.Path, subtree) {
				want = append(want, ev.Seq)
				break
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cons, err := f.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: f.subj.ChangeSubjects(subtree)})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		t.Fatalf("the log holds no change of %q", subtree)
	}
	var last uint64
	for i := 0; i < len(want); {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("after %d of the log's %d changes of %q on the feed: %v", i, len(want), subtree, err)
		}
		evs, err := intents.DecodeFeed(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Seq <= last || subtree != "" && !slices.ContainsFunc(ev.Change.Writes, func(w intents.Applied) bool { return intents.Overlaps(w.Path, subtree) }) {
				continue
			}
			if i == len(want) || ev.Seq != want[i] {
				t.Fatalf("change %d of %q on the feed is revision %d, and the log's are %v", i+1, subtree, ev.Seq, want)
			}
			last = ev.Seq
			i++
		}
	}
}

// TestFeedMendsALostMessage: a message the stream did not take (here, for
// a moment it takes no subject but the board mendkept's; in a cluster, its leader
// moved) is followed by messages it does take. The first of those expects
// the lost one before it and is refused, the coordinator finds out at the
// next acknowledgement and mends the feed from the log, so that a watcher
// of the lost message's subtree is given its change. Without the expected
// sequence, the message after it is stored, nothing is refused, and the
// change is missing from the subtree's feed for good.
func TestFeedMendsALostMessage(t *testing.T) {
	var logs lockedBuffer
	f := newFeedFixture(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	setSubjects := func(subjects ...string) {
		t.Helper()
		cfg := f.stream.CachedInfo().Config
		cfg.Subjects = subjects
		if _, err := f.js.UpdateStream(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	f.incr(t, "mendlost.a", "mendkept.a")
	setSubjects(f.subj.EventsChange("mendkept"))
	// One change, two boards, two messages: mendlost's is lost, mendkept's is
	// refused.
	f.incr(t, "mendlost.b", "mendkept.b")
	// The change goes on the feed after its reply: the subjects come back
	// once the stream refused it.
	natstest.CheckFor(t, 10*time.Second, "the feed refused a message", func() error {
		if !strings.Contains(logs.String(), "wrong last sequence") {
			return errors.New(logs.String())
		}
		return nil
	})
	setSubjects(f.subj.EventsChange(">"))
	for range 5 {
		f.incr(t, "mendlost.c", "mendkept.c")
	}
	f.watchedAsLogged(t, "mendlost")
}
