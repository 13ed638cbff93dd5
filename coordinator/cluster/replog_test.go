package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// logGroup is a group of n events from seq first, each of a new id.
func logGroup(first uint64, n int) []*intents.Event {
	evs := make([]*intents.Event, n)
	for i := range evs {
		evs[i] = &intents.Event{Seq: first + uint64(i), ID: ulid.Make(), Time: time.Now().UTC(), Type: intents.EventNotice,
			Notice: &intents.Notice{Kind: "test"}}
	}
	return evs
}

// TestReplogFencesPipelinedAppends: a deposed leader has two groups to
// append when the new leader has appended. The first fails on the new
// leader's message; the second would expect the sequence after it, which
// is now the stream's last, and land on top of it, continuing events the
// log does not hold. A leader whose lease has lapsed does not pipeline:
// the second is not sent once the first failed.
func TestReplogFencesPipelinedAppends(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	subj := intents.Subjects{}
	stream, err := js.CreateStream(ctx, logStreamConfig(subj, 1))
	if err != nil {
		t.Fatal(err)
	}
	var leased atomic.Bool
	leased.Store(true)
	old := &replog{js: js, subject: subj.Log(), leased: leased.Load}
	done, err := old.Replicate(logGroup(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The old leader's lease lapsed; the new leader took over after
	// message 1 and appended message 2.
	leased.Store(false)
	taken := &replog{js: js, subject: subj.Log(), last: 1}
	done, err = taken.Replicate(logGroup(3, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The deposed leader's two groups, one after the other.
	a, err := old.Replicate(logGroup(3, 2))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := old.Replicate(logGroup(5, 2)); err == nil {
		if err := <-b; !errors.Is(err, ErrFenced) {
			t.Errorf("the deposed leader's second group: %v, want ErrFenced", err)
		}
	} else if !errors.Is(err, ErrFenced) {
		t.Errorf("the deposed leader's second group: %v, want ErrFenced", err)
	}
	if err := <-a; !errors.Is(err, ErrFenced) {
		t.Errorf("the deposed leader's first group: %v, want ErrFenced", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 || info.State.LastSeq != 2 {
		t.Fatalf("the log holds %d messages, the last %d; want the 2 of the two leaders", info.State.Msgs, info.State.LastSeq)
	}
}

// TestMemberSkipsOrphans: a deposed leader paused with two groups handed
// to its connection sends them when it resumes; the first fails on the new
// leader's message and the second, expecting the sequence after it, is
// stored on top of it: an orphan, continuing an event the log does not
// hold. Here two such orphans are stored after the active member's
// messages: one whose seqs happen to continue the log's, one whose seqs
// the log holds already. Each fences the active member, which must skip
// it, as must a member that joins afterwards: no log holds an orphan's
// event, and every member folds the same events. Reading by seqs alone
// (the planted bug unchained-reads) folds the first orphan and stops at
// the second as another history.
func TestMemberSkipsOrphans(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	dirA, dirB := t.TempDir(), t.TempDir()
	var logsA lockedBuffer
	a := startMember(t, nc, dirA, "a", 1, &logsA)
	awaitActive(t, a, 10*time.Second)
	incr(t, nc, "c.n", 3)

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	subj := intents.Subjects{}
	stream, err := js.Stream(ctx, subj.Stream(intents.StreamLog))
	if err != nil {
		t.Fatal(err)
	}
	orphans := map[ulid.ULID]bool{}
	// orphan stores, after the log's last message, a group of n events
	// from the seq at the given distance from that message's last, which
	// continues an event the log does not hold.
	orphan := func(from int64, n int) {
		t.Helper()
		last, err := stream.GetLastMsgForSubject(ctx, subj.Log())
		if err != nil {
			t.Fatal(err)
		}
		_, end, err := logRange(last.Header)
		if err != nil {
			t.Fatal(err)
		}
		evs := logGroup(uint64(int64(end)+from), n)
		for _, ev := range evs {
			orphans[ev.ID] = true
		}
		if _, err := js.PublishMsg(ctx, logMsg(subj.Log(), evs, ulid.Make()), jetstream.WithExpectLastSequence(last.Sequence)); err != nil {
			t.Fatal(err)
		}
	}
	orphan(1, 2) // continues the log's seqs
	incr(t, nc, "c.n", 2)
	orphan(-1, 2) // seqs the log holds: the last one and the next
	incr(t, nc, "c.n", 2)
	if !strings.Contains(logsA.String(), "skipped a message of the replicated log") {
		t.Fatalf("a never skipped an orphan:\n%s", logsA.String())
	}

	b := startMember(t, nc, dirB, "b", 1, nil)
	natstest.CheckFor(t, 20*time.Second, "b level with a", func() error {
		st, err := statuses(nc, 2)
		if err != nil {
			return err
		}
		if st["a"].Role != intents.RoleActive || st["b"].Seq != st["a"].Seq {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	if v := counter(t, nc, "c.n"); v != 7 {
		t.Fatalf("c.n = %v after 7 increments", v)
	}
	a.Stop(ctx)
	b.Stop(ctx)
	hashA, lastA := localHash(t, dirA)
	hashB, lastB := localHash(t, dirB)
	if hashA != hashB || lastA != lastB {
		t.Fatalf("a's log folds to %s at event %d, b's to %s at %d", hashA, lastA, hashB, lastB)
	}
	for _, dir := range []string{dirA, dirB} {
		log, err := eventlog.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = log.Scan(1, log.LastSeq(), func(ev *intents.Event) error {
			if orphans[ev.ID] {
				return fmt.Errorf("event %d is an orphan's", ev.Seq)
			}
			return nil
		})
		if err == nil {
			_, err = replay.Verify(log, coordinator.CoreOptions{}.Engine, nil)
		}
		log.Close()
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pos, err := logPosition(ctx, stream, tipOf(t, dirA)); err != nil || pos != info.State.LastSeq+1 {
		t.Fatalf("the replicated log after a's last event: position %d (%v), want its end %d", pos, err, info.State.LastSeq+1)
	}
}
