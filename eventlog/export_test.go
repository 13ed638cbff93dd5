package eventlog

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/coagent/coagent/intents"
)

// storeKeys returns every key and value of the families an export copies,
// events from seq from: what a restored log must hold as its source does.
func storeKeys(t *testing.T, l *Log, from uint64) map[string]string {
	t.Helper()
	it, err := l.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]string{}
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		switch k[0] {
		case famEvent:
			if seqOf(k) < from {
				continue
			}
		case famDecision, famState:
		default:
			continue
		}
		out[string(k)] = string(it.Value())
	}
	return out
}

func TestExportRestore(t *testing.T) {
	src := openTest(t, t.TempDir())
	defer src.Close()
	g := &gen{rng: rand.New(rand.NewPCG(9, 9))}
	ctx := context.Background()
	state := func(i int) []Entry {
		return []Entry{{Path: "r.s", Kind: KindLeaf, Value: []byte{'0' + byte(i%10)}, Version: uint64(i + 1), ModRev: uint64(i + 1)}}
	}
	for i := range 10 {
		b := g.batch(3)
		b.State = state(i)
		d := &intents.Decision{Intent: "I" + string('a'+byte(i)), Agent: "a", Outcome: intents.OutcomeApplied, Rev: uint64(i)}
		b.Events = append(b.Events, &intents.Event{Seq: g.seq + 1, Type: intents.EventDecision, Intent: d.Intent, Agent: "a", Decision: d})
		b.Records = []*intents.Decision{d}
		g.seq++
		if err := src.Append(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.SaveSnapshot(24, []byte("engine at 24")); err != nil {
		t.Fatal(err)
	}
	if err := src.SaveSnapshot(12, []byte("engine at 12")); err != nil {
		t.Fatal(err)
	}
	exp, err := src.Export()
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	// Appends after the view are not in it.
	if err := src.Append(ctx, g.batch(2)); err != nil {
		t.Fatal(err)
	}
	if exp.Snapshot != 24 || exp.From != 24 || exp.Last != 40 {
		t.Fatalf("export at snapshot %d, events %d–%d; want 24, 24–40", exp.Snapshot, exp.From, exp.Last)
	}
	var buf bytes.Buffer
	if _, err := exp.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	snap, last, err := Restore(dir, bytes.NewReader(buf.Bytes()), &Options{NoSync: true})
	if err != nil || snap != 24 || last != 40 {
		t.Fatalf("restore: %d %d %v", snap, last, err)
	}
	dst := openTest(t, dir)
	defer dst.Close()
	if dst.FirstSeq() != 24 || dst.LastSeq() != 40 {
		t.Fatalf("restored log holds %d–%d, want 24–40", dst.FirstSeq(), dst.LastSeq())
	}
	if at, data, err := dst.Snapshot(0); err != nil || at != 24 || string(data) != "engine at 24" {
		t.Fatalf("restored snapshot: %d %q %v", at, data, err)
	}
	if _, _, err := dst.Snapshot(23); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an older snapshot came along: %v", err)
	}
	// The source as of the view: its last batch (events 41–42) left out.
	want := storeKeys(t, src, 24)
	delete(want, string(eventKey(41)))
	delete(want, string(eventKey(42)))
	if got := storeKeys(t, dst, 0); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored %d keys, want %d", len(got), len(want))
	}
	if d, err := dst.Decision("Ia"); err != nil || d.Rev != 0 || d.Agent != "a" {
		t.Fatalf("the record of an intent decided before the snapshot: %+v %v", d, err)
	}
	// The index covers the events after the snapshot, and only those.
	checkQueries(t, dst, scanAll(t, dst), 24)
	if err := dst.Check(); err != nil {
		t.Fatal(err)
	}
	// The restored log goes on from the export's end.
	g.seq = 40
	if err := dst.Append(ctx, g.batch(1)); err != nil {
		t.Fatal(err)
	}

	// Every cut of the export is refused, and so is a changed byte.
	data := buf.Bytes()
	for _, n := range []int{0, 5, len(exportMagic) + 3, len(data) / 2, len(data) - 33, len(data) - 1} {
		if _, _, err := Restore(t.TempDir(), bytes.NewReader(data[:n]), nil); !errors.Is(err, ErrExport) {
			t.Fatalf("an export cut to %d of %d bytes: %v, want ErrExport", n, len(data), err)
		}
	}
	bad := bytes.Clone(data)
	bad[len(bad)/2] ^= 1
	if _, _, err := Restore(t.TempDir(), bytes.NewReader(bad), nil); !errors.Is(err, ErrExport) && !errors.Is(err, ErrCorrupt) {
		t.Fatalf("an export with a changed byte: %v", err)
	}
	if _, _, err := Restore(dir, bytes.NewReader(data), nil); err == nil {
		t.Fatal("restored over a log")
	}
}

// A log compacted to its end exports as its snapshot alone.
func TestExportCompacted(t *testing.T) {
	src := openTest(t, t.TempDir())
	defer src.Close()
	g := &gen{rng: rand.New(rand.NewPCG(3, 3))}
	if err := src.Append(context.Background(), g.batch(5)); err != nil {
		t.Fatal(err)
	}
	if err := src.SaveSnapshot(5, []byte("at 5")); err != nil {
		t.Fatal(err)
	}
	if err := src.Compact(6, nil); err != nil {
		t.Fatal(err)
	}
	exp, err := src.Export()
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	var buf bytes.Buffer
	if _, err := exp.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if snap, last, err := Restore(dir, &buf, nil); err != nil || snap != 5 || last != 5 {
		t.Fatalf("restore: %d %d %v", snap, last, err)
	}
	dst := openTest(t, dir)
	defer dst.Close()
	if dst.FirstSeq() != 6 || dst.LastSeq() != 5 {
		t.Fatalf("restored log: first %d last %d", dst.FirstSeq(), dst.LastSeq())
	}
}

func scanAll(t *testing.T, l *Log) []*intents.Event {
	t.Helper()
	var all []*intents.Event
	if err := l.Scan(l.FirstSeq(), 0, func(ev *intents.Event) error { all = append(all, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	return all
}
