package replay_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
)

// The state at every point is a fold of the log: a replay up to any seq a
// call ended at gives the hash the live engine had then, with and without
// snapshots on the way.
func TestReplayEquivalence(t *testing.T) {
	for _, every := range []uint64{1 << 40, 97} {
		t.Run(fmt.Sprintf("snapshot-every-%d", every), func(t *testing.T) {
			w := newWriter(t, t.TempDir(), every, every)
			defer w.close()
			for range 800 {
				w.step()
			}
			k := 0
			for seq, want := range w.hashes {
				if k++; k%5 != 0 {
					continue
				}
				eng, err := replay.Run(w.log, replay.Options{Seq: seq})
				if err != nil {
					t.Fatal(err)
				}
				if got := replay.Hash(eng.State()); got != want {
					t.Fatalf("replay to %d: hash %s, the live engine had %s", seq, got, want)
				}
			}
			if hash, err := replay.Verify(w.log, engine.Config{}, nil); err != nil || hash != replay.Hash(w.eng.State()) {
				t.Fatalf("verify: %s, %v", hash, err)
			}
		})
	}
}

// Replays by time stop at the last event at or before it; compaction makes
// earlier points fail clearly, later ones still work.
func TestReplayByTimeAndCompaction(t *testing.T) {
	w := newWriter(t, t.TempDir(), 1<<40, 5)
	defer w.close()
	for range 300 {
		w.step()
	}
	log := w.log
	mid, err := log.Event(log.LastSeq() / 2)
	if err != nil {
		t.Fatal(err)
	}
	byTime, err := replay.Run(log, replay.Options{At: mid.Time})
	if err != nil {
		t.Fatal(err)
	}
	if next, err := log.Event(byTime.Seq() + 1); err == nil && !next.Time.After(mid.Time) {
		t.Fatalf("replay by time stopped at %d but event %d is at %s too", byTime.Seq(), next.Seq, next.Time)
	}
	before := log.LastSeq() / 2
	want, err := replay.Run(log, replay.Options{Seq: before - 1})
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := json.Marshal(want.Snapshot())
	if err := log.SaveSnapshot(before-1, snap); err != nil {
		t.Fatal(err)
	}
	if err := log.Compact(before, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := replay.Run(log, replay.Options{Seq: before - 5}); !errors.Is(err, eventlog.ErrCompacted) {
		t.Fatalf("replay into the compacted past: %v", err)
	}
	got, err := replay.Run(log, replay.Options{Seq: before - 1})
	if err != nil || replay.Hash(got.State()) != replay.Hash(want.State()) {
		t.Fatalf("replay to the compaction point: %v", err)
	}
	if _, err := replay.Verify(log, engine.Config{}, nil); err != nil {
		t.Fatalf("verify after compaction: %v", err)
	}
	last, err := replay.Run(log, replay.Options{})
	if err != nil || replay.Hash(last.State()) != replay.Hash(w.eng.State()) {
		t.Fatalf("replay of everything after compaction: %v", err)
	}
}

// eventlog's Fold, which every replay and restart folds with, decodes only
// an intent event's envelope: the engine's fold must read no more of it.
// The engine folded from Fold must equal, snapshot for snapshot, the one
// folded from Scan, which decodes every event whole; an engine that began
// to fold from what an intent asked for would differ here.
func TestFoldReadsOnlyTheEnvelope(t *testing.T) {
	w := newWriter(t, t.TempDir(), 1<<40, 3)
	defer w.close()
	// Under quotas, an intent event's fold takes a token of its agent.
	r, err := w.eng.SetRules(w.now, []byte(`{"quotas":{"a0":{"intents_per_second":50,"burst":5},"a1":{"intents_per_second":50,"burst":5}}}`), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	w.write(r)
	for range 800 {
		w.step()
	}
	fold := func(read func(from, until uint64, fn func(*intents.Event) error) error) []byte {
		t.Helper()
		eng, err := engine.New(engine.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := read(1, 0, eng.Apply); err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(eng.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	whole, thin := fold(w.log.Scan), fold(w.log.Fold)
	if !bytes.Equal(whole, thin) {
		t.Fatalf("the engine folded from the envelopes differs from the one folded from whole events:\n%s\n%s", thin, whole)
	}
	live, err := json.Marshal(w.eng.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(whole, live) {
		t.Fatal("the folded engine differs from the live one")
	}
}
