package conflict

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// randomWaits parks, releases and removes at random, as the engine does.
func randomWaits(r *rand.Rand, steps int) *Waits {
	w := NewWaits()
	for range steps {
		id := fmt.Sprint("i", r.IntN(12))
		switch r.IntN(5) {
		case 0:
			w.Release(fmt.Sprint("T", r.IntN(5)))
		case 1:
			w.Remove(id)
		default:
			var hs []Holder
			for range r.IntN(4) {
				n := r.IntN(5)
				hs = append(hs, Holder{Txn: fmt.Sprint("T", n), Agent: fmt.Sprint("A", n%3)})
			}
			w.Park(id, fmt.Sprint("A", r.IntN(3)), hs)
		}
	}
	return w
}

// A Waits rebuilt from its export has the same queues, holders and graph,
// and wakes the same intents in the same order.
func TestWaitsExportImport(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 3))
		w := randomWaits(r, int(seed%40))
		s := w.Export()
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back WaitsState
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, s) {
			t.Fatalf("seed %d: state changed through JSON:\n%s", seed, b)
		}
		got, err := ImportWaits(back)
		if err != nil {
			t.Fatalf("seed %d: import: %v\n%s", seed, err, b)
		}
		checkWaits(t, got)
		if !reflect.DeepEqual(got.queues, w.queues) || !reflect.DeepEqual(got.parked, w.parked) ||
			!reflect.DeepEqual(got.graph, w.graph) {
			t.Fatalf("seed %d: imported waits differ:\n%s\nvs\n%s", seed, dumpWaits(got), dumpWaits(w))
		}
		// The same calls give the same answers from here on.
		for range 30 {
			switch txn := fmt.Sprint("T", r.IntN(5)); r.IntN(3) {
			case 0:
				if a, b := w.Release(txn), got.Release(txn); !slices.Equal(a, b) {
					t.Fatalf("seed %d: release %s woke %v and %v", seed, txn, a, b)
				}
			default:
				id, agent := fmt.Sprint("i", r.IntN(12)), fmt.Sprint("A", r.IntN(3))
				hs := []Holder{{Txn: txn, Agent: "A1"}}
				if a, b := w.Cycle(agent, hs), got.Cycle(agent, hs); a != b {
					t.Fatalf("seed %d: cycle differs", seed)
				}
				w.Park(id, agent, hs)
				got.Park(id, agent, hs)
			}
		}
		if dumpWaits(w) != dumpWaits(got) {
			t.Fatalf("seed %d: diverged:\n%s\nvs\n%s", seed, dumpWaits(got), dumpWaits(w))
		}
	}
}

func TestImportWaitsRejects(t *testing.T) {
	h1, h2 := Holder{Txn: "T1", Agent: "A"}, Holder{Txn: "T2", Agent: "B"}
	p := func(id string, hs ...Holder) ParkedWait { return ParkedWait{ID: id, Agent: "C", Holders: hs} }
	q := func(txn string, ids ...string) WaitQueue { return WaitQueue{Txn: txn, IDs: ids} }
	cases := map[string]WaitsState{
		"empty id":           {Parked: []ParkedWait{p("")}},
		"empty agent":        {Parked: []ParkedWait{{ID: "i"}}},
		"parked twice":       {Parked: []ParkedWait{p("i"), p("i")}},
		"holder twice":       {Parked: []ParkedWait{p("i", h1, h1)}, Queues: []WaitQueue{q("T1", "i")}},
		"empty holder":       {Parked: []ParkedWait{p("i", Holder{Txn: "T1"})}, Queues: []WaitQueue{q("T1", "i")}},
		"not in queue":       {Parked: []ParkedWait{p("i", h1, h2)}, Queues: []WaitQueue{q("T1", "i")}},
		"queued, not parked": {Parked: []ParkedWait{p("i", h1)}, Queues: []WaitQueue{q("T1", "i", "j")}},
		"queued elsewhere":   {Parked: []ParkedWait{p("i", h1)}, Queues: []WaitQueue{q("T1", "i"), q("T2", "i")}},
		"queued twice":       {Parked: []ParkedWait{p("i", h1)}, Queues: []WaitQueue{q("T1", "i", "i")}},
		"two queues":         {Parked: []ParkedWait{p("i", h1)}, Queues: []WaitQueue{q("T1", "i"), q("T1", "i")}},
		"empty queue":        {Queues: []WaitQueue{q("T1")}},
	}
	for name, s := range cases {
		if _, err := ImportWaits(s); err == nil {
			t.Errorf("%s: imported", name)
		}
	}
	w, err := ImportWaits(WaitsState{Parked: []ParkedWait{p("i", h1, h2), p("j", h2), p("k")},
		Queues: []WaitQueue{q("T2", "j", "i"), q("T1", "i")}})
	if err != nil {
		t.Fatal(err)
	}
	checkWaits(t, w)
	if got := w.Release("T2"); !slices.Equal(got, []string{"j", "i"}) {
		t.Errorf("release T2 woke %v, want j i", got)
	}
}
