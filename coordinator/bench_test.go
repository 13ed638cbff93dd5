package coordinator

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// The benchmarks of this file measure a restart over a log of about
// 1,000,000 events that a real engine produced:
//
//	BenchmarkReplay1M/fold      engine.New and a fold of the whole log,
//	                            against BenchmarkReplay1M/raw (Pebble's
//	                            iteration, the floor) and /decode (Scan alone)
//	BenchmarkOpenWithSnapshot   OpenCore from a snapshot at the end of that
//	                            log, with no tail and with 10,000 events after it
//
// Each builds its log in its own temporary directory, with the same
// deterministic generator, so both logs hold the same events; building takes
// most of a run (about 30s each, logged), and -count N builds N times:
// prefer -benchtime Nx.

const replayBenchEvents = 1_000_000

// replayGen drives an engine directly with a deterministic mix of intents,
// as agents would: mostly applies (incr and set over a few thousand paths),
// some proposes later committed or aborted, and a few proposes abandoned
// until their leases run out. It appends the events to a log in batches of
// about 1,000, with the materialized state, as the Core would.
type replayGen struct {
	eng      *engine.Engine
	rng      *rand.Rand
	now      time.Time
	n        uint64 // intents submitted
	held     []replayHeld
	out      []*intents.Event
	touched  []string       // the paths the events not yet appended bumped
	outcomes map[string]int // outcome[/reason] of the intents' final decisions
}

type replayHeld struct {
	agent, txn, path string
	fence            uint64
	due              uint64 // the intent count at which it commits or aborts
	abort            bool
}

func newReplayGen(tb testing.TB) *replayGen {
	eng, err := engine.New(engine.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	return &replayGen{eng: eng, rng: rand.New(rand.NewPCG(1, 1_000_000)),
		now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), outcomes: map[string]int{}}
}

func (g *replayGen) id() string {
	var u ulid.ULID
	_ = u.SetTime(ulid.Timestamp(g.now))
	binary.BigEndian.PutUint64(u[8:], g.n)
	return u.String()
}

// step submits one intent and returns its events (valid until the next
// step).
func (g *replayGen) step() []*intents.Event {
	g.n++
	g.now = g.now.Add(time.Millisecond)
	agent := "agent-" + strconv.Itoa(g.rng.IntN(16))
	doc := "docs.d" + strconv.Itoa(g.rng.IntN(500)) + ".s" + strconv.Itoa(g.rng.IntN(4)) + ".text"
	text := json.RawMessage(`"Section draft ` + strconv.FormatUint(g.n, 10) + `: the quick brown fox jumps over the lazy dog."`)
	in := &intents.Intent{ID: g.id(), Agent: agent}
	switch r := g.rng.IntN(100); {
	case len(g.held) > 0 && g.held[0].due <= g.n:
		h := g.held[0]
		g.held = g.held[1:]
		in.Agent, in.Txn, in.Fence = h.agent, h.txn, h.fence
		if h.abort {
			in.Kind = intents.KindAbort
		} else {
			in.Kind, in.Writes = intents.KindCommit, []intents.Write{{Path: h.path, Op: intents.OpSet, Value: text}}
		}
	case r < 48:
		in.Kind, in.Action = intents.KindApply, "count"
		in.Writes = []intents.Write{{Path: "stats.c" + strconv.Itoa(g.rng.IntN(2000)) + ".count", Op: intents.OpIncr,
			Value: json.RawMessage(strconv.Itoa(1 + g.rng.IntN(5)))}}
	case r < 96:
		in.Kind, in.Action = intents.KindApply, "edit"
		in.Writes = []intents.Write{{Path: doc, Op: intents.OpSet, Value: text}}
	default:
		in.Kind, in.Action = intents.KindPropose, "rewrite"
		in.Reads = []intents.Read{{Path: doc}}
		in.Writes = []intents.Write{{Path: doc, Op: intents.OpSet}}
	}
	r := g.eng.Submit(g.now, engine.Input{Agent: in.Agent, Intent: in}, g.out[:0])
	g.out, g.touched = r.Events, append(g.touched, r.Touched...)
	d := g.out[len(g.out)-1].Decision
	key := string(d.Outcome)
	if d.Reason != "" {
		key += "/" + string(d.Reason)
	}
	g.outcomes[key]++
	if in.Kind == intents.KindPropose && d.Outcome == intents.OutcomeGranted {
		switch r := g.rng.IntN(20); {
		case r == 0:
			// Abandoned: its lease (30s, 30,000 intents) runs out.
		default:
			g.held = append(g.held, replayHeld{agent: in.Agent, txn: d.Txn, path: doc, fence: d.Fence,
				due: g.n + 5 + uint64(g.rng.IntN(20)), abort: r < 3})
		}
	}
	return g.out
}

// appendEvents steps until the engine has emitted at least n more events,
// appending them to l in batches of about 1,000 events with the state they
// leave, unsynced, and waits until they are all in the log.
func (g *replayGen) appendEvents(tb testing.TB, l *eventlog.Log, n uint64) {
	tb.Helper()
	until := g.eng.Seq() + n
	var prev *eventlog.Pending
	batch := make([]*intents.Event, 0, 1024)
	flush := func() {
		p, err := l.Enqueue(&eventlog.Batch{Events: batch, State: entries(g.eng.State(), g.touched)})
		g.touched = g.touched[:0]
		if err != nil {
			tb.Fatal(err)
		}
		// Encode the next batch while this one commits, but keep at most
		// two in flight.
		if prev != nil {
			if err := prev.Wait(context.Background()); err != nil {
				tb.Fatal(err)
			}
		}
		prev = p
		batch = make([]*intents.Event, 0, 1024)
	}
	for g.eng.Seq() < until {
		batch = append(batch, g.step()...)
		if len(batch) >= 1000 {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	if err := prev.Wait(context.Background()); err != nil {
		tb.Fatal(err)
	}
	if l.LastSeq() != g.eng.Seq() {
		tb.Fatalf("log ends at %d, engine at %d", l.LastSeq(), g.eng.Seq())
	}
}

// buildReplayLog writes a log of about replayBenchEvents events to dir
// and returns the generator, whose engine is the state after them, and a
// line on how it went.
func buildReplayLog(b *testing.B, dir string) (*replayGen, string) {
	b.Helper()
	start := time.Now()
	l, err := eventlog.Open(dir, &eventlog.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	g := newReplayGen(b)
	g.appendEvents(b, l, replayBenchEvents)
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	return g, fmt.Sprintf("generated %d events (%d intents) with the engine and appended them in %s (%.0f events/s); final decisions: %v",
		g.eng.Seq(), g.n, took.Round(time.Millisecond), float64(g.eng.Seq())/took.Seconds(), g.outcomes)
}

// setupLog shows lines about a parent benchmark's setup in its first
// sub-benchmark (a parent's own log is shown only with -v).
type setupLog []string

func (s *setupLog) add(format string, args ...any) { *s = append(*s, fmt.Sprintf(format, args...)) }

func (s *setupLog) flush(b *testing.B) {
	for _, line := range *s {
		b.Log(line)
	}
	*s = nil
}

// BenchmarkReplay1M measures a full replay of a 1,000,000-event log: fold
// is engine.New and log.Fold(1, 0, eng.Apply), which decodes every event
// as replay does and folds it; decode is a Scan, which decodes every event
// whole, alone; raw is ScanRaw, Pebble's iteration over the same records
// in one goroutine, the floor. One op is one pass over the whole log.
func BenchmarkReplay1M(b *testing.B) {
	dir := b.TempDir()
	g, built := buildReplayLog(b, dir)
	setup := setupLog{built}
	l, err := eventlog.Open(dir, &eventlog.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	total := l.LastSeq()
	perSec := func(b *testing.B) {
		b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	}

	b.Run("raw", func(b *testing.B) {
		setup.flush(b)
		for b.Loop() {
			var n uint64
			err := l.ScanRaw(1, func(uint64, []byte) error { n++; return nil })
			if err != nil || n != total {
				b.Fatalf("scanned %d events: %v", n, err)
			}
		}
		perSec(b)
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var n uint64
			err := l.Scan(1, 0, func(*intents.Event) error { n++; return nil })
			if err != nil || n != total {
				b.Fatalf("scanned %d events: %v", n, err)
			}
		}
		perSec(b)
	})
	b.Run("fold", func(b *testing.B) {
		b.ReportAllocs()
		var eng *engine.Engine
		for b.Loop() {
			var err error
			if eng, err = engine.New(engine.Config{}); err != nil {
				b.Fatal(err)
			}
			if err := l.Fold(1, 0, eng.Apply); err != nil {
				b.Fatal(err)
			}
		}
		perSec(b)
		if eng.Seq() != total || replay.Hash(eng.State()) != replay.Hash(g.eng.State()) {
			b.Fatalf("the fold ends at %d with state %s; the generator at %d with %s",
				eng.Seq(), replay.Hash(eng.State()), g.eng.Seq(), replay.Hash(g.eng.State()))
		}
	})
}

// BenchmarkOpenWithSnapshot measures a restart: OpenCore on the log of
// BenchmarkReplay1M with a snapshot of the engine saved after its last
// event, which restores the snapshot and folds the events after it (none,
// then 10,000), and Close. One op is one open and close of a settled
// store; the first open after writing, which also recovers Pebble's WAL,
// is timed once and logged.
func BenchmarkOpenWithSnapshot(b *testing.B) {
	dir := b.TempDir()
	g, built := buildReplayLog(b, dir)
	setup := setupLog{built}

	l, err := eventlog.Open(dir, &eventlog.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	data, err := json.Marshal(g.eng.Snapshot())
	if err == nil {
		err = l.SaveSnapshot(g.eng.Seq(), data)
	}
	if err == nil {
		err = l.Close()
	}
	if err != nil {
		b.Fatal(err)
	}
	setup.add("snapshot at %d: %d KB, encoded and saved in %s", g.eng.Seq(), len(data)>>10, time.Since(start).Round(time.Millisecond))

	// The first open after writing recovers the WAL the writer left (the
	// writes since its last memtable flush) and may start a compaction; the
	// later ones open a settled store. Measured once, it is logged apart,
	// and the state it rebuilds is checked; the sub-benchmark times opens
	// of the settled store.
	coldOpen := func() {
		start := time.Now()
		c, err := OpenCore(dir, CoreOptions{})
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		if c.Engine().Seq() != g.eng.Seq() || replay.Hash(c.Engine().State()) != replay.Hash(g.eng.State()) {
			b.Fatalf("opened at %d with state %s; the generator is at %d with %s",
				c.Engine().Seq(), replay.Hash(c.Engine().State()), g.eng.Seq(), replay.Hash(g.eng.State()))
		}
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
		setup.add("first open after writing (WAL recovery included): %s, state checked", took.Round(100*time.Microsecond))
	}
	open := func(b *testing.B) {
		setup.flush(b)
		for b.Loop() {
			c, err := OpenCore(dir, CoreOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if c.Engine().Seq() != g.eng.Seq() {
				b.Fatalf("opened at %d, want %d", c.Engine().Seq(), g.eng.Seq())
			}
			if err := c.Close(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed())/1e6/float64(b.N), "ms/open")
	}
	coldOpen()
	b.Run("tail=0", open)

	l, err = eventlog.Open(dir, &eventlog.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	snapAt := g.eng.Seq()
	g.appendEvents(b, l, 10_000)
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	setup.add("tail: %d events after the snapshot at %d", g.eng.Seq()-snapAt, snapAt)
	coldOpen()
	b.Run("tail=10000", open)
}
