package coordinator

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

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
	done, err := old.append(logGroup(1, 2))
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
	done, err = taken.append(logGroup(3, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The deposed leader's two groups, one after the other.
	a, err := old.append(logGroup(3, 2))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := old.append(logGroup(5, 2)); err == nil {
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
