package engine

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// world drives an engine with random intents from several agents and keeps
// the log of everything it emitted.
type world struct {
	t      testing.TB
	e      *Engine
	rng    *rand.Rand
	now    time.Time
	log    []*intents.Event
	n      uint64
	held   map[string][]heldTxn // agent → its granted transactions
	sent   []*intents.Intent
	amount map[string]float64 // intent id → what its incr adds
	target map[string]string  // intent id → the counter it adds to
}

type heldTxn struct {
	txn   string
	fence uint64
	write intents.Write
}

func newWorld(t testing.TB, seed uint64) *world {
	e, err := New(Config{DefaultLease: 5 * time.Second, MaxTxnsPerAgent: 4, MaxParkedPerAgent: 4})
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, e: e, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b9)), now: base,
		held: map[string][]heldTxn{}, amount: map[string]float64{}, target: map[string]string{}}
}

func (w *world) nextID() string {
	w.n++
	var u ulid.ULID
	_ = u.SetTime(ulid.Timestamp(base))
	u[15], u[14], u[13] = byte(w.n), byte(w.n>>8), byte(w.n>>16)
	return u.String()
}

func (w *world) submit(in *intents.Intent) []*intents.Event {
	raw, err := json.Marshal(in)
	if err != nil {
		w.t.Fatal(err)
	}
	evs := w.e.Submit(w.now, Input{Agent: in.Agent, Raw: raw}, nil).Events
	w.record(evs)
	w.sent = append(w.sent, in)
	return evs
}

func (w *world) record(evs []*intents.Event) {
	w.log = append(w.log, evs...)
	for _, ev := range evs {
		if d := ev.Decision; d != nil && d.Outcome == intents.OutcomeGranted && !d.Duplicate {
			p := ev // the grant precedes its decision in the same call
			_ = p
			g := w.e.txns[d.Txn]
			if g == nil {
				continue // already ended within the same call
			}
			w.held[d.Agent] = append(w.held[d.Agent], heldTxn{d.Txn, d.Fence, g.propose.Writes[0]})
		}
	}
}

var (
	counters = []string{"c.n1", "c.n2"}
	fields   = []string{"d.x", "d.y", "d.z.w", "d.z"}
	policies = []intents.OnConflict{intents.OnConflictReject, intents.OnConflictWait, intents.OnConflictWait}
)

// step makes one random move: an agent applies, proposes, commits, aborts,
// renews, resubmits an old intent, or time passes.
func (w *world) step() {
	agent := "a" + strconv.Itoa(w.rng.IntN(5))
	in := &intents.Intent{ID: w.nextID(), Agent: agent, OnConflict: policies[w.rng.IntN(len(policies))], WaitMS: 4000}
	switch r := w.rng.IntN(100); {
	case r < 25: // apply incr
		k := float64(1 + w.rng.IntN(5))
		c := counters[w.rng.IntN(len(counters))]
		in.Kind = intents.KindApply
		in.Writes = []intents.Write{{Path: c, Op: intents.OpIncr, Value: json.RawMessage(strconv.Itoa(int(k)))}}
		w.amount[in.ID], w.target[in.ID] = k, c
	case r < 40: // apply set, sometimes reading with a version
		in.Kind = intents.KindApply
		f := fields[w.rng.IntN(len(fields))]
		in.Writes = []intents.Write{{Path: f, Op: intents.OpSet, Value: json.RawMessage(strconv.Itoa(w.rng.IntN(100)))}}
		if w.rng.IntN(2) == 0 {
			v := w.e.State().Version("c.n1")
			in.Reads = []intents.Read{{Path: "c.n1", Version: &v}}
		}
		if w.rng.IntN(3) == 0 {
			in.Pre = []string{`state.d.x == nil || state.d.x < 90`}
		}
	case r < 60: // propose
		in.Kind = intents.KindPropose
		if w.rng.IntN(2) == 0 {
			in.Writes = []intents.Write{{Path: counters[w.rng.IntN(len(counters))], Op: intents.OpIncr}}
		} else {
			in.Writes = []intents.Write{{Path: fields[w.rng.IntN(len(fields))], Op: intents.OpSet}}
		}
	case r < 85: // commit, abort or renew one of the agent's grants (perhaps dead)
		hs := w.held[agent]
		if len(hs) == 0 {
			w.tick()
			return
		}
		i := w.rng.IntN(len(hs))
		h := hs[i]
		in.Txn, in.Fence, in.OnConflict, in.WaitMS = h.txn, h.fence, "", 0
		switch w.rng.IntN(6) {
		case 0:
			in.Kind = intents.KindAbort
		case 1:
			in.Kind = intents.KindRenew
		default:
			in.Kind = intents.KindCommit
			wr := intents.Write{Path: h.write.Path, Op: h.write.Op}
			if h.write.Op == intents.OpIncr {
				k := float64(1 + w.rng.IntN(5))
				wr.Value = json.RawMessage(strconv.Itoa(int(k)))
				w.amount[in.ID], w.target[in.ID] = k, h.write.Path
			} else {
				wr.Value = json.RawMessage(strconv.Itoa(w.rng.IntN(100)))
			}
			in.Writes = []intents.Write{wr}
		}
		if in.Kind != intents.KindRenew {
			w.held[agent] = append(hs[:i:i], hs[i+1:]...)
		}
	case r < 90 && len(w.sent) > 0: // an agent republishes an intent it already sent
		old := w.sent[w.rng.IntN(len(w.sent))]
		evs := w.submit(old)
		last := evs[len(evs)-1].Decision
		if last == nil || !last.Duplicate {
			w.t.Fatalf("resubmitted %s got %+v, want a duplicate", old.ID, last)
		}
		return
	default:
		w.tick()
		return
	}
	w.submit(in)
}

func (w *world) tick() {
	w.now = w.now.Add(time.Duration(w.rng.IntN(3000)) * time.Millisecond)
	w.record(w.e.Tick(w.now, nil).Events)
}

// The engine never loses or doubles an incr, whatever the interleaving; its
// state is exactly the fold of what it logged; and an intent id is applied
// at most once.
func TestPropertyInterleavings(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := range uint64(seeds) {
		w := newWorld(t, seed)
		for range 600 {
			w.step()
		}
		// Let every lease and wait run out; a waiter freed by an expiry may
		// be granted a lease of its own, so go on until nothing is left.
		for range 10 {
			w.now = w.now.Add(time.Hour)
			w.record(w.e.Tick(w.now, nil).Events)
		}
		if n := len(w.e.Txns()); n != 0 {
			t.Fatalf("seed %d: %d txns in flight after every lease ended", seed, n)
		}
		if n := len(w.e.Parked()); n != 0 {
			t.Fatalf("seed %d: %d intents parked after every wait ended", seed, n)
		}

		sums := map[string]float64{}
		changed := map[string]int{}
		final := map[string]intents.Outcome{}
		for _, ev := range w.log {
			switch ev.Type {
			case intents.EventChange:
				changed[ev.Intent]++
				if changed[ev.Intent] > 1 {
					t.Fatalf("seed %d: intent %s applied twice", seed, ev.Intent)
				}
			case intents.EventDecision:
				d := ev.Decision
				if d.Duplicate || !d.Outcome.Final() {
					continue
				}
				if prev, ok := final[d.Intent]; ok {
					t.Fatalf("seed %d: intent %s decided %s then %s", seed, d.Intent, prev, d.Outcome)
				}
				final[d.Intent] = d.Outcome
				if (d.Outcome == intents.OutcomeApplied || d.Outcome == intents.OutcomeCommitted) != (changed[d.Intent] == 1) {
					t.Fatalf("seed %d: intent %s is %s but has %d changes", seed, d.Intent, d.Outcome, changed[d.Intent])
				}
				if k, ok := w.amount[d.Intent]; ok && (d.Outcome == intents.OutcomeApplied || d.Outcome == intents.OutcomeCommitted) {
					sums[w.target[d.Intent]] += k
				}
			}
		}
		for _, c := range counters {
			got, _ := w.e.State().Get(c)
			if g, _ := got.(float64); g != sums[c] {
				t.Fatalf("seed %d: %s = %v, but the applied incrs add up to %v", seed, c, got, sums[c])
			}
		}
		// Every intent sent has exactly one final decision.
		for _, in := range w.sent {
			if _, ok := final[in.ID]; !ok {
				t.Fatalf("seed %d: intent %s (%s) has no final decision", seed, in.ID, in.Kind)
			}
		}
		// The state is the fold of the log, at every point.
		fresh, _ := New(Config{DefaultLease: 5 * time.Second, MaxTxnsPerAgent: 4, MaxParkedPerAgent: 4})
		for _, ev := range w.log {
			if err := fresh.Apply(ev); err != nil {
				t.Fatalf("seed %d: replay: %v", seed, err)
			}
		}
		if fresh.State().Hash() != w.e.State().Hash() {
			t.Fatalf("seed %d: replayed state differs from the live one", seed)
		}
		if fresh.Seq() != w.e.Seq() || fmt.Sprint(fresh.Txns()) != fmt.Sprint(w.e.Txns()) {
			t.Fatalf("seed %d: replayed engine differs", seed)
		}
	}
}

// A replayed engine carries on exactly like the live one: split a run at a
// random point, rebuild from the log so far, and feed both the same rest.
func TestReplayContinues(t *testing.T) {
	for seed := range uint64(10) {
		live := newWorld(t, seed)
		for range 300 {
			live.step()
		}
		fresh, _ := New(Config{DefaultLease: 5 * time.Second, MaxTxnsPerAgent: 4, MaxParkedPerAgent: 4,
			NewID: live.e.cfg.NewID})
		for _, ev := range live.log {
			if err := fresh.Apply(ev); err != nil {
				t.Fatal(err)
			}
		}
		// Same input from here on: both must decide alike. The id source is
		// shared, so compare decisions by content without ids.
		for i := range 300 {
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			in := &intents.Intent{ID: live.nextID(), Agent: "a" + strconv.Itoa(r.IntN(5)), Kind: intents.KindApply,
				OnConflict: intents.OnConflictWait, WaitMS: 2000,
				Writes: []intents.Write{{Path: fields[r.IntN(len(fields))], Op: intents.OpSet, Value: json.RawMessage(`1`)}}}
			raw, _ := json.Marshal(in)
			now := live.now.Add(time.Duration(i) * 200 * time.Millisecond)
			a := live.e.Submit(now, Input{Agent: in.Agent, Raw: raw}, nil).Events
			b := fresh.Submit(now, Input{Agent: in.Agent, Raw: raw}, nil).Events
			if len(a) != len(b) {
				t.Fatalf("seed %d step %d: live emitted %d events, replayed %d", seed, i, len(a), len(b))
			}
			for j := range a {
				if a[j].Type != b[j].Type || a[j].Seq != b[j].Seq || a[j].Intent != b[j].Intent {
					t.Fatalf("seed %d step %d: event %d differs: %s/%d vs %s/%d", seed, i, j, a[j].Type, a[j].Seq, b[j].Type, b[j].Seq)
				}
				if da, db := a[j].Decision, b[j].Decision; da != nil && (da.Outcome != db.Outcome || da.Reason != db.Reason || da.Rev != db.Rev) {
					t.Fatalf("seed %d step %d: decision %+v vs %+v", seed, i, da, db)
				}
			}
		}
		if live.e.State().Hash() != fresh.State().Hash() {
			t.Fatalf("seed %d: states diverged", seed)
		}
	}
}
