package eventlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
	"github.com/oklog/ulid/v2"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func openTest(t testing.TB, dir string) *Log {
	t.Helper()
	l, err := Open(dir, &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// reopenTest closes l, which writes what its committer holds, and opens
// the log in dir again with opts.
func reopenTest(t testing.TB, l *Log, dir string, opts *Options) *Log {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// gen makes varied events: every type, a few agents, transactions and
// paths, so indexes have something to find.
type gen struct {
	rng *rand.Rand
	seq uint64
}

var (
	genAgents = []string{"a", "b", "c"}
	genTraces = []string{"4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"}
	// genIntents are intents with many events, in every index batch.
	genIntents = []string{"01JPA3Z4Y5X6W7V8T9S0R1Q2P3", "01JPA3Z4Y5X6W7V8T9S0R1Q2P4"}
	genPaths   = []string{"r", "r.s", "r.s.t", "r.st", "q.x", "q"}
	genTxns    = []string{"", "", "T1", "T2"}
)

func (g *gen) event() *intents.Event {
	g.seq++
	ev := &intents.Event{Seq: g.seq, Time: t0.Add(time.Duration(g.seq) * time.Millisecond),
		Agent: genAgents[g.rng.IntN(len(genAgents))], Txn: genTxns[g.rng.IntN(len(genTxns))]}
	ev.ID[15] = byte(g.seq)
	// Some events are traced, by their seq alone: the rng's draws stay
	// those of the logs written before traces.
	switch {
	case g.seq%3 == 0:
		ev.Trace = genTraces[0]
	case g.seq%5 == 0:
		ev.Trace = genTraces[1]
	}
	p := genPaths[g.rng.IntN(len(genPaths))]
	in := &intents.Intent{ID: ulid.Make().String(), Agent: ev.Agent, Kind: intents.KindApply,
		Writes: []intents.Write{{Path: p, Op: intents.OpSet, Value: json.RawMessage(`1`)}}}
	// Some events are of one of genIntents, by their seq alone too.
	switch {
	case g.seq%4 == 1:
		in.ID = genIntents[0]
	case g.seq%7 == 2:
		in.ID = genIntents[1]
	}
	ev.Intent = in.ID
	switch g.rng.IntN(7) {
	case 0:
		ev.Type, ev.Received = intents.EventIntent, &intents.Received{Intent: in}
	case 1:
		ev.Type, ev.Decision = intents.EventDecision, &intents.Decision{Intent: in.ID, Agent: ev.Agent, Outcome: intents.OutcomeApplied}
	case 2:
		ev.Type, ev.Change = intents.EventChange, &intents.Change{Writes: []intents.Applied{{Path: p, Op: intents.OpSet, Value: json.RawMessage(`2`), NewVersion: 1}}}
	case 3:
		ev.Type, ev.Grant = intents.EventGrant, &intents.Grant{Txn: "T1", Agent: ev.Agent, Fence: 1, Expires: t0, Propose: in}
	case 4:
		ev.Type, ev.Wait = intents.EventWait, &intents.Wait{Intent: in, Deadline: t0, Conflicts: []intents.Conflict{{Path: p, Kind: intents.ConflictWriteWrite}}}
	case 5:
		ev.Type, ev.Notice = intents.EventNotice, &intents.Notice{Kind: intents.NoticeWaiting, Detail: "x"}
	default: // a rules change names paths in its file, but concerns none (pathsOf)
		file := json.RawMessage(`{"rules":[{"pattern":"` + p + `","writers":["` + ev.Agent + `"]}]}`)
		ev.Type, ev.Intent, ev.Txn = intents.EventRules, "", ""
		ev.Rules = &intents.Rules{File: file, Hash: fmt.Sprintf("%064x", g.seq), Source: "api"}
	}
	return ev
}

func (g *gen) batch(n int) *Batch {
	b := &Batch{}
	for range n {
		b.Events = append(b.Events, g.event())
	}
	return b
}

func TestAppendScanReopen(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, dir)
	g := &gen{rng: rand.New(rand.NewPCG(1, 1))}
	var all []*intents.Event
	for range 50 {
		b := g.batch(1 + g.rng.IntN(5))
		b.State = []Entry{{Path: "r.s", Kind: KindLeaf, Value: json.RawMessage(fmt.Sprint(g.seq)), Version: g.seq, ModRev: g.seq}}
		if err := l.Append(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		all = append(all, b.Events...)
	}
	check := func(l *Log) {
		t.Helper()
		if l.LastSeq() != g.seq {
			t.Fatalf("LastSeq %d, want %d", l.LastSeq(), g.seq)
		}
		var got []*intents.Event
		if err := l.Scan(1, 0, func(ev *intents.Event) error { got = append(got, ev); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(all) {
			t.Fatalf("scanned %d events, appended %d", len(got), len(all))
		}
		for i := range got {
			a, _ := json.Marshal(got[i])
			b, _ := json.Marshal(all[i])
			if !bytes.Equal(a, b) {
				t.Fatalf("event %d:\n got %s\nwant %s", i+1, a, b)
			}
		}
		e, err := l.Entry("r.s")
		if err != nil || string(e.Value) != fmt.Sprint(g.seq) || e.Version != g.seq {
			t.Fatalf("entry r.s = %+v, %v", e, err)
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTest(t, dir)
	defer l.Close()
	check(l)
	// The log continues where it stopped, and nowhere else.
	if _, err := l.Enqueue(&Batch{Events: []*intents.Event{{Seq: g.seq + 2, Type: intents.EventNotice, Notice: &intents.Notice{}}}}); !errors.Is(err, ErrSequence) {
		t.Fatalf("a gap: %v, want ErrSequence", err)
	}
	if _, err := l.Enqueue(&Batch{Events: []*intents.Event{{Seq: g.seq, Type: intents.EventNotice, Notice: &intents.Notice{}}}}); !errors.Is(err, ErrSequence) {
		t.Fatalf("a repeat: %v, want ErrSequence", err)
	}
}

// Many writers share commits, each returns only once its batch is durable,
// and the log holds every batch whole and in the order it was enqueued.
func TestGroupCommitConcurrent(t *testing.T) {
	l, err := Open(t.TempDir(), nil) // synced, as in production
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var mu sync.Mutex
	g := &gen{rng: rand.New(rand.NewPCG(2, 2))}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				mu.Lock()
				b := g.batch(3)
				for _, ev := range b.Events {
					ev.Agent = fmt.Sprintf("w%d", w)
				}
				p, err := l.Enqueue(b)
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				if err := p.Wait(context.Background()); err != nil {
					t.Error(err)
					return
				}
				if l.LastSeq() < p.Last() {
					t.Errorf("Wait returned before seq %d was durable (last %d)", p.Last(), l.LastSeq())
				}
			}
		}()
	}
	wg.Wait()
	if l.LastSeq() != 16*20*3 {
		t.Fatalf("LastSeq %d", l.LastSeq())
	}
	// Each writer's batches of 3 are contiguous and whole.
	var agents []string
	if err := l.Scan(1, 0, func(ev *intents.Event) error { agents = append(agents, ev.Agent); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(agents); i += 3 {
		if agents[i] != agents[i+1] || agents[i] != agents[i+2] {
			t.Fatalf("batch at %d is interleaved: %v", i+1, agents[i:i+3])
		}
	}
}

// Index queries return exactly what a full scan filtered the same way
// returns, in order, with paging.
//
// The batches are enqueued without waiting, so the committer writes many
// in one group, with posting lists that span batches; then the log is
// compacted in the middle of such a list, and the queries are asked again.
func TestQueryMatchesScan(t *testing.T) {
	// The index trails by at most 37 events (and never catches up on its
	// own here): queries read both the index and the events after it.
	dir := t.TempDir()
	opts := &Options{NoSync: true, IndexEvery: 37, indexIdle: time.Hour}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { l.Close() }()
	g := &gen{rng: rand.New(rand.NewPCG(3, 3))}
	firsts := map[uint64]bool{} // the first seq of each batch
	var pending []*Pending
	enqueue := func(n int) {
		b := g.batch(n)
		firsts[b.Events[0].Seq] = true
		p, err := l.Enqueue(b)
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, p)
	}
	wait := func() {
		for _, p := range pending {
			if err := p.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		pending = pending[:0]
	}
	for range 200 {
		enqueue(1 + g.rng.IntN(4))
	}
	wait()
	// Then small groups, so that index batches start at many points near
	// the end, where the crash below loses them: the committer may have
	// taken all 200 batches above as one group.
	for range 40 {
		for range 3 {
			enqueue(1 + g.rng.IntN(4))
		}
		wait()
	}
	if l.indexedForTest(t) == l.LastSeq() {
		enqueue(1) // leave events after the index
		wait()
	}
	if indexed := l.indexedForTest(t); indexed == 0 || indexed == l.LastSeq() {
		t.Fatalf("the index ends at %d of %d events: want some events on each side", indexed, l.LastSeq())
	}
	var all []*intents.Event
	if err := l.Scan(1, 0, func(ev *intents.Event) error { all = append(all, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, l, all, 0)

	// Compact at the first batch that shares a posting list with an
	// earlier one.
	var at uint64
	for _, seqs := range indexPostings(t, l) {
		for _, seq := range seqs[1:] {
			if firsts[seq] && (at == 0 || seq < at) {
				at = seq
			}
		}
	}
	if at == 0 {
		t.Fatal("no posting list spans two batches")
	}
	if err := l.SaveSnapshot(at-1, []byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := l.Compact(at, nil); err != nil {
		t.Fatal(err)
	}
	for key, seqs := range indexPostings(t, l) {
		if seqs[0] < at {
			t.Fatalf("after compacting before %d, index key %q holds %v", at, key, seqs)
		}
	}
	checkQueries(t, l, all, at)

	// A crash that loses the index of the last events: Open indexes them.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(dir, &pebble.Options{Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	// The index is lost after a point no posting list straddles, as a
	// crash loses whole index batches.
	lists := indexPostings(t, &Log{db: db})
	for key, seqs := range lists {
		if seqs[0] < at {
			t.Fatalf("after compacting before %d and closing, index key %q holds %v", at, key, seqs)
		}
	}
	lost := uint64(len(all)) - 50
	for straddled := true; straddled; {
		straddled = false
		for _, seqs := range lists {
			if seqs[0] <= lost && seqs[len(seqs)-1] > lost {
				lost, straddled = seqs[0]-1, true
			}
		}
	}
	if lost <= at {
		t.Fatalf("no index batch to lose after %d", at)
	}
	var keys [][]byte
	for key, seqs := range lists {
		if seqs[0] > lost {
			keys = append(keys, []byte(key))
		}
	}
	b := db.NewBatch()
	for _, k := range keys {
		b.Delete(k, nil)
	}
	b.Set(metaIndexed, binary.BigEndian.AppendUint64(nil, lost), nil)
	if err := errors.Join(b.Commit(pebble.Sync), db.Close()); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	if indexed := l.indexedForTest(t); indexed != l.LastSeq() {
		t.Fatalf("after Open the index ends at %d, the log at %d", indexed, l.LastSeq())
	}
	checkQueries(t, l, all, at)

	// Compacting events the index does not hold yet drops them from it too.
	if err := l.Append(context.Background(), g.batch(5)); err != nil {
		t.Fatal(err)
	}
	if indexed := l.indexedForTest(t); indexed > l.LastSeq()-5 {
		t.Fatalf("the index ends at %d of %d events: want the last 5 after it", indexed, l.LastSeq())
	}
	at = l.LastSeq() - 1
	if err := l.SaveSnapshot(at-1, []byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := l.Compact(at, nil); err != nil {
		t.Fatal(err)
	}
	all = all[:0]
	if err := l.Scan(at, 0, func(ev *intents.Event) error { all = append(all, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, l, all, at)
	l = reopenTest(t, l, dir, opts)
	for key, seqs := range indexPostings(t, l) {
		if seqs[0] < at {
			t.Fatalf("after compacting before %d and reopening, index key %q holds %v", at, key, seqs)
		}
	}
}

// TestIndexWhenIdle: events short of IndexEvery are indexed on their own
// once the log is idle, without waiting for more appends or Close.
func TestIndexWhenIdle(t *testing.T) {
	written := make(chan uint64, 16)
	l, err := Open(t.TempDir(), &Options{NoSync: true, indexIdle: time.Millisecond,
		indexWritten: func(seq uint64) { written <- seq }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g := &gen{rng: rand.New(rand.NewPCG(10, 10))}
	if err := l.Append(context.Background(), g.batch(5)); err != nil {
		t.Fatal(err)
	}
	select {
	case seq := <-written:
		if seq != l.LastSeq() {
			t.Fatalf("indexed to %d, the log ends at %d", seq, l.LastSeq())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the idle log did not index its events")
	}
	if indexed := l.indexedForTest(t); indexed != l.LastSeq() {
		t.Fatalf("m indexed is %d, the log ends at %d", indexed, l.LastSeq())
	}
	if len(indexPostings(t, l)) == 0 {
		t.Fatal("no index key written")
	}
}

// indexedForTest reads where the index ends.
func (l *Log) indexedForTest(t *testing.T) uint64 {
	t.Helper()
	seq, found, err := readMeta(l.db, metaIndexed)
	if err != nil || !found {
		t.Fatalf("where the index ends: %d, %v, %v", seq, found, err)
	}
	return seq
}

// TestQueryOlderSubtreeIndex reads a log written before the subtree index
// left a path itself to the exact index: its subtree keys hold the path
// too, so those events come from two lists and must come once. The older
// subtree index is written here a key per event, as before posting lists.
func TestQueryOlderSubtreeIndex(t *testing.T) {
	l := openTest(t, t.TempDir())
	defer l.Close()
	g := &gen{rng: rand.New(rand.NewPCG(8, 8))}
	for range 20 {
		if err := l.Append(context.Background(), g.batch(1+g.rng.IntN(8))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.flushIndex(); err != nil {
		t.Fatal(err)
	}
	var all []*intents.Event
	if err := l.Scan(1, 0, func(ev *intents.Event) error { all = append(all, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	older := l.db.NewBatch()
	subtree := []byte{famIndex, idxSubtree}
	if err := older.DeleteRange(subtree, prefixEnd(subtree), nil); err != nil {
		t.Fatal(err)
	}
	for _, ev := range all {
		for _, p := range pathsOf(ev) {
			ancestors(p+".", func(pre string) { // every prefix, the path itself too
				if err := older.Set(indexKey(nil, idxSubtree, pre, ev.Seq), nil, nil); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
	if older.Count() == 0 {
		t.Fatal("no event concerns a path")
	}
	if err := older.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, l, all, 0)
}

// indexPostings reads every index key of l and its posting list.
func indexPostings(t *testing.T, l *Log) map[string][]uint64 {
	t.Helper()
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famIndex}, UpperBound: []byte{famIndex + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string][]uint64{}
	for valid := it.First(); valid; valid = it.Next() {
		seqs, err := readPostings(nil, it.Key(), it.Value())
		if err != nil {
			t.Fatal(err)
		}
		out[string(it.Key())] = seqs
	}
	return out
}

// checkQueries asks l many queries and compares the answers with all, the
// log's events from 1, filtered; events before first were compacted.
func checkQueries(t *testing.T, l *Log, all []*intents.Event, first uint64) {
	t.Helper()
	queries := []Query{{}, {Agent: "a"}, {Type: intents.EventChange}, {Txn: "T2"}, {Agent: "b", Type: intents.EventGrant},
		{Type: intents.EventRules}, {Agent: "c", Type: intents.EventRules}, {Path: "r", Type: intents.EventRules},
		{Trace: genTraces[0]}, {Trace: genTraces[1], Agent: "a"}, {Trace: genTraces[0], Type: intents.EventGrant, Txn: "T1"},
		{Trace: genTraces[1], Path: genPaths[0]}, {Trace: "11111111111111111111111111111111"},
		{Intent: genIntents[0]}, {Intent: genIntents[1], Agent: "a"}, {Intent: genIntents[0], Type: intents.EventDecision},
		{Intent: genIntents[1], Trace: genTraces[0]}, {Intent: genIntents[0], Txn: "T2"}, {Intent: genIntents[1], Path: genPaths[1]},
		{Intent: "01JPA3Z4Y5X6W7V8T9S0R1Q2P5"}}
	for _, p := range append(slices.Clone(genPaths), "r.s.t.u", "zz") {
		queries = append(queries, Query{Path: p}, Query{Path: p, Agent: "c"}, Query{Path: p, Type: intents.EventWait, Txn: "T1"})
	}
	for _, q := range queries {
		for _, from := range []uint64{0, 17, 300} {
			q := q
			q.From = from
			var want []uint64
			for _, ev := range all {
				if ev.Seq >= from && ev.Seq >= first && q.matches(ev) {
					want = append(want, ev.Seq)
				}
			}
			// Page through with a small limit.
			var got []uint64
			q.Limit = 7
			for {
				evs, next, err := l.Query(q)
				if err != nil {
					t.Fatal(err)
				}
				for _, ev := range evs {
					got = append(got, ev.Seq)
				}
				if next == 0 {
					break
				}
				q.From = next
			}
			if !slices.Equal(got, want) {
				t.Errorf("query %+v: got %v, want %v", q, got, want)
			}
		}
	}
	// An intent's events are those that name it, whichever index drives.
	for _, id := range genIntents {
		var want []uint64
		for _, ev := range all {
			if ev.Seq >= first && ev.Intent == id {
				want = append(want, ev.Seq)
			}
		}
		evs, _, err := l.Query(Query{Intent: id, Limit: 1 << 20})
		got := make([]uint64, len(evs))
		for i, ev := range evs {
			got[i] = ev.Seq
		}
		if err != nil || !slices.Equal(got, want) || first <= 1 && len(want) == 0 {
			t.Errorf("intent %s: %v, %v; want %v", id, got, err, want)
		}
	}
	// Rules events come back by type, with their payload, and by no path.
	// The whole log holds some; what a compaction leaves may hold none.
	rules := 0
	for _, ev := range all {
		if ev.Seq >= first && ev.Type == intents.EventRules {
			rules++
		}
	}
	if first <= 1 && rules == 0 {
		t.Fatal("the log holds no rules events to query")
	}
	evs, _, err := l.Query(Query{Type: intents.EventRules, Limit: 1000})
	if err != nil || len(evs) != rules {
		t.Fatalf("rules events: %d, %v; want %d", len(evs), err, rules)
	}
	for _, ev := range evs {
		if ev.Rules == nil || len(ev.Rules.File) == 0 || len(ev.Rules.Hash) != 64 {
			t.Fatalf("rules event %d: payload %+v", ev.Seq, ev.Rules)
		}
	}
	for _, p := range genPaths {
		if evs, _, err := l.Query(Query{Path: p, Type: intents.EventRules}); err != nil || len(evs) != 0 {
			t.Errorf("rules events by path %s: %d, %v", p, len(evs), err)
		}
	}
}

func TestPathMatchesOverlap(t *testing.T) {
	ev := &intents.Event{Type: intents.EventChange, Change: &intents.Change{Writes: []intents.Applied{{Path: "report.s1.intro"}}}}
	for p, want := range map[string]bool{"report": true, "report.s1": true, "report.s1.intro": true,
		"report.s1.intro.x": true, "report.s1.introx": false, "report.s2": false, "other": false} {
		q := Query{Path: p}
		if got := q.matches(ev); got != want {
			t.Errorf("path %s matches %v, want %v", p, got, want)
		}
	}
}

func TestCompact(t *testing.T) {
	l := openTest(t, t.TempDir())
	defer l.Close()
	g := &gen{rng: rand.New(rand.NewPCG(4, 4))}
	for range 30 {
		if err := l.Append(context.Background(), g.batch(2)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Compact(21, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("compact without a snapshot: %v", err)
	}
	if err := l.SaveSnapshot(20, []byte("state after 20")); err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	if err := l.Compact(21, &archive); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(archive.String(), "\n"); n != 20 {
		t.Fatalf("archived %d events, want 20", n)
	}
	if l.FirstSeq() != 21 {
		t.Fatalf("FirstSeq %d", l.FirstSeq())
	}
	if _, err := l.Event(5); !errors.Is(err, ErrCompacted) {
		t.Fatalf("event 5 after compaction: %v", err)
	}
	if err := l.Scan(1, 0, func(*intents.Event) error { return nil }); !errors.Is(err, ErrCompacted) {
		t.Fatalf("scan from 1: %v", err)
	}
	evs, _, err := l.Query(Query{Limit: 1000})
	if err != nil || len(evs) != 40 || evs[0].Seq != 21 {
		t.Fatalf("query after compaction: %d events from %v, %v", len(evs), evs[0].Seq, err)
	}
	evs, _, _ = l.Query(Query{Agent: "a", Limit: 1000})
	for _, ev := range evs {
		if ev.Seq < 21 {
			t.Fatalf("the agent index still names compacted event %d", ev.Seq)
		}
	}
	if at, data, err := l.Snapshot(0); err != nil || at != 20 || string(data) != "state after 20" {
		t.Fatalf("snapshot after compaction: %d %q %v", at, data, err)
	}
}

// A damaged record is an error naming its seq; the others stay readable.
func TestCorruptRecord(t *testing.T) {
	l := openTest(t, t.TempDir())
	defer l.Close()
	g := &gen{rng: rand.New(rand.NewPCG(5, 5))}
	if err := l.Append(context.Background(), g.batch(5)); err != nil {
		t.Fatal(err)
	}
	v, closer, _ := l.db.Get(eventKey(3))
	damaged := bytes.Clone(v)
	closer.Close()
	for name, rec := range map[string][]byte{
		"truncated": damaged[:len(damaged)/2],
		"version":   append([]byte{99}, damaged[1:]...),
		"garbage":   []byte("not a record"),
	} {
		if err := l.db.Set(eventKey(3), rec, pebble.Sync); err != nil {
			t.Fatal(err)
		}
		_, err := l.Event(3)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Seq != 3 {
			t.Errorf("%s: %v, want a CorruptError at 3", name, err)
		}
		for scan, f := range map[string]func(uint64, uint64, func(*intents.Event) error) error{"scan": l.Scan, "fold": l.Fold} {
			var seen []uint64
			err = f(1, 0, func(ev *intents.Event) error { seen = append(seen, ev.Seq); return nil })
			if !errors.As(err, &ce) || ce.Seq != 3 || !strings.Contains(err.Error(), "event 3") || !slices.Equal(seen, []uint64{1, 2}) {
				t.Errorf("%s: %s: %v after %v", name, scan, err, seen)
			}
		}
		if _, err := l.Event(4); err != nil {
			t.Errorf("%s: event 4 unreadable: %v", name, err)
		}
		if err := l.Scan(4, 0, func(*intents.Event) error { return nil }); err != nil {
			t.Errorf("%s: scan from 4: %v", name, err)
		}
	}
}

// A damaged posting list is an error that names its key, for the queries
// it drives; the other indexes keep working.
func TestCorruptPostings(t *testing.T) {
	l, err := Open(t.TempDir(), &Options{NoSync: true, IndexEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g := &gen{rng: rand.New(rand.NewPCG(6, 6))}
	if err := l.Append(context.Background(), g.batch(40)); err != nil {
		t.Fatal(err)
	}
	key := indexKey(nil, idxAgent, "a", 0)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: key[:len(key)-8], UpperBound: prefixEnd(key[:len(key)-8])})
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() {
		t.Fatal("no events of agent a")
	}
	key = bytes.Clone(it.Key())
	it.Close()
	for name, value := range map[string][]byte{"truncated gap": {0x80}, "zero gap": {0x00}} {
		if err := l.db.Set(key, value, pebble.Sync); err != nil {
			t.Fatal(err)
		}
		_, _, err := l.Query(Query{Agent: "a"})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "index key") {
			t.Errorf("%s: query by the agent: %v, want a corrupt index key", name, err)
		}
		if evs, _, err := l.Query(Query{Agent: "b"}); err != nil || len(evs) == 0 {
			t.Errorf("%s: query by another agent: %d events, %v", name, len(evs), err)
		}
	}
}

// Fold hands over what Scan does, in order, but for the bodies of received
// intents, across many chunks of the reading goroutines; an error from fn
// ends either at once with that error.
func TestFoldMatchesScan(t *testing.T) {
	l := openTest(t, t.TempDir())
	defer l.Close()
	g := &gen{rng: rand.New(rand.NewPCG(9, 9))}
	const total = 5*scanChunkLen + 17
	for range total / 100 {
		if err := l.Append(context.Background(), g.batch(100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Append(context.Background(), g.batch(total%100)); err != nil {
		t.Fatal(err)
	}
	var scanned []*intents.Event
	if err := l.Scan(1, 0, func(ev *intents.Event) error { scanned = append(scanned, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(scanned) != total {
		t.Fatalf("scanned %d events, want %d", len(scanned), total)
	}
	var folded int
	received := 0
	err := l.Fold(1, 0, func(ev *intents.Event) error {
		if want := thinned(scanned[folded]); !reflect.DeepEqual(ev, want) {
			t.Fatalf("event %d: fold gave %+v, want %+v", folded+1, ev, want)
		}
		if ev.Received != nil && ev.Received.Intent != nil {
			received++
		}
		folded++
		return nil
	})
	if err != nil || folded != total || received == 0 {
		t.Fatalf("folded %d events (%d intents): %v", folded, received, err)
	}

	stop := errors.New("enough")
	for _, at := range []int{1, scanChunkLen, scanChunkLen + 1, total} {
		for name, f := range map[string]func(uint64, uint64, func(*intents.Event) error) error{"scan": l.Scan, "fold": l.Fold} {
			n := 0
			err := f(1, 0, func(*intents.Event) error {
				if n++; n == at {
					return stop
				}
				return nil
			})
			if err != stop || n != at {
				t.Errorf("%s stopped at %d: called %d times, returned %v", name, at, n, err)
			}
		}
	}

	// Ranges, and a damaged record in a chunk of the second decoder: the
	// events before it come, then its error, and nothing after it.
	for _, r := range [][2]uint64{{1, 1}, {300, 0}, {200, 700}, {total, 0}} {
		var seqs []uint64
		err := l.Fold(r[0], r[1], func(ev *intents.Event) error { seqs = append(seqs, ev.Seq); return nil })
		last := r[1]
		if last == 0 {
			last = total
		}
		if err != nil || len(seqs) != int(last-r[0]+1) || seqs[0] != r[0] || seqs[len(seqs)-1] != last {
			t.Errorf("fold %d..%d: %d events from %v: %v", r[0], r[1], len(seqs), seqs[:min(len(seqs), 1)], err)
		}
	}
	bad := uint64(scanChunkLen + 40)
	if err := l.db.Set(eventKey(bad), []byte("not a record"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(uint64, uint64, func(*intents.Event) error) error{"scan": l.Scan, "fold": l.Fold} {
		var seqs []uint64
		err := f(1, 0, func(ev *intents.Event) error { seqs = append(seqs, ev.Seq); return nil })
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Seq != bad || len(seqs) != int(bad-1) || seqs[len(seqs)-1] != bad-1 {
			t.Errorf("%s over a damaged %d: %d events, the last %d: %v", name, bad, len(seqs), seqs[len(seqs)-1], err)
		}
	}
}

// The log keeps the idempotency records its batches name, a later one of
// an id replacing an earlier, across batches too, and no other: a decision
// the batch does not name as a record (a duplicate, another agent's use of
// the id) leaves the record as it was. Which decisions take their ids is
// the engine's rule (engine.Ready.Records), not the log's.
func TestDecisionRecords(t *testing.T) {
	l := openTest(t, t.TempDir())
	defer l.Close()
	var seq uint64
	batch := func(ds []intents.Decision, records ...int) *Batch {
		b := &Batch{}
		for i := range ds {
			seq++
			d := &ds[i]
			b.Events = append(b.Events, &intents.Event{Seq: seq, Type: intents.EventDecision, Intent: d.Intent, Agent: d.Agent, Decision: d})
		}
		for _, i := range records {
			b.Records = append(b.Records, &ds[i])
		}
		return b
	}
	if err := l.Append(context.Background(), batch([]intents.Decision{
		{Intent: "I1", Agent: "a", Outcome: intents.OutcomeQueued},
		{Intent: "I1", Agent: "a", Outcome: intents.OutcomeApplied, Rev: 9},
		{Intent: "I1", Agent: "b", Outcome: intents.OutcomeRejected, Reason: intents.ReasonInvalid},
		{Intent: "I2", Agent: "b", Outcome: intents.OutcomeRejected, Reason: intents.ReasonUnauthorized},
		{Intent: "I3", Agent: "c", Outcome: intents.OutcomeQueued},
	}, 0, 1, 4)); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(context.Background(), batch([]intents.Decision{
		{Intent: "I1", Agent: "b", Outcome: intents.OutcomeRejected, Reason: intents.ReasonInvalid},
		{Intent: "I1", Agent: "a", Outcome: intents.OutcomeApplied, Rev: 9, Duplicate: true},
		{Intent: "I3", Agent: "c", Outcome: intents.OutcomeApplied, Rev: 12},
	}, 2)); err != nil {
		t.Fatal(err)
	}
	d, err := l.Decision("I1")
	if err != nil || d.Agent != "a" || d.Outcome != intents.OutcomeApplied || d.Rev != 9 || d.Duplicate {
		t.Fatalf("record of I1: %+v, %v", d, err)
	}
	if _, err := l.Decision("I2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a decision no batch named took I2: %v", err)
	}
	if d, err := l.Decision("I3"); err != nil || d.Outcome != intents.OutcomeApplied || d.Rev != 12 {
		t.Fatalf("record of I3, replaced by a later batch: %+v, %v", d, err)
	}
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// A query names an intent by its ULID: anything else is an error naming it.
func TestQueryIntentInvalid(t *testing.T) {
	l := openTest(t, t.TempDir())
	defer l.Close()
	for _, id := range []string{"abc", "01JPA3Z4Y5X6W7V8T9S0R1Q2P", "01JPA3Z4Y5X6W7V8T9S0R1Q2PU", genIntents[0] + "\x00"} {
		_, _, err := l.Query(Query{Intent: id})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("query intent %q", id)) {
			t.Errorf("intent %q: %v", id, err)
		}
	}
}

// A query names a trace by its id: anything else is an error naming it.
func TestQueryTraceInvalid(t *testing.T) {
	l := openTest(t, t.TempDir())
	defer l.Close()
	for _, trace := range []string{"abc", strings.ToUpper(genTraces[0]), strings.Repeat("0", 32)} {
		_, _, err := l.Query(Query{Trace: trace})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("query trace %q", trace)) {
			t.Errorf("trace %q: %v", trace, err)
		}
	}
}

// TestIntentIndexOfAnOlderLog: a log indexed before the intent index
// existed, and one whose tail a build from before it appended, answer
// intent queries once opened, Open indexing by intent the events the
// index lacks, in batches; compacted, too.
func TestIntentIndexOfAnOlderLog(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{NoSync: true, IndexEvery: 16, intentBatch: 10}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	g := &gen{rng: rand.New(rand.NewPCG(3, 3))}
	var all []*intents.Event
	for range 60 {
		b := g.batch(1 + g.rng.IntN(8))
		if err := l.Append(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		all = append(all, b.Events...)
	}
	if err := l.flushIndex(); err != nil {
		t.Fatal(err)
	}
	// forget drops the intent index, and keeps of it the events to k (one
	// posting list each) and the mark that says so: k 0 is a log from
	// before it, any other k one a build from before it appended to.
	forget := func(k uint64) {
		t.Helper()
		err := l.db.DeleteRange([]byte{famIndex, idxIntent}, []byte{famIndex, idxIntent + 1}, pebble.Sync)
		for _, ev := range all {
			if err == nil && ev.Seq <= k && ev.Intent != "" {
				err = l.db.Set(indexKey(nil, idxIntent, ev.Intent, ev.Seq), nil, pebble.Sync)
			}
		}
		if err == nil && k == 0 {
			err = l.db.Delete(metaIntents, pebble.Sync)
		} else if err == nil {
			err = l.db.Set(metaIntents, binary.BigEndian.AppendUint64(nil, k), pebble.Sync)
		}
		if err != nil {
			t.Fatal(err)
		}
		// Without its intent index the log answers wrongly: what Open
		// mends is missing.
		evs, _, err := l.Query(Query{Intent: genIntents[0], Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 0 && evs[len(evs)-1].Seq > k {
			t.Fatalf("with the intent index after %d forgotten, the events of %s are found to %d", k, genIntents[0], evs[len(evs)-1].Seq)
		}
	}
	first := uint64(1)
	for _, k := range []uint64{0, 37, l.LastSeq() - 3} {
		forget(k)
		l = reopenTest(t, l, dir, opts)
		if done, _, err := readMeta(l.db, metaIntents); err != nil || done != l.LastSeq() {
			t.Fatalf("after Open the intent index is complete to %d (%v), want %d", done, err, l.LastSeq())
		}
		checkQueries(t, l, all, first)
		if k == 37 {
			// The log compacted, then forgotten after its first event kept.
			first = 50
			if err := l.SaveSnapshot(first-1, []byte("state")); err != nil {
				t.Fatal(err)
			}
			if err := l.Compact(first, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
