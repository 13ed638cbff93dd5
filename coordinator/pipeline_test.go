package coordinator

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// setAsync submits, as agent w, a set of path, and sends path to answered
// once it is applied.
func setAsync(t *testing.T, nc *nats.Conn, path string, answered chan<- string) {
	go func() {
		body := fmt.Sprintf(`{"id":%q,"agent":"w","kind":"apply","writes":[{"path":%q,"op":"set","value":1}]}`, ulid.Make().String(), path)
		d, err := natstest.RequestErr[intents.Decision](nc, intents.Subjects{}.Submit("w"), body, 30*time.Second)
		if err != nil || d.Outcome != intents.OutcomeApplied {
			t.Errorf("the set of %s: %+v %v", path, d, err)
		}
		answered <- path
	}()
}

// awaitAnswers waits for n answers from setAsync, failing with why if they
// do not all come.
func awaitAnswers(t *testing.T, answered <-chan string, n int, why string) {
	t.Helper()
	for range n {
		select {
		case <-answered:
		case <-time.After(30 * time.Second):
			t.Fatal(why)
		}
	}
}

// holdingWriteOf returns Options whose log holds back the write of the
// first group that sets path, until free is called (once or more). A test
// registers free as a cleanup after starting the service, so that it runs
// before the service's shutdown, which would wait for the held group.
func holdingWriteOf(path string) (opts Options, free func()) {
	release := make(chan error)
	var held atomic.Bool
	opts.Core.holdWrite = func(evs []*intents.Event) <-chan error {
		for _, ev := range evs {
			if ev.Change == nil || held.Load() {
				continue
			}
			for _, w := range ev.Change.Writes {
				if w.Path == path {
					held.Store(true)
					return release
				}
			}
		}
		return nil
	}
	var once sync.Once
	return opts, func() { once.Do(func() { close(release) }) }
}

// TestCommitsBehindAHeldGroup: with one group held back from the disk and
// another handed to the log behind it, a third decided batch is handed to
// the log at once, to join the next fsync, rather than held in the loop
// until the first group is durable (the moment the log starts its next
// fsync, which it then missed). Nothing behind the held group is answered
// before that group is durable, and then each is.
func TestCommitsBehindAHeldGroup(t *testing.T) {
	ns := natstest.Run(t)
	opts, free := holdingWriteOf("slow.x")
	svc := startService(t, ns, t.TempDir(), opts)
	// Registered after the service's shutdown, so run before it: a failed
	// check must not leave the shutdown waiting for the held group.
	t.Cleanup(free)
	nc := natstest.Connect(t, ns)
	committed := func() int64 {
		var n int64
		if !svc.call(context.Background(), func() { n = svc.committed }) {
			t.Fatal("the loop stopped")
		}
		return n
	}
	before := committed()

	answered := make(chan string, 3)
	for i, path := range []string{"slow.x", "b.x", "c.x"} {
		setAsync(t, nc, path, answered)
		natstest.CheckFor(t, 10*time.Second, path+" handed to the log", func() error {
			if n := committed() - before; n != int64(i+1) {
				return fmt.Errorf("%d groups handed to the log, want %d", n, i+1)
			}
			return nil
		})
	}
	select {
	case path := <-answered:
		t.Fatalf("%s was answered before the group held ahead of it was durable", path)
	default:
	}
	free()
	awaitAnswers(t, answered, 3, "not every set was answered once the held group was written")
}

// TestHeldGroupCommittedOnceOneIsDurable: with as many groups on their way
// to the disk as the loop lets be, the next decided batch is held in the
// loop, and committed the moment a group is durable, though nothing else
// arrives to wake the loop: the output stage wakes it.
func TestHeldGroupCommittedOnceOneIsDurable(t *testing.T) {
	ns := natstest.Run(t)
	opts, free := holdingWriteOf("slow.x")
	svc := startService(t, ns, t.TempDir(), opts)
	t.Cleanup(free) // before the service's shutdown, as above
	nc := natstest.Connect(t, ns)
	var before int64
	if !svc.call(context.Background(), func() { svc.maxInflight, before = 1, svc.committed }) {
		t.Fatal("the loop stopped")
	}
	state := func() (committed int64, gathered int) {
		if !svc.call(context.Background(), func() { committed, gathered = svc.committed-before, svc.acc.intents }) {
			t.Fatal("the loop stopped")
		}
		return
	}
	answered := make(chan string, 2)
	for i, path := range []string{"slow.x", "b.x"} {
		setAsync(t, nc, path, answered)
		natstest.CheckFor(t, 10*time.Second, path+" decided", func() error {
			if c, g := state(); c != 1 || g != i {
				return fmt.Errorf("%d groups handed to the log and %d intents gathered, want 1 and %d", c, g, i)
			}
			return nil
		})
	}
	free()
	awaitAnswers(t, answered, 2, "the held group was not committed once the group ahead of it was durable")
	if c, _ := state(); c != 2 {
		t.Fatalf("%d groups handed to the log, want 2", c)
	}
}
