// Package drive makes the traffic the coordinator's log tests write and
// replay: random intents from a few agents — applies, proposes with their
// commits and aborts, waits — and time passing, so that leases and waits
// run out. It decides nothing: its caller submits each intent to what it
// tests (a Core, or an engine writing a log by hand) and hands back what
// was decided, so that the transactions granted are later committed or
// aborted. The same seed makes the same traffic.
package drive

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// Traffic is one stream of random intents.
type Traffic struct {
	rng   *rand.Rand
	start time.Time
	now   time.Time
	n     uint64
	held  []*intents.Decision
}

// New returns the traffic of seed, its clock at start.
func New(seed uint64, start time.Time) *Traffic {
	return &Traffic{rng: rand.New(rand.NewPCG(seed, 7)), start: start, now: start}
}

// Now is the traffic's clock, which Next moves when time passes.
func (t *Traffic) Now() time.Time { return t.now }

var (
	paths = []string{"doc.a", "doc.b", "doc.c.x", "cnt.n", "list.items"}
	ops   = map[string]intents.Op{"doc.a": intents.OpSet, "doc.b": intents.OpSet, "doc.c.x": intents.OpSet, "cnt.n": intents.OpIncr, "list.items": intents.OpAppend}
)

// Next returns the next intent to submit at Now, or nil when time passes
// instead: Now has moved on, and the caller fires the timers due.
func (t *Traffic) Next() *intents.Intent {
	agent := "a" + strconv.Itoa(t.rng.IntN(4))
	p := paths[t.rng.IntN(len(paths))]
	in := &intents.Intent{ID: t.id(), Agent: agent}
	w := intents.Write{Path: p, Op: ops[p], Value: json.RawMessage(strconv.Itoa(t.rng.IntN(50)))}
	switch r := t.rng.IntN(10); {
	case r < 4:
		in.Kind, in.Writes = intents.KindApply, []intents.Write{w}
		if t.rng.IntN(2) == 0 {
			in.OnConflict, in.WaitMS = intents.OnConflictWait, 3000
		}
	case r < 6:
		in.Kind, in.Writes, in.LeaseMS = intents.KindPropose, []intents.Write{{Path: p, Op: w.Op}}, 2000
	case r < 8 && len(t.held) > 0:
		i := t.rng.IntN(len(t.held))
		g := t.held[i]
		t.held = append(t.held[:i:i], t.held[i+1:]...)
		in.Agent, in.Txn, in.Fence = g.Agent, g.Txn, g.Fence
		in.Kind = intents.KindAbort
		if t.rng.IntN(3) > 0 {
			in.Kind = intents.KindCommit
		}
	default:
		t.now = t.now.Add(time.Duration(t.rng.IntN(1500)) * time.Millisecond)
		return nil
	}
	return in
}

// Decided takes the events a submit or a tick decided, once durable: the
// transactions they granted are committed or aborted later.
func (t *Traffic) Decided(evs []*intents.Event) {
	for _, ev := range evs {
		if d := ev.Decision; d != nil && d.Outcome == intents.OutcomeGranted && !d.Duplicate {
			cp := *d
			t.held = append(t.held, &cp)
		}
	}
}

// id is the next intent id: unique, and the same for the same seed.
func (t *Traffic) id() string {
	t.n++
	var u ulid.ULID
	_ = u.SetTime(ulid.Timestamp(t.start))
	u[15], u[14], u[13] = byte(t.n), byte(t.n>>8), byte(t.n>>16)
	return u.String()
}
