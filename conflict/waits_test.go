package conflict

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestWaitsScript runs testdata/waits through datadriven; -rewrite writes
// back the output the code gives now, for review in a diff.
//
//	park ID AGENT [TXN:AGENT]...  → number parked
//	cycle AGENT [TXN:AGENT]...    → whether waiting on those would close a cycle
//	release TXN                   → the ids woken, in order
//	remove ID                     → number parked
//	parked ID                     → whether it is parked
//	state                         → queues and edges, sorted
func TestWaitsScript(t *testing.T) {
	w := NewWaits()
	datadriven.RunTest(t, "testdata/waits", func(t *testing.T, d *datadriven.TestData) string {
		defer checkWaits(t, w)
		args := positional(t, d)
		switch d.Cmd {
		case "park":
			w.Park(args[0], args[1], parseHolders(t, args[2:]))
			return fmt.Sprintf("parked=%d", w.Len())
		case "cycle":
			return strconv.FormatBool(w.Cycle(args[0], parseHolders(t, args[1:])))
		case "release":
			ids := w.Release(args[0])
			if len(ids) == 0 {
				return "none"
			}
			return strings.Join(ids, " ")
		case "remove":
			w.Remove(args[0])
			return fmt.Sprintf("parked=%d", w.Len())
		case "parked":
			return strconv.FormatBool(w.Parked(args[0]))
		case "state":
			return dumpWaits(w)
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

// positional returns the bare arguments of a command; the waits commands
// take no key=value ones, so one is a typo to stop at, not to skip.
func positional(t *testing.T, d *datadriven.TestData) []string {
	t.Helper()
	var args []string
	for _, a := range d.CmdArgs {
		if len(a.Vals) > 0 {
			d.Fatalf(t, "argument %s: %s takes no key=value arguments", a, d.Cmd)
		}
		args = append(args, a.Key)
	}
	return args
}

func parseHolders(t *testing.T, args []string) []Holder {
	var hs []Holder
	for _, a := range args {
		txn, agent, ok := strings.Cut(a, ":")
		if !ok {
			t.Fatalf("holder %q is not TXN:AGENT", a)
		}
		hs = append(hs, Holder{Txn: txn, Agent: agent})
	}
	return hs
}

func dumpWaits(w *Waits) string {
	var b strings.Builder
	for _, txn := range slices.Sorted(maps.Keys(w.queues)) {
		fmt.Fprintf(&b, "queue %s: %s\n", txn, strings.Join(w.queues[txn], " "))
	}
	for _, a := range slices.Sorted(maps.Keys(w.graph)) {
		for _, h := range slices.Sorted(maps.Keys(w.graph[a])) {
			fmt.Fprintf(&b, "edge %s->%s x%d\n", a, h, w.graph[a][h])
		}
	}
	if b.Len() == 0 {
		return "(empty)"
	}
	return b.String()
}

// checkWaits verifies that queues and edges are exactly what the parked
// intents make.
func checkWaits(t testing.TB, w *Waits) {
	t.Helper()
	queues := map[string]int{}
	graph := map[[2]string]int{}
	for id, p := range w.parked {
		for _, h := range p.holders {
			queues[h.Txn]++
			graph[[2]string{p.agent, h.Agent}]++
			if n := strings.Count(" "+strings.Join(w.queues[h.Txn], " ")+" ", " "+id+" "); n != 1 {
				t.Errorf("%s is %d times in the queue of %s", id, n, h.Txn)
			}
		}
	}
	for txn, q := range w.queues {
		if len(q) != queues[txn] {
			t.Errorf("queue of %s is %q, want %d ids", txn, q, queues[txn])
		}
	}
	n := 0
	for a, out := range w.graph {
		if len(out) == 0 {
			t.Errorf("empty edge map kept for %s", a)
		}
		for h, c := range out {
			n++
			if c != graph[[2]string{a, h}] {
				t.Errorf("edge %s->%s counts %d, want %d", a, h, c, graph[[2]string{a, h}])
			}
		}
	}
	if n != len(graph) {
		t.Errorf("%d edges, want %d", n, len(graph))
	}
}

// TestCycleMatchesClosure compares Cycle with a reachability closure
// on random graphs built through Park.
func TestCycleMatchesClosure(t *testing.T) {
	agents := []string{"A", "B", "C", "D", "E"}
	for seed := range 200 {
		w := NewWaits()
		reach := map[[2]string]bool{}
		// Add random edges, keeping the graph acyclic as the coordinator
		// would by refusing the waits that close a cycle.
		for i := range 8 {
			a, b := agents[(seed+i*7)%5], agents[(seed*3+i*11+1)%5]
			h := []Holder{{Txn: "T" + b, Agent: b}}
			if w.Cycle(a, h) {
				if a != b && !reach[[2]string{b, a}] {
					t.Fatalf("seed %d: Cycle(%s→%s) is true without a path %s→%s", seed, a, b, b, a)
				}
				continue
			}
			if a == b || reach[[2]string{b, a}] {
				t.Fatalf("seed %d: Cycle(%s→%s) is false with a path %s→%s", seed, a, b, b, a)
			}
			w.Park(fmt.Sprint("i", i), a, h)
			reach[[2]string{a, b}] = true
			for changed := true; changed; {
				changed = false
				for x := range reach {
					for y := range reach {
						if x[1] == y[0] && !reach[[2]string{x[0], y[1]}] {
							reach[[2]string{x[0], y[1]}] = true
							changed = true
						}
					}
				}
			}
		}
		checkWaits(t, w)
	}
}
