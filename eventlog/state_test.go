package eventlog

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// stateBatch is a batch of n events from g whose state entries set paths
// s.p0–s.p4 to values of its last event, and records them in want.
func stateBatch(g *gen, n int, want map[string]Entry) *Batch {
	b := g.batch(n)
	last := b.Events[n-1].Seq
	for i := range 1 + g.rng.IntN(3) {
		e := Entry{Path: fmt.Sprintf("s.p%d", (int(last)+i)%5), Kind: KindLeaf, Version: last, ModRev: last,
			Value: json.RawMessage(fmt.Sprint(last))}
		b.State = append(b.State, e)
		want[e.Path] = e
	}
	return b
}

// storedState reads the state entries and their mark as the store holds
// them, without having the committer write what it holds.
func storedState(t *testing.T, db pebble.Reader) (map[string]Entry, uint64) {
	t.Helper()
	got := map[string]Entry{}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{famState}, UpperBound: []byte{famState + 1}})
	if err != nil {
		t.Fatal(err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		e, err := decodeEntry(string(it.Key()[1:]), it.Value())
		if err != nil {
			t.Fatal(err)
		}
		got[e.Path] = e
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		t.Fatal(err)
	}
	mark, found, err := readMeta(db, metaState)
	if err != nil || !found {
		t.Fatalf("the state's mark: %d, %v, %v", mark, found, err)
	}
	return got, mark
}

func equalState(t *testing.T, what string, got, want map[string]Entry) {
	t.Helper()
	if !maps.EqualFunc(got, want, func(a, b Entry) bool {
		return a.Kind == b.Kind && a.Version == b.Version && a.ModRev == b.ModRev && string(a.Value) == string(b.Value)
	}) {
		t.Fatalf("%s: the state holds %v, want %v", what, got, want)
	}
}

// The state entries trail the log as the index does: gathered by the
// committer, the latest of each path, and written with the index; a read
// has them written first, and Close writes them. A crash that loses a
// stretch of them leaves the state stale: nothing moves its mark, or
// writes an entry, until RewriteState puts the whole of it back.
func TestStateTrails(t *testing.T) {
	dir := t.TempDir()
	// Nothing written when idle: the test says when the state is written.
	opts := &Options{NoSync: true, IndexEvery: 1 << 20, indexIdle: time.Hour}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	g := &gen{rng: rand.New(rand.NewPCG(7, 7))}
	want := map[string]Entry{}
	ctx := context.Background()
	// appendN appends n batches of size() events each.
	appendN := func(n int, size func() int) {
		t.Helper()
		for range n {
			if err := l.Append(ctx, stateBatch(g, size(), want)); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendN(50, func() int { return 1 + g.rng.IntN(3) })
	if got, mark := storedState(t, l.db); len(got) != 0 || mark != 0 {
		t.Fatalf("before any read, the store holds %d entries marked complete to %d: want none, to 0", len(got), mark)
	}
	e, err := l.Entry("s.p1")
	if err != nil || string(e.Value) != string(want["s.p1"].Value) {
		t.Fatalf("Entry(s.p1) = %+v, %v; want %s", e, err, want["s.p1"].Value)
	}
	got, mark := storedState(t, l.db)
	equalState(t, "after a read", got, want)
	if mark != l.LastSeq() || l.StateSeq() != mark {
		t.Fatalf("after a read the state is marked complete to %d (StateSeq %d), the log ends at %d", mark, l.StateSeq(), l.LastSeq())
	}
	atMark, markSeq := maps.Clone(want), l.LastSeq()

	appendN(20, func() int { return 2 })
	l = reopenTest(t, l, dir, opts)
	got, mark = storedState(t, l.db)
	equalState(t, "after Close", got, want)
	if mark != l.LastSeq() || l.StateSeq() != mark {
		t.Fatalf("after Close the state is marked complete to %d (StateSeq %d), the log ends at %d", mark, l.StateSeq(), l.LastSeq())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// What a crash after the read above leaves: the entries and mark of
	// then, the events of the 20 batches after it.
	db, err := pebble.Open(dir, &pebble.Options{Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.DeleteRange([]byte{famState}, []byte{famState + 1}, nil)
	for _, e := range atMark {
		b.Set(stateKey(e.Path), appendEntry(nil, e), nil)
	}
	b.Set(metaState, binary.BigEndian.AppendUint64(nil, markSeq), nil)
	if err := errors.Join(b.Commit(pebble.Sync), db.Close()); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	if l.StateSeq() != markSeq {
		t.Fatalf("after the crash StateSeq is %d, want %d", l.StateSeq(), markSeq)
	}
	appendN(10, func() int { return 2 })
	if _, err := l.Export(); err == nil {
		t.Fatal("a log whose state is stale exported")
	}
	l = reopenTest(t, l, dir, opts)
	got, mark = storedState(t, l.db)
	equalState(t, "stale, after appends and Close", got, atMark)
	if mark != markSeq || l.StateSeq() != markSeq {
		t.Fatalf("stale, after appends and Close, the state is marked complete to %d (StateSeq %d), want %d", mark, l.StateSeq(), markSeq)
	}

	// RewriteState puts it back, but not under a batch being appended.
	ready := make(chan error, 1)
	p, err := l.EnqueueAfter(stateBatch(g, 1, want), ready)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RewriteState(nil); err == nil {
		t.Fatal("RewriteState while a batch was being appended succeeded")
	}
	ready <- nil
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.RewriteState(slices.Collect(maps.Values(want))); err != nil {
		t.Fatal(err)
	}
	if l.StateSeq() != l.LastSeq() {
		t.Fatalf("after RewriteState, StateSeq is %d, the log ends at %d", l.StateSeq(), l.LastSeq())
	}
	if err := l.Append(ctx, stateBatch(g, 3, want)); err != nil {
		t.Fatal(err)
	}
	l = reopenTest(t, l, dir, opts)
	defer l.Close()
	got, mark = storedState(t, l.db)
	equalState(t, "after RewriteState, appends and Close", got, want)
	if mark != l.LastSeq() {
		t.Fatalf("after RewriteState, appends and Close, the state is marked complete to %d, the log ends at %d", mark, l.LastSeq())
	}
	exp, err := l.Export()
	if err != nil {
		t.Fatal(err)
	}
	exp.Close()
}
