package engine

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/conflict"
	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// counterIDs is the default id source with its position in view, so that a
// restored engine can be given the ids the original would issue next.
type counterIDs struct{ n uint64 }

func (c *counterIDs) next(t time.Time) ulid.ULID {
	c.n++
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(t))
	binary.BigEndian.PutUint64(id[8:], c.n)
	return id
}

// snapConfig is the property world's configuration, with a dedup window
// (0: the default) and an id source.
func snapConfig(window int, ids *counterIDs) Config {
	return Config{DefaultLease: 5 * time.Second, MaxTxnsPerAgent: 4, MaxParkedPerAgent: 4,
		DedupWindow: window, NewID: ids.next}
}

// lenientTB lets the world resubmit intents the engine has forgotten: with a
// small dedup window an old id is decided afresh, not as a duplicate, which
// the world would otherwise report as a failure.
type lenientTB struct{ testing.TB }

func (tb lenientTB) Fatalf(format string, args ...any) {
	if strings.HasPrefix(format, "resubmitted") {
		return
	}
	tb.TB.Helper()
	tb.TB.Fatalf(format, args...)
}

// newSnapWorld is newWorld with an engine configured by snapConfig.
func newSnapWorld(t *testing.T, seed uint64, window int) (*world, *counterIDs) {
	w := newWorld(t, seed)
	if window != 0 {
		w.t = lenientTB{t}
	}
	ids := &counterIDs{}
	e, err := New(snapConfig(window, ids))
	if err != nil {
		t.Fatal(err)
	}
	w.e = e
	return w, ids
}

// encode returns the snapshot's JSON, decoded and encoded again, after
// checking that the decoded snapshot equals the original.
func encode(t testing.TB, s *Snapshot) (*Snapshot, []byte) {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, s) {
		b2, _ := json.Marshal(&back)
		t.Fatalf("the snapshot changed through JSON:\n%s\nvs\n%s", b, b2)
	}
	b2, err := json.Marshal(&back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatalf("the snapshot encodes differently after a round trip:\n%s\nvs\n%s", b, b2)
	}
	return &back, b
}

// loads is what each agent holds, without the zeros the engine leaves
// behind.
func loads(e *Engine) map[string]load {
	out := map[string]load{}
	for a, l := range e.load {
		if *l != (load{}) {
			out[a] = *l
		}
	}
	return out
}

// sameEngine fails unless a and b are in the same state, as far as anything
// can tell.
func sameEngine(t testing.TB, what string, a, b *Engine) {
	t.Helper()
	_, ja := encode(t, a.Snapshot())
	_, jb := encode(t, b.Snapshot())
	if !bytes.Equal(ja, jb) {
		t.Fatalf("%s: snapshots differ:\n%s\nvs\n%s", what, ja, jb)
	}
	if a.State().Hash() != b.State().Hash() || a.Seq() != b.Seq() {
		t.Fatalf("%s: states differ", what)
	}
	if !reflect.DeepEqual(a.Txns(), b.Txns()) || !reflect.DeepEqual(a.Parked(), b.Parked()) {
		t.Fatalf("%s: in flight differs:\n%v %v\nvs\n%v %v", what, a.Txns(), a.Parked(), b.Txns(), b.Parked())
	}
	if la, lb := loads(a), loads(b); !reflect.DeepEqual(la, lb) {
		t.Fatalf("%s: loads differ: %v vs %v", what, la, lb)
	}
}

// sameDeadline fails unless a and b have the same next deadline. It is a
// call like any other: NextDeadline drops the stale timers it meets.
func sameDeadline(t testing.TB, what string, a, b *Engine) {
	t.Helper()
	da, oka := a.NextDeadline()
	db, okb := b.NextDeadline()
	if oka != okb || !da.Equal(db) {
		t.Fatalf("%s: next deadlines differ: %v %v vs %v %v", what, da, oka, db, okb)
	}
}

// sameEvents fails unless got are the events want, byte for byte as JSON.
func sameEvents(t testing.TB, what string, want, got []*intents.Event) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d events, want %d:\n%s\nwant\n%s", what, len(got), len(want), eventsJSON(got), eventsJSON(want))
	}
	for i := range want {
		a, _ := json.Marshal(want[i])
		b, _ := json.Marshal(got[i])
		if !bytes.Equal(a, b) {
			t.Fatalf("%s: event %d differs:\n%s\nwant\n%s", what, i, b, a)
		}
	}
}

func eventsJSON(evs []*intents.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		j, _ := json.Marshal(ev)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// A restored engine carries on exactly like the engine it was taken from:
// run a random prefix, snapshot it through JSON, restore, and drive both
// with the same random suffix — the same bytes at the same times.
func TestSnapshotContinues(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 12
	}
	windows := []int{0, 40, 7} // the default, and small ones that turn often
	for seed := range uint64(seeds) {
		window := windows[seed%3]
		w, ids := newSnapWorld(t, seed, window)
		for range int(seed*37) % 500 {
			w.step()
		}
		s, _ := encode(t, w.e.Snapshot())
		restoredIDs := &counterIDs{n: ids.n}
		r, err := Restore(snapConfig(window, restoredIDs), s)
		if err != nil {
			t.Fatalf("seed %d: restore: %v", seed, err)
		}
		what := fmt.Sprintf("seed %d at seq %d", seed, s.Seq)
		sameEngine(t, what+" restored", w.e, r)

		for i := range 400 {
			if i%50 == 0 {
				// The host's clock steps back (first thing after the restore, too):
				// the engine's clock must not.
				in := &intents.Intent{ID: w.nextID(), Agent: "a9", Kind: intents.KindApply,
					Writes: []intents.Write{{Path: "e.t", Op: intents.OpIncr}}}
				raw, _ := json.Marshal(in)
				then := w.now.Add(-time.Minute)
				want := w.e.Submit(then, Input{Agent: in.Agent, Raw: raw}, nil).Events
				w.log = append(w.log, want...)
				sameEvents(t, fmt.Sprintf("%s, step %d, clock back", what, i), want, r.Submit(then, Input{Agent: in.Agent, Raw: raw}, nil).Events)
			}
			before, sent := len(w.log), len(w.sent)
			w.step() // exactly one call: a submit or an advance
			var got []*intents.Event
			if len(w.sent) > sent {
				in := w.sent[len(w.sent)-1]
				raw, _ := json.Marshal(in)
				got = r.Submit(w.now, Input{Agent: in.Agent, Raw: raw}, nil).Events
			} else {
				got = r.Tick(w.now, nil).Events
			}
			sameEvents(t, fmt.Sprintf("%s, step %d", what, i), w.log[before:], got)
			if i%3 == 0 { // as the coordinator asks when to call Tick
				sameDeadline(t, fmt.Sprintf("%s, step %d", what, i), w.e, r)
			}
		}
		sameEngine(t, what+" after the suffix", w.e, r)
		for range 10 {
			w.now = w.now.Add(time.Hour)
			before := len(w.log)
			w.record(w.e.Tick(w.now, nil).Events)
			sameEvents(t, what+", draining", w.log[before:], r.Tick(w.now, nil).Events)
		}
		sameEngine(t, what+" drained", w.e, r)
	}
}

// A restarted coordinator restores its latest snapshot and folds the events
// after it: that must give the engine a full replay of the log gives, from a
// snapshot taken anywhere — between calls or in the middle of one.
func TestSnapshotThenTail(t *testing.T) {
	seeds := 30
	if testing.Short() {
		seeds = 6
	}
	windows := []int{0, 40, 7}
	for seed := range uint64(seeds) {
		window := windows[seed%3]
		live, _ := newSnapWorld(t, seed, window)
		for range 500 {
			live.step()
		}
		full, err := New(snapConfig(window, &counterIDs{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range live.log {
			if err := full.Apply(ev); err != nil {
				t.Fatal(err)
			}
		}
		r := rand.New(rand.NewPCG(seed, 99))
		for range 5 {
			cut := r.IntN(len(live.log) + 1)
			head, _ := New(snapConfig(window, &counterIDs{}))
			for _, ev := range live.log[:cut] {
				if err := head.Apply(ev); err != nil {
					t.Fatal(err)
				}
			}
			s, _ := encode(t, head.Snapshot())
			ids := &counterIDs{}
			restored, err := Restore(snapConfig(window, ids), s)
			if err != nil {
				t.Fatalf("seed %d: restore at %d: %v", seed, cut, err)
			}
			sameEngine(t, fmt.Sprintf("seed %d: restored at %d", seed, cut), head, restored)
			for _, ev := range live.log[cut:] {
				if err := restored.Apply(ev); err != nil {
					t.Fatalf("seed %d: tail after %d: %v", seed, cut, err)
				}
			}
			what := fmt.Sprintf("seed %d: snapshot at %d and the tail", seed, cut)
			sameEngine(t, what, full, restored)
		}
		// And both carry on like the live engine.
		ids := &counterIDs{n: 1 << 40}
		s, _ := encode(t, full.Snapshot())
		restored, err := Restore(snapConfig(window, ids), s)
		if err != nil {
			t.Fatal(err)
		}
		full.cfg.NewID = (&counterIDs{n: 1 << 40}).next
		live.e.cfg.NewID = (&counterIDs{n: 1 << 40}).next
		for i := range 200 {
			before, sent := len(live.log), len(live.sent)
			live.step()
			call := func(e *Engine) []*intents.Event {
				if len(live.sent) > sent {
					in := live.sent[len(live.sent)-1]
					raw, _ := json.Marshal(in)
					return e.Submit(live.now, Input{Agent: in.Agent, Raw: raw}, nil).Events
				}
				return e.Tick(live.now, nil).Events
			}
			what := fmt.Sprintf("seed %d, step %d after the log", seed, i)
			sameEvents(t, what+" (replayed)", live.log[before:], call(full))
			sameEvents(t, what+" (restored)", live.log[before:], call(restored))
			if i%4 == 0 {
				sameDeadline(t, what, full, restored)
			}
		}
		sameEngine(t, fmt.Sprintf("seed %d: carried on", seed), full, restored)
	}
}

// A fresh engine's snapshot restores to a fresh engine.
func TestRestoreFresh(t *testing.T) {
	a, err := New(snapConfig(0, &counterIDs{}))
	if err != nil {
		t.Fatal(err)
	}
	s, b := encode(t, a.Snapshot())
	t.Logf("a fresh engine's snapshot: %s", b)
	r, err := Restore(snapConfig(0, &counterIDs{}), s)
	if err != nil {
		t.Fatal(err)
	}
	sameEngine(t, "fresh", a, r)
	// Even the zero value decodes to one.
	var zero Snapshot
	if err := json.Unmarshal([]byte(`{"tree":[{"path":"","kind":"object","version":0,"mod_rev":0}]}`), &zero); err != nil {
		t.Fatal(err)
	}
	z, err := Restore(Config{}, &zero)
	if err != nil {
		t.Fatal(err)
	}
	sameEngine(t, "zero", a, z)
	in := &intents.Intent{ID: ulid.Make().String(), Agent: "a", Kind: intents.KindApply,
		Writes: []intents.Write{{Path: "x.y", Op: intents.OpSet, Value: json.RawMessage(`1`)}}}
	raw, _ := json.Marshal(in)
	sameEvents(t, "first submit", a.Submit(base, Input{Agent: "a", Raw: raw}, nil).Events, r.Submit(base, Input{Agent: "a", Raw: raw}, nil).Events)
}

// exactScenario puts two transactions in flight and parks an intent behind
// both; the propose's value and the parked intent's meta carry JSON that
// encoding/json would not give back byte for byte.
const (
	exactValue = `[1,  2, "<&>", "` + "\u2028" + `"]`
	exactMeta  = `{"note":   "<b>"}`
)

func exactScenario(t *testing.T, e *Engine) (txn1, txn2 string) {
	t.Helper()
	submit := func(agent, raw string) *intents.Decision {
		evs := e.Submit(base, Input{Agent: agent, Raw: []byte(raw)}, nil).Events
		return evs[len(evs)-1].Decision
	}
	id := func(n byte) string {
		var u ulid.ULID
		_ = u.SetTime(ulid.Timestamp(base))
		u[15] = n
		return u.String()
	}
	d0 := submit("z", `{"id":"`+id(9)+`","agent":"z","kind":"apply",
		"writes":[{"path":"d.w","op":"set","value":{"k":[1]}},{"path":"q.r","op":"set","value":"s"}]}`)
	d1 := submit("a", `{"id":"`+id(1)+`","agent":"a","kind":"propose","lease_ms":60000,
		"writes":[{"path":"d.x","op":"set","value": `+exactValue+` }]}`)
	d2 := submit("b", `{"id":"`+id(2)+`","agent":"b","kind":"propose","reads":[{"path":"q.r"}],
		"writes":[{"path":"e.y","op":"incr"}]}`)
	d3 := submit("c", `{"id":"`+id(3)+`","agent":"c","kind":"apply","on_conflict":"wait","wait_ms":50000,
		"meta": `+exactMeta+`, "writes":[{"path":"d.x","op":"set","value":1},{"path":"e.y","op":"set","value":2}]}`)
	d4 := submit("d", `{"id":"`+id(4)+`","agent":"d","kind":"apply","on_conflict":"escalate",
		"writes":[{"path":"e.y","op":"set","value":3}]}`)
	if d0.Outcome != intents.OutcomeApplied || d1.Outcome != intents.OutcomeGranted || d2.Outcome != intents.OutcomeGranted ||
		d3.Outcome != intents.OutcomeQueued || d4.Outcome != intents.OutcomeEscalated {
		t.Fatalf("scenario: %+v %+v %+v %+v %+v", d0, d1, d2, d3, d4)
	}
	return d1.Txn, d2.Txn
}

// The raw JSON of intents comes back byte for byte: a commit without writes
// applies the propose's values as they were sent, and a re-parked intent is
// logged as it was sent.
func TestSnapshotExactValues(t *testing.T) {
	ids := &counterIDs{}
	e, _ := New(snapConfig(0, ids))
	txn1, _ := exactScenario(t, e)
	s, _ := encode(t, e.Snapshot())
	r, err := Restore(snapConfig(0, &counterIDs{n: ids.n}), s)
	if err != nil {
		t.Fatal(err)
	}
	sameEngine(t, "restored", e, r)
	var u ulid.ULID
	_ = u.SetTime(ulid.Timestamp(base))
	u[15] = 5
	commit := []byte(`{"id":"` + u.String() + `","agent":"a","kind":"commit","txn":"` + txn1 + `","fence":1}`)
	now := base.Add(time.Second)
	want, got := e.Submit(now, Input{Agent: "a", Raw: commit}, nil).Events, r.Submit(now, Input{Agent: "a", Raw: commit}, nil).Events
	sameEvents(t, "commit", want, got)
	var sawChange, sawWait bool
	for i, ev := range got {
		switch ev.Type {
		case intents.EventChange:
			sawChange = true
			if v := ev.Change.Writes[0].Value; string(v) != exactValue || string(want[i].Change.Writes[0].Value) != exactValue {
				t.Errorf("committed value %q, want %q", v, exactValue)
			}
		case intents.EventWait:
			sawWait = true
			if m := ev.Wait.Intent.Meta; string(m) != exactMeta || string(want[i].Wait.Intent.Meta) != exactMeta {
				t.Errorf("re-parked meta %q, want %q", m, exactMeta)
			}
		}
	}
	if !sawChange || !sawWait {
		t.Fatalf("no change or no re-park:\n%s", eventsJSON(got))
	}
	sameEngine(t, "after the commit", e, r)
	// The escalated intent's arbiter deadline and the waiter's deadline.
	later := base.Add(time.Hour)
	sameEvents(t, "deadlines", e.Tick(later, nil).Events, r.Tick(later, nil).Events)
	sameEngine(t, "after the deadlines", e, r)
	if len(r.Parked()) != 0 || len(r.Txns()) != 0 {
		t.Fatalf("left in flight: %v %v", r.Parked(), r.Txns())
	}
}

// Restore refuses a snapshot no engine could be in, with an error and never
// a panic.
func TestRestoreRejects(t *testing.T) {
	e, _ := New(snapConfig(0, &counterIDs{}))
	txn1, txn2 := exactScenario(t, e)
	_, good := encode(t, e.Snapshot())
	fresh := func() *Snapshot {
		var s Snapshot
		if err := json.Unmarshal(good, &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	if _, err := Restore(Config{}, fresh()); err != nil {
		t.Fatalf("the good snapshot: %v", err)
	}
	waiting := func(s *Snapshot) *SnapshotParked {
		for i := range s.Parked {
			if !s.Parked[i].Escalated {
				return &s.Parked[i]
			}
		}
		t.Fatal("nothing waits")
		return nil
	}
	timer := func(s *Snapshot, kind, id string) int {
		for i, tm := range s.Timers {
			if tm.Kind == kind && tm.ID == id {
				return i
			}
		}
		t.Fatalf("no %s timer for %s", kind, id)
		return -1
	}
	drop := func(s []SnapshotTimer, i int) []SnapshotTimer { return append(s[:i:i], s[i+1:]...) }
	cases := map[string]func(s *Snapshot){
		"a txn a parked intent waits on is unknown": func(s *Snapshot) {
			for i, tx := range s.Txns {
				if tx.ID == txn2 {
					s.Txns = append(s.Txns[:i:i], s.Txns[i+1:]...)
				}
			}
		},
		"a holder of another agent": func(s *Snapshot) {
			s.Waits.Parked[0].Holders[0].Agent = "zz"
		},
		"a waiting intent not parked": func(s *Snapshot) {
			s.Waits.Parked[0].ID, s.Waits.Queues[0].IDs[0], s.Waits.Queues[1].IDs[0] = "X", "X", "X"
		},
		"a parked intent missing from the waits": func(s *Snapshot) { s.Waits = conflict.WaitsState{} },
		"waits out of order":                     func(s *Snapshot) { s.Waits.Queues[0].IDs = nil },
		"a bad path in the tree":                 func(s *Snapshot) { s.Tree[len(s.Tree)-1].Path = "d x" },
		"a tree node without its parent":         func(s *Snapshot) { s.Tree[len(s.Tree)-1].Path = "zz.top" },
		"no tree":                                func(s *Snapshot) { s.Tree = nil },
		"a rev after the seq":                    func(s *Snapshot) { s.Rev = s.Seq + 1 },
		"a txn twice":                            func(s *Snapshot) { s.Txns = append(s.Txns, s.Txns[0]) },
		"a txn without its propose":              func(s *Snapshot) { s.Txns[0].Propose = nil },
		"a txn without an agent":                 func(s *Snapshot) { s.Txns[0].Agent = "" },
		"a fence never issued":                   func(s *Snapshot) { s.Txns[0].Fence = s.Fence + 1 },
		"a parked intent twice":                  func(s *Snapshot) { s.Parked = append(s.Parked, s.Parked[0]) },
		"a parked intent without its intent":     func(s *Snapshot) { s.Parked[0].Intent = nil },
		"a wait on no conflict":                  func(s *Snapshot) { waiting(s).Conflicts = nil },
		"a parked intent with a value not JSON": func(s *Snapshot) {
			waiting(s).Intent.Writes[0].Value = json.RawMessage(`"unterminated`)
		},
		"a propose without a kind":   func(s *Snapshot) { s.Txns[0].Propose.Kind = "" },
		"a nil decision":             func(s *Snapshot) { s.Decided.Prev = map[string]*intents.Decision{"x": nil} },
		"a timer of an unknown kind": func(s *Snapshot) { s.Timers[0].Kind = "alarm" },
		"a timer numbered 0":         func(s *Snapshot) { s.Timers[0].N = 0 },
		"a timer never set":          func(s *Snapshot) { s.Timers[0].N = s.TimerCount + 1 },
		"a timer twice":              func(s *Snapshot) { s.Timers = append(s.Timers, s.Timers[0]) },
		"a lease that never ends": func(s *Snapshot) {
			s.Timers = drop(s.Timers, timer(s, "lease_end", txn1))
		},
		"a lease ending at another time": func(s *Snapshot) { s.Txns[0].Expires = s.Txns[0].Expires.Add(1) },
		"a wait that never ends": func(s *Snapshot) {
			s.Timers = drop(s.Timers, timer(s, "deadline", waiting(s).Intent.ID))
		},
	}
	for name, corrupt := range cases {
		s := fresh()
		corrupt(s)
		_, err := Restore(Config{}, s)
		if !errors.Is(err, ErrCorruptSnapshot) {
			t.Errorf("%s: restore gave %v, want ErrCorruptSnapshot", name, err)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
	if _, err := Restore(Config{}, nil); !errors.Is(err, ErrCorruptSnapshot) {
		t.Errorf("nil snapshot: %v", err)
	}
	if _, err := Restore(Config{DedupWindow: -1}, fresh()); err == nil || errors.Is(err, ErrCorruptSnapshot) {
		t.Errorf("bad config: %v", err)
	}

	// Random damage to the JSON is refused or restored, never a panic.
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		b := bytes.Clone(good)
		for range 1 + r.IntN(4) {
			const bad = "{}[]\",:0123456789aez\x00"
			b[r.IntN(len(b))] = bad[r.IntN(len(bad))]
		}
		var s Snapshot
		if json.Unmarshal(b, &s) != nil {
			continue
		}
		// What Restore accepts must run.
		if e, err := Restore(Config{}, &s); err == nil {
			e.Tick(base.Add(time.Hour), nil)
		}
	}
}

// TestSnapshotSize reports how large the snapshot of a busy engine is: 1,000
// paths, 100 transactions in flight and 20 intents parked.
func TestSnapshotSize(t *testing.T) {
	ids := &counterIDs{}
	e, _ := New(Config{NewID: ids.next})
	n := 0
	id := func() string {
		n++
		var u ulid.ULID
		_ = u.SetTime(ulid.Timestamp(base))
		binary.BigEndian.PutUint32(u[12:], uint32(n))
		return u.String()
	}
	now := base
	for d := range 100 {
		in := &intents.Intent{ID: id(), Agent: "loader", Kind: intents.KindApply}
		for f := range 10 {
			in.Writes = append(in.Writes, intents.Write{Path: fmt.Sprintf("b.d%d.f%d", d, f), Op: intents.OpSet,
				Value: json.RawMessage(fmt.Sprint(f))})
		}
		e.Submit(now, Input{Agent: "", Intent: in}, nil)
	}
	for i := range 100 {
		in := &intents.Intent{ID: id(), Agent: fmt.Sprintf("agent%d", i%10), Kind: intents.KindPropose,
			Reads:  []intents.Read{{Path: fmt.Sprintf("b.d%d.f0", (i+1)%100)}},
			Writes: []intents.Write{{Path: fmt.Sprintf("b.d%d.f%d", i, 1+i%9), Op: intents.OpSet}}}
		e.Submit(now, Input{Agent: "", Intent: in}, nil)
	}
	for i := range 20 {
		in := &intents.Intent{ID: id(), Agent: fmt.Sprintf("waiter%d", i), Kind: intents.KindApply,
			OnConflict: intents.OnConflictWait,
			Writes:     []intents.Write{{Path: fmt.Sprintf("b.d%d.f%d", i, 1+i%9), Op: intents.OpSet, Value: json.RawMessage(`7`)}}}
		e.Submit(now, Input{Agent: "", Intent: in}, nil)
	}
	if len(e.Txns()) != 100 || len(e.Parked()) != 20 || len(e.State().Paths()) < 1000 {
		t.Fatalf("%d txns, %d parked, %d paths", len(e.Txns()), len(e.Parked()), len(e.State().Paths()))
	}
	s, b := encode(t, e.Snapshot())
	part := func(v any) int { j, _ := json.Marshal(v); return len(j) }
	t.Logf("%d paths, %d txns, %d parked, %d decisions, %d timers: snapshot %d bytes of JSON "+
		"(tree %d, txns %d, parked %d, waits %d, decided %d, timers %d)",
		len(s.Tree), len(s.Txns), len(s.Parked), len(s.Decided.Cur)+len(s.Decided.Prev), len(s.Timers), len(b),
		part(s.Tree), part(s.Txns), part(s.Parked), part(s.Waits), part(s.Decided), part(s.Timers))
	r, err := Restore(Config{NewID: (&counterIDs{n: ids.n}).next}, s)
	if err != nil {
		t.Fatal(err)
	}
	sameEngine(t, "busy", e, r)
}

// The snapshot carries an intent's raw JSON exactly only for the fields
// exactIntent knows: a json.RawMessage added to intents.Intent must be
// added there too.
func TestExactIntentCoversRawFields(t *testing.T) {
	raw := reflect.TypeFor[json.RawMessage]()
	var found []string
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		switch {
		case typ == raw:
			found = append(found, prefix)
		case typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice:
			walk(prefix+"[]", typ.Elem())
		case typ.Kind() == reflect.Map:
			walk(prefix+"{}", typ.Elem())
		case typ.Kind() == reflect.Struct:
			for f := range typ.Fields() {
				walk(prefix+"."+f.Name, f.Type)
			}
		}
	}
	walk("Intent", reflect.TypeFor[intents.Intent]())
	if want := []string{"Intent.Writes[].Value", "Intent.Meta"}; !reflect.DeepEqual(found, want) {
		t.Fatalf("intents.Intent holds raw JSON at %v; exactIntent keeps %v exact", found, want)
	}
}

// A renewal can move a lease's end back to an instant it had before. The
// timer set for that instant the first time stays stale — only the
// renewal's own timer counts — so the order of expiries at one instant is
// the order their timers were set, live or restored alike.
func TestSnapshotTimersAfterRenewal(t *testing.T) {
	ids := &counterIDs{}
	e, _ := New(snapConfig(0, ids))
	n := byte(0)
	submit := func(e *Engine, at time.Duration, in *intents.Intent) []*intents.Event {
		raw, _ := json.Marshal(in)
		return e.Submit(base.Add(at), Input{Agent: in.Agent, Raw: raw}, nil).Events
	}
	intent := func(agent string, kind intents.Kind) *intents.Intent {
		n++
		var u ulid.ULID
		_ = u.SetTime(ulid.Timestamp(base))
		u[15] = n
		return &intents.Intent{ID: u.String(), Agent: agent, Kind: kind}
	}
	grant := func(agent, path string) *intents.Decision {
		in := intent(agent, intents.KindPropose)
		in.LeaseMS, in.Writes = 10000, []intents.Write{{Path: path, Op: intents.OpSet}}
		evs := submit(e, 0, in)
		return evs[len(evs)-1].Decision
	}
	tg, xg := grant("a", "t"), grant("b", "x") // both end at 10s
	renew := intent("a", intents.KindRenew)
	renew.Txn, renew.Fence, renew.LeaseMS = tg.Txn, tg.Fence, 20000
	submit(e, time.Second, renew) // t now ends at 21s
	s, _ := encode(t, e.Snapshot())
	r, err := Restore(snapConfig(0, &counterIDs{n: ids.n}), s)
	if err != nil {
		t.Fatal(err)
	}
	back := intent("a", intents.KindRenew)
	back.Txn, back.Fence, back.LeaseMS = tg.Txn, tg.Fence, 8000 // t ends at 10s again
	sameEvents(t, "renew", submit(e, 2*time.Second, back), submit(r, 2*time.Second, back))
	want, got := e.Tick(base.Add(time.Minute), nil).Events, r.Tick(base.Add(time.Minute), nil).Events
	sameEvents(t, "expiries", want, got)
	var order []string
	for _, ev := range want {
		if ev.Type == intents.EventExpire {
			order = append(order, ev.Txn)
		}
	}
	if len(order) != 2 || order[0] != xg.Txn || order[1] != tg.Txn {
		t.Fatalf("expired %v, want x (%s) then t (%s): t's timer is the renewal's, set after x's", order, xg.Txn, tg.Txn)
	}
}

// TestSnapshotCarriesRules: the rules in force and the quota buckets come
// back with a snapshot, so the restored engine refuses and admits exactly
// as the original does.
func TestSnapshotCarriesRules(t *testing.T) {
	ids := &counterIDs{}
	e, err := New(snapConfig(0, ids))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.SetRules(base, []byte(`{"quotas":{"a":{"intents_per_second":2,"burst":3}},`+
		`"rules":[{"pattern":"s","transitions":{"A":["B"]},"initial":["A"]}]}`), "test", nil); err != nil {
		t.Fatal(err)
	}
	submit := func(e *Engine, at time.Duration, n int, value string) []*intents.Event {
		raw := fmt.Sprintf(`{"id":"%s","agent":"a","kind":"apply","writes":[{"path":"s","op":"set","value":%q}]}`, fuzzID(n), value)
		return e.Submit(base.Add(at), Input{Agent: "a", Raw: []byte(raw)}, nil).Events
	}
	submit(e, 0, 1, "A")
	submit(e, 100*time.Millisecond, 2, "B")
	snap, _ := encode(t, e.Snapshot())
	if snap.Rules == nil || len(snap.Buckets) != 1 {
		t.Fatalf("snapshot rules %v buckets %v", snap.Rules, snap.Buckets)
	}
	rids := *ids // the restored engine's ids go on from the same count
	r, err := Restore(snapConfig(0, &rids), snap)
	if err != nil {
		t.Fatal(err)
	}
	sameEngine(t, "restored", e, r)
	// One token left, then none; half a second later one more. The second
	// write breaks the state machine (B is final).
	for i, at := range []time.Duration{200 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond} {
		want := submit(e, at, 10+i, "A")
		got := submit(r, at, 10+i, "A")
		sameEvents(t, fmt.Sprintf("intent %d", i), want, got)
	}
	sameEngine(t, "after", e, r)
	var reasons []intents.Reason
	for _, ev := range submit(e, time.Second, 20, "A") {
		if ev.Decision != nil {
			reasons = append(reasons, ev.Decision.Reason)
		}
	}
	if !slices.Equal(reasons, []intents.Reason{intents.ReasonIllegalTransition}) {
		t.Fatalf("B → A decided %v, want illegal_transition", reasons)
	}
}
