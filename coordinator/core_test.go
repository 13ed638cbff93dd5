package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/drive"
	"github.com/oklog/ulid/v2"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// driver submits drive's random traffic to a Core, as agents would.
type driver struct {
	t   testing.TB
	c   *Core
	tr  *drive.Traffic
	now time.Time
}

func newDriver(t testing.TB, c *Core, seed uint64) *driver {
	return &driver{t: t, c: c, tr: drive.New(seed, t0), now: t0}
}

func (d *driver) step() {
	in := d.tr.Next()
	d.now = d.tr.Now()
	if in == nil {
		evs := d.c.Tick(d.now)
		p, err := d.c.Commit()
		d.settle(evs, p, err)
		return
	}
	raw, _ := json.Marshal(in)
	evs, pend, err := d.c.Submit(d.now, in.Agent, raw)
	d.settle(evs, pend, err)
}

func (d *driver) settle(evs []*intents.Event, p *Group, err error) {
	d.t.Helper()
	if err != nil {
		d.t.Fatal(err)
	}
	if p == nil {
		return
	}
	if err := p.Wait(context.Background()); err != nil {
		d.t.Fatal(err)
	}
	d.tr.Decided(evs)
}

func openCore(t testing.TB, dir string, every uint64) *Core {
	t.Helper()
	c, err := OpenCore(dir, CoreOptions{SnapshotEvery: every, Log: eventlog.Options{NoSync: true}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A reopened Core is the engine it was: same state, transactions, leases
// and parked intents, and it goes on deciding the same way.
func TestReopenContinues(t *testing.T) {
	for _, every := range []uint64{1 << 40, 50} {
		dir := t.TempDir()
		c := openCore(t, dir, every)
		d := newDriver(t, c, 11)
		for range 400 {
			d.step()
		}
		before := c.Engine()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		c2 := openCore(t, dir, every)
		after := c2.Engine()
		if replay.Hash(after.State()) != replay.Hash(before.State()) || after.Seq() != before.Seq() {
			t.Fatalf("every %d: reopened at seq %d hash %s, closed at seq %d hash %s", every, after.Seq(),
				replay.Hash(after.State()), before.Seq(), replay.Hash(before.State()))
		}
		if fmt.Sprint(after.Txns()) != fmt.Sprint(before.Txns()) || fmt.Sprint(after.Parked()) != fmt.Sprint(before.Parked()) {
			t.Fatalf("every %d: transactions or parked intents differ after reopening", every)
		}
		d.c = c2
		for range 200 {
			d.step()
		}
		if _, err := replay.Verify(c2.Log(), engine.Config{}, nil); err != nil {
			t.Fatal(err)
		}
		c2.Close()
	}
}

// A duplicate older than the engine's window still gets its recorded
// decision: from the log's idempotency record, and still applied once.
func TestDuplicateOlderThanWindow(t *testing.T) {
	c, err := OpenCore(t.TempDir(), CoreOptions{Engine: engine.Config{DedupWindow: 4}, Log: eventlog.Options{NoSync: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	submit := func(id string) *intents.Decision {
		raw := []byte(`{"id":"` + id + `","agent":"a","kind":"apply","writes":[{"path":"cnt.n","op":"incr"}]}`)
		evs, p, err := c.Submit(t0, "a", raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		return evs[len(evs)-1].Decision
	}
	first := ulid.Make().String()
	submit(first)
	for range 20 {
		submit(ulid.Make().String())
	}
	if _, ok := c.Engine().Decision(first); ok {
		t.Fatal("the engine still remembers the first intent; the test needs it forgotten")
	}
	d := submit(first)
	if !d.Duplicate || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("old duplicate: %+v", d)
	}
	if v, _ := c.Engine().State().Get("cnt.n"); v != 21.0 {
		t.Fatalf("cnt.n = %v, want 21", v)
	}
}

// A snapshot that does not restore (one a build with other checks wrote,
// or a damaged one) is passed over: the engine is rebuilt from the one
// before it, or from the first event, to the same state.
func TestRebuildPassesOverASnapshotThatDoesNotRestore(t *testing.T) {
	dir := t.TempDir()
	c := openCore(t, dir, 50)
	d := newDriver(t, c, 5)
	for range 300 {
		d.step()
	}
	want, seq := replay.Hash(c.Engine().State()), c.Engine().Seq()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	lg, err := eventlog.Open(dir, &eventlog.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	at, _, err := lg.Snapshot(0)
	if err != nil {
		t.Fatalf("the run left no snapshot: %v", err)
	}
	// The latest snapshot, and one past the end, no longer restore.
	for _, s := range []uint64{at, seq} {
		if err := lg.SaveSnapshot(s, []byte(`{"rev":"not a number"}`)); err != nil {
			t.Fatal(err)
		}
	}
	eng, from, err := replay.Rebuild(lg, engine.Config{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if from >= at || replay.Hash(eng.State()) != want || eng.Seq() != seq {
		t.Fatalf("rebuilt from snapshot %d (the bad one at %d) to seq %d hash %s; want seq %d hash %s", from, at, eng.Seq(), replay.Hash(eng.State()), seq, want)
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	c = openCore(t, dir, 50)
	defer c.Close()
	if replay.Hash(c.Engine().State()) != want {
		t.Fatal("OpenCore did not pass over the snapshot that does not restore")
	}
}
