package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// An API submit is answered with its own decision, even when deciding it
// frees waiters whose decisions come in the same events: a commit that
// frees a waiter gets committed, not the waiter's applied.
func TestSubmitAnswersItsOwnDecision(t *testing.T) {
	w := newProtoWire(t, Options{})
	g := w.grant("a", "doc.x")
	_, waiter := protoIntent(fmtWaitSet, "b", "doc.x", `2`)
	w.publish("b", waiter)
	mustOutcome(t, w.next("b"), intents.OutcomeQueued, "")
	id, commit := protoIntent(fmtCommit, "a", g.Txn, g.Fence, "doc.x", `1`)
	d := w.submit(commit, -1)
	if d.Intent != id {
		t.Fatalf("the commit's submit was answered with the decision of %s: %+v", d.Intent, d)
	}
	mustOutcome(t, d, intents.OutcomeCommitted, "")
	mustOutcome(t, w.next("b"), intents.OutcomeApplied, "")
}

// API submits do not wait on each other: one that waits for its final
// decision (parked behind a transaction) does not hold up the next, which
// micro's handler used to take only once the first had its answer. Past
// MaxSubmits waiting submits, one more is answered unavailable at once.
func TestSubmitsDoNotQueueBehindEachOther(t *testing.T) {
	w := newProtoWire(t, Options{MaxSubmits: 2})
	w.watchNotices("a")
	g := w.grant("a", "doc.x")
	waiting := make(chan *intents.Decision, 2)
	errs := make(chan error, 2)
	for i := range 2 {
		_, body := protoIntent(fmtWaitSet, "b", "doc.x", fmt.Sprint(i))
		go func() {
			d, err := w.trySubmit(body, 60000) // waits for the final decision
			if err != nil {
				errs <- err
				return
			}
			waiting <- d
		}()
	}
	// Both are parked: the holder is told of each.
	for range 2 {
		w.notice("a", intents.NoticeWaiting, nil)
	}
	// A third submit finds the two slots taken.
	_, third := protoIntent(fmtSet, "c", "doc.y", `3`)
	hdr := nats.Header{}
	if code := w.apiErr("submit", third, hdr); code != codeUnavailable {
		t.Fatalf("a submit past MaxSubmits: error %s, want %s", code, codeUnavailable)
	}
	// The holder ends; both waiters are answered, applied.
	abort := w.send("a", fmtAbort, "a", g.Txn, g.Fence)
	mustOutcome(t, abort, intents.OutcomeAborted, "")
	for range 2 {
		select {
		case d := <-waiting:
			mustOutcome(t, d, intents.OutcomeApplied, "")
		case err := <-errs:
			t.Fatal(err)
		}
	}
	// With the slots free again, a submit is decided while another waits.
	g = w.grant("a", "doc.x")
	_, body := protoIntent(fmtWaitSet, "b", "doc.x", `9`)
	go func() {
		d, err := w.trySubmit(body, 60000)
		if err != nil {
			errs <- err
			return
		}
		waiting <- d
	}()
	w.notice("a", intents.NoticeWaiting, nil)
	mustOutcome(t, w.submit(third, -1), intents.OutcomeApplied, "")
	mustOutcome(t, w.send("a", fmtAbort, "a", g.Txn, g.Fence), intents.OutcomeAborted, "")
	select {
	case d := <-waiting:
		mustOutcome(t, d, intents.OutcomeApplied, "")
	case err := <-errs:
		t.Fatal(err)
	}
}

// A log older than the checks that keep non-finite numbers out of the state
// (two incr of the largest double on one path folded to +Inf) still opens,
// and state.get on that path, or above it, is answered with an error that
// says why instead of never being answered.
func TestStateGetAnswersWhatJSONCannotHold(t *testing.T) {
	dir := t.TempDir()
	lg, err := eventlog.Open(dir, &eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 2; seq++ {
		ev := &intents.Event{Seq: seq, ID: ulid.Make(), Time: time.Now().UTC(), Type: intents.EventChange, Agent: "w1",
			Change: &intents.Change{Writes: []intents.Applied{{Path: "n.i", Op: intents.OpIncr,
				Value: json.RawMessage("1.7976931348623157e308"), OldVersion: seq - 1, NewVersion: seq}}}}
		if err := lg.Append(context.Background(), &eventlog.Batch{Events: []*intents.Event{ev}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	ns := natstest.Run(t)
	startService(t, ns, dir, Options{})
	nc := natstest.Connect(t, ns)
	for _, path := range []string{"n.i", "n"} {
		m, err := nc.Request(protoAPI+"state.get", []byte(`{"paths":["`+path+`"]}`), protoTimeout)
		if err != nil {
			t.Fatalf("state.get %s: %v", path, err)
		}
		if code := m.Header.Get(protoHdrErrCode); code != codeInternal || !strings.Contains(m.Header.Get("Nats-Service-Error"), "JSON") {
			t.Fatalf("state.get %s: error %q %q, reply %s", path, code, m.Header.Get("Nats-Service-Error"), m.Data)
		}
	}
}

// A log that fails while the service runs (here its disk fills up under a
// flush) stops the service by itself: Done is closed and Err says why, so
// the process serving it can end instead of staying up deciding nothing,
// and a submit is answered unavailable.
func TestServiceStopsWhenItsLogFails(t *testing.T) {
	full := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt) && strings.HasSuffix(op.Path, ".sst") {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	})}
	ns := natstest.Run(t)
	svc := startService(t, ns, t.TempDir(), Options{Core: CoreOptions{
		Log: eventlog.Options{Pebble: &pebble.Options{FS: errorfs.Wrap(vfs.Default, full), MemTableSize: 256 << 10}}}})
	client := natstest.Connect(t, ns)
	full.On()
	value := `"` + strings.Repeat("x", 4096) + `"`
	for i := 0; ; i++ {
		select {
		case <-svc.Done():
		default:
			if i == 10000 {
				t.Fatal("10,000 intents of 4 KB and the log has not failed")
			}
			body := fmt.Sprintf(`{"id":%q,"agent":"w","kind":"apply","writes":[{"path":"big.k%d","op":"set","value":%s}]}`, ulid.Make(), i%64, value)
			_, _ = client.Request(protoAPI+"submit.w", []byte(body), protoTimeout)
			continue
		}
		break
	}
	if !errors.Is(svc.Err(), eventlog.ErrDiskFull) {
		t.Fatalf("the service stopped with %v, want the full disk", svc.Err())
	}
	m, err := client.Request(protoAPI+"submit.w", []byte(fmt.Sprintf(`{"id":%q,"agent":"w","kind":"apply","writes":[{"path":"a","op":"set","value":1}]}`, ulid.Make())), protoTimeout)
	if err == nil && m.Header.Get(protoHdrErrCode) != codeUnavailable {
		t.Fatalf("a submit after the failure: %s %v", m.Data, m.Header)
	}
}
