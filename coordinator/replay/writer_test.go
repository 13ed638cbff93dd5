package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// writer writes a log as a coordinator's Core does — each call's events
// with the entries of the paths they touched, one batch, and a snapshot
// every so many events — without the coordinator, which this package's
// tests must not need. It submits random intents from a few agents:
// applies, proposes with their commits and aborts, waits, and time passing
// so that leases and waits run out.
type writer struct {
	t        testing.TB
	log      *eventlog.Log
	eng      *engine.Engine
	every    uint64
	lastSnap uint64
	rng      *rand.Rand
	now      time.Time
	n        uint64
	held     []*intents.Decision
	// hashes records the live state's hash after each call, by the seq of
	// its last event: what a replay to that seq must reproduce.
	hashes map[uint64]string
}

// newWriter opens a log in dir and an engine that writes to it, with a
// snapshot every so many events.
func newWriter(t testing.TB, dir string, every, seed uint64) *writer {
	t.Helper()
	log, err := eventlog.Open(dir, &eventlog.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &writer{t: t, log: log, eng: eng, every: every, rng: rand.New(rand.NewPCG(seed, 7)), now: t0,
		hashes: map[uint64]string{}}
}

func (w *writer) close() {
	if err := w.log.Close(); err != nil {
		w.t.Fatal(err)
	}
}

func (w *writer) id() string {
	w.n++
	var u ulid.ULID
	_ = u.SetTime(ulid.Timestamp(t0))
	u[15], u[14], u[13] = byte(w.n), byte(w.n>>8), byte(w.n>>16)
	return u.String()
}

var (
	drvPaths = []string{"doc.a", "doc.b", "doc.c.x", "cnt.n", "list.items"}
	drvOps   = map[string]intents.Op{"doc.a": intents.OpSet, "doc.b": intents.OpSet, "doc.c.x": intents.OpSet, "cnt.n": intents.OpIncr, "list.items": intents.OpAppend}
)

func (w *writer) step() {
	agent := "a" + strconv.Itoa(w.rng.IntN(4))
	p := drvPaths[w.rng.IntN(len(drvPaths))]
	in := &intents.Intent{ID: w.id(), Agent: agent}
	wr := intents.Write{Path: p, Op: drvOps[p], Value: json.RawMessage(strconv.Itoa(w.rng.IntN(50)))}
	switch r := w.rng.IntN(10); {
	case r < 4:
		in.Kind, in.Writes = intents.KindApply, []intents.Write{wr}
		if w.rng.IntN(2) == 0 {
			in.OnConflict, in.WaitMS = intents.OnConflictWait, 3000
		}
	case r < 6:
		in.Kind, in.Writes, in.LeaseMS = intents.KindPropose, []intents.Write{{Path: p, Op: wr.Op}}, 2000
	case r < 8 && len(w.held) > 0:
		i := w.rng.IntN(len(w.held))
		g := w.held[i]
		w.held = append(w.held[:i:i], w.held[i+1:]...)
		in.Agent, in.Txn, in.Fence = g.Agent, g.Txn, g.Fence
		in.Kind = intents.KindAbort
		if w.rng.IntN(3) > 0 {
			in.Kind = intents.KindCommit
		}
	default:
		w.now = w.now.Add(time.Duration(w.rng.IntN(1500)) * time.Millisecond)
		w.write(w.eng.Tick(w.now, nil))
		return
	}
	raw, _ := json.Marshal(in)
	w.write(w.eng.Submit(w.now, engine.Input{Agent: in.Agent, Raw: raw}, nil))
}

// write appends one call's events to the log, durably, with the entries
// of the paths they touched and the records the engine names, and snapshots the engine once every events
// have passed since the last snapshot.
func (w *writer) write(r engine.Ready) {
	w.t.Helper()
	evs := r.Events
	if len(evs) == 0 {
		return
	}
	touched := r.Touched
	slices.Sort(touched)
	var entries []eventlog.Entry
	for _, p := range slices.Compact(touched) {
		entries = append(entries, replay.Entry(w.eng.State(), p))
	}
	if err := w.log.Append(context.Background(), &eventlog.Batch{Events: evs, State: entries, Records: r.Records}); err != nil {
		w.t.Fatal(err)
	}
	if seq := w.eng.Seq(); seq-w.lastSnap >= w.every {
		data, err := json.Marshal(w.eng.Snapshot())
		if err != nil {
			w.t.Fatal(err)
		}
		if err := w.log.SaveSnapshot(seq, data); err != nil {
			w.t.Fatal(err)
		}
		w.lastSnap = seq
	}
	for _, ev := range evs {
		if dec := ev.Decision; dec != nil && dec.Outcome == intents.OutcomeGranted && !dec.Duplicate {
			cp := *dec
			w.held = append(w.held, &cp)
		}
	}
	w.hashes[w.eng.Seq()] = replay.Hash(w.eng.State())
}

// quietLogger keeps Pebble, opened directly to damage a store, from
// writing to the test's output.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)         {}
func (quietLogger) Errorf(string, ...any)        {}
func (quietLogger) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
