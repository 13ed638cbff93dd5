package coordinator

import (
	"context"
	"errors"
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

// TestReplogFencesPipelinedAppends: a deposed leader has two groups in
// flight when the new leader appends. The first fails on the new
// leader's message; the second expects the sequence after it, which is
// now the stream's last, and must fail too, by the id it expects there:
// stored, it would continue events the log does not hold.
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
	old := &replog{js: js, subject: subj.Log()}
	first := logGroup(1, 2)
	done, err := old.append(first)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The new leader took over after message 1 and appended message 2.
	taken := &replog{js: js, subject: subj.Log(), last: 1, lastID: groupID(first)}
	done, err = taken.append(logGroup(3, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The deposed leader's two groups, sent before either is answered.
	a, err := old.append(logGroup(3, 2))
	if err != nil {
		t.Fatal(err)
	}
	b, err := old.append(logGroup(5, 2))
	if err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan error{"first": a, "second": b} {
		if err := <-ch; !errors.Is(err, ErrFenced) {
			t.Errorf("the deposed leader's %s group: %v, want ErrFenced", name, err)
		}
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 || info.State.LastSeq != 2 {
		t.Fatalf("the log holds %d messages, the last %d; want the 2 of the two leaders", info.State.Msgs, info.State.LastSeq)
	}
}
