package eventlog

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
)

func TestGroupRoundTrip(t *testing.T) {
	g := &gen{rng: rand.New(rand.NewPCG(7, 7))}
	evs := g.batch(50).Events
	data := AppendGroup(nil, evs)
	got, err := DecodeGroup(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("decoded %d events, want %d", len(got), len(evs))
	}
	for i := range evs {
		if !reflect.DeepEqual(got[i], mustDecode(t, AppendEvent(nil, evs[i]))) {
			t.Fatalf("event %d: %s", i, codecDiff(got[i], evs[i]))
		}
	}
	// Every cut of the message is refused, never half taken.
	for n := range len(data) {
		if _, err := DecodeGroup(data[:n]); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
			t.Fatalf("a group cut to %d of %d bytes: %v, want ErrCorrupt", n, len(data), err)
		}
	}
	// Seqs that do not follow one another are refused.
	evs[1].Seq = evs[0].Seq + 2
	if _, err := DecodeGroup(AppendGroup(nil, evs[:2])); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a gap in the seqs: %v, want ErrCorrupt", err)
	}
}

func mustDecode(t *testing.T, rec []byte) *intents.Event {
	t.Helper()
	ev, err := DecodeEvent(rec)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func FuzzDecodeGroup(f *testing.F) {
	g := &gen{rng: rand.New(rand.NewPCG(1, 2))}
	f.Add(AppendGroup(nil, g.batch(1).Events))
	f.Add(AppendGroup(nil, g.batch(5).Events))
	f.Add([]byte{GroupVersion, 0})
	traced := g.batch(3).Events
	for _, ev := range traced {
		ev.Trace = "4bf92f3577b34da6a3ce929d0e0e4736"
		if ev.Received != nil {
			ev.Received.TraceError = "meta.traceparent = 1: not a string"
		}
	}
	f.Add(AppendGroup(nil, traced))
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := DecodeGroup(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("error wraps neither sentinel: %v", err)
			}
			return
		}
		again, err := DecodeGroup(AppendGroup(nil, evs))
		if err != nil || !reflect.DeepEqual(again, evs) {
			t.Fatalf("a decoded group does not round-trip: %v", err)
		}
	})
}

// TestEnqueueAfter: a batch enqueued after another store is written only
// once that store has it, the ones behind it wait, and a refusal fails it
// and everything after it unwritten and closes the log to appends.
func TestEnqueueAfter(t *testing.T) {
	l, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g := &gen{rng: rand.New(rand.NewPCG(3, 3))}
	first := make(chan error, 1)
	p1, err := l.EnqueueAfter(g.batch(3), first)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := l.Enqueue(g.batch(2)) // behind p1, ready itself
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if err := p2.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the batch behind one not yet stored elsewhere: %v, want it still waiting", err)
	}
	cancel()
	if l.LastSeq() != 0 {
		t.Fatalf("LastSeq %d before the first batch was stored elsewhere", l.LastSeq())
	}
	first <- nil
	if err := p2.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p1.Wait(context.Background()); err != nil || l.LastSeq() != 5 {
		t.Fatalf("after the other store took it: %v, LastSeq %d, want 5", err, l.LastSeq())
	}

	fenced := errors.New("fenced")
	refuse := make(chan error, 1)
	p3, err := l.EnqueueAfter(g.batch(2), refuse)
	if err != nil {
		t.Fatal(err)
	}
	p4, err := l.Enqueue(g.batch(2))
	if err != nil {
		t.Fatal(err)
	}
	refuse <- fenced
	if err := p3.Wait(context.Background()); !errors.Is(err, fenced) {
		t.Fatalf("refused batch: %v, want the refusal", err)
	}
	if err := p4.Wait(context.Background()); !errors.Is(err, fenced) {
		t.Fatalf("the batch after a refused one: %v, want the refusal", err)
	}
	if _, err := l.Enqueue(g.batch(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("enqueue after a refusal: %v, want ErrClosed", err)
	}
	if l.LastSeq() != 5 {
		t.Fatalf("LastSeq %d after the refusal, want 5: nothing refused is written", l.LastSeq())
	}
	var n int
	if err := l.Scan(1, 0, func(*intents.Event) error { n++; return nil }); err != nil || n != 5 {
		t.Fatalf("the log holds %d events (%v), want 5", n, err)
	}
}
