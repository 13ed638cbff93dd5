package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/internal/drive"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// writer writes a log as a coordinator's Core does — each call's events
// with the entries of the paths they touched, one batch, and a snapshot
// every so many events — without the coordinator, which this package's
// tests must not need. It submits drive's random traffic.
type writer struct {
	t        testing.TB
	log      *eventlog.Log
	eng      *engine.Engine
	every    uint64
	lastSnap uint64
	tr       *drive.Traffic
	now      time.Time
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
	return &writer{t: t, log: log, eng: eng, every: every, tr: drive.New(seed, t0), now: t0,
		hashes: map[uint64]string{}}
}

func (w *writer) close() {
	if err := w.log.Close(); err != nil {
		w.t.Fatal(err)
	}
}

func (w *writer) step() {
	in := w.tr.Next()
	w.now = w.tr.Now()
	if in == nil {
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
	w.tr.Decided(evs)
	w.hashes[w.eng.Seq()] = replay.Hash(w.eng.State())
}

// quietLogger keeps Pebble, opened directly to damage a store, from
// writing to the test's output.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)         {}
func (quietLogger) Errorf(string, ...any)        {}
func (quietLogger) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
