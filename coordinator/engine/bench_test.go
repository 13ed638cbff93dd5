package engine

import (
	"encoding/json"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// benchIDs makes n distinct canonical ULIDs cheaply.
func benchID(n int) string {
	var u ulid.ULID
	_ = u.SetTime(ulid.Timestamp(base))
	for i := 0; i < 8; i++ {
		u[15-i] = byte(n >> (8 * i))
	}
	return u.String()
}

// withInFlight returns an engine holding n granted transactions, each
// writing two paths and reading two in its own document.
func withInFlight(tb testing.TB, n int) *Engine {
	return withInFlightWindow(tb, n, 0)
}

// withInFlightWindow is withInFlight with a DedupWindow (0: the default).
func withInFlightWindow(tb testing.TB, n, window int) *Engine {
	tb.Helper()
	e, err := New(Config{DefaultLease: time.Hour, MaxLease: time.Hour, MaxTxnsPerAgent: n + 1, DedupWindow: window})
	if err != nil {
		tb.Fatal(err)
	}
	var out []*intents.Event
	for i := range n {
		doc := "held.d" + strconv.Itoa(i)
		in := &intents.Intent{ID: benchID(1<<40 + i), Agent: "holder", Kind: intents.KindPropose,
			Reads:  []intents.Read{{Path: doc + ".f3"}, {Path: doc + ".f4"}},
			Writes: []intents.Write{{Path: doc + ".f1", Op: intents.OpSet}, {Path: doc + ".f2", Op: intents.OpSet}}}
		out = e.Submit(base, Input{Agent: "holder", Intent: in}, out[:0]).Events
		if d := out[len(out)-1].Decision; d.Outcome != intents.OutcomeGranted {
			tb.Fatalf("setup propose %d: %s %s", i, d.Outcome, d.Detail)
		}
	}
	return e
}

// BenchmarkDecideApply measures the engine deciding non-conflicting apply
// intents with 10,000 transactions in flight: validation, the conflict
// check, planning, the fold of its events and the idempotency record. The
// intents are decoded beforehand; decoding is the edge's cost, measured by
// BenchmarkDecodeAndDecide.
func BenchmarkDecideApply(b *testing.B) {
	benchApplies(b, withInFlight(b, 10000), `1`)
}

// BenchmarkDecideApplyWindow100k is BenchmarkDecideApply with the engine
// remembering 100,000 recent intent ids instead of 10,000: a larger live
// heap, so more garbage-collection work per decision.
func BenchmarkDecideApplyWindow100k(b *testing.B) {
	benchApplies(b, withInFlightWindow(b, 10000, 100000), `1`)
}

// benchApplies decides non-conflicting applies, each setting value, on e.
func benchApplies(b *testing.B, e *Engine, value string) {
	ins := make([]*intents.Intent, 1<<16)
	for i := range ins {
		ins[i] = &intents.Intent{Agent: "w", Kind: intents.KindApply,
			Writes: []intents.Write{{Path: "free.d" + strconv.Itoa(i%1000) + ".f", Op: intents.OpSet, Value: json.RawMessage(value)}}}
	}
	out := make([]*intents.Event, 0, 8)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		in := ins[i%len(ins)]
		in.ID = benchID(i)
		out = e.Submit(base, Input{Agent: "w", Intent: in}, out[:0]).Events
		if d := out[len(out)-1].Decision; d.Outcome != intents.OutcomeApplied {
			b.Fatalf("%s %s", d.Outcome, d.Detail)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkDecideApplyRules is BenchmarkDecideApply with board rules in
// force over the written paths: a writers rule, a state machine and a
// schema on every write, and a quota bucket per intent.
func BenchmarkDecideApplyRules(b *testing.B) {
	e := withInFlight(b, 10000)
	if _, err := e.SetRules(base, []byte(`{"agents":{"w":{"roles":["writer"]}},`+
		`"rules":[{"pattern":"free.*.f","writers":["role:writer"],"transitions":{"1":["1"]}},`+
		`{"pattern":"free.**","schema":{"type":["object","string"]}}],`+
		`"quotas":{"w":{"intents_per_second":1e9,"burst":1000000000}}}`), "bench", nil); err != nil {
		b.Fatal(err)
	}
	benchApplies(b, e, `"1"`)
}

// BenchmarkDecideApplyShadow is BenchmarkDecideApplyRules with the same
// rules in force in the shadow too (a shadow file that changes no
// decision): what a shadow costs each intent, a second decision.
func BenchmarkDecideApplyShadow(b *testing.B) {
	e := withInFlight(b, 10000)
	file := []byte(`{"agents":{"w":{"roles":["writer"]}},` +
		`"rules":[{"pattern":"free.*.f","writers":["role:writer"],"transitions":{"1":["1"]}},` +
		`{"pattern":"free.**","schema":{"type":["object","string"]}}],` +
		`"quotas":{"w":{"intents_per_second":1e9,"burst":1000000000}}}`)
	if _, err := e.SetRules(base, file, "bench", nil); err != nil {
		b.Fatal(err)
	}
	if _, err := e.SetShadowRules(base, file, intents.ModeAudit, "bench", nil); err != nil {
		b.Fatal(err)
	}
	benchApplies(b, e, `"1"`)
}

// BenchmarkDecodeAndDecide is BenchmarkDecideApply with the JSON decoding
// of each intent included, as the coordinator pays it.
func BenchmarkDecodeAndDecide(b *testing.B) {
	e := withInFlight(b, 10000)
	raws := make([][]byte, 1<<16)
	for i := range raws {
		raws[i], _ = json.Marshal(&intents.Intent{ID: benchID(i), Agent: "w", Kind: intents.KindApply,
			Writes: []intents.Write{{Path: "free.d" + strconv.Itoa(i%1000) + ".f", Op: intents.OpSet, Value: json.RawMessage(`1`)}}})
	}
	out := make([]*intents.Event, 0, 8)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(raws) {
			b.StopTimer()
			e = withInFlight(b, 10000) // ids repeat from here: start afresh
			i = 0
			b.StartTimer()
		}
		out = e.Submit(base, Input{Agent: "w", Raw: raws[i]}, out[:0]).Events
		if d := out[len(out)-1].Decision; d.Outcome != intents.OutcomeApplied {
			b.Fatalf("%s %s", d.Outcome, d.Detail)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkPrecondition measures a cached two-path precondition evaluated
// against the real state tree.
func BenchmarkPrecondition(b *testing.B) {
	e, _ := New(Config{})
	var out []*intents.Event
	out = e.Submit(base, Input{Agent: "w", Intent: &intents.Intent{ID: benchID(1), Agent: "w", Kind: intents.KindApply,
		Writes: []intents.Write{{Path: "report.status", Op: intents.OpSet, Value: json.RawMessage(`"draft"`)}}}}, out).Events
	in := &intents.Intent{ID: benchID(2), Agent: "w", Kind: intents.KindApply}
	cond, err := e.comp.Compile("pre[0]", `state.report.status == "draft" && state.tasks.t1.owner == nil`, false)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		e.eval.Begin(base) // as the engine does for each intent
		if ok, err := e.eval.Eval(cond, e.tree, nil, in); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "evals/s")
}

// inFlightHeap returns the heap the engine holds for n transactions in
// flight of 4 paths each, with their grants and recorded decisions.
func inFlightHeap(tb testing.TB, n int) float64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	e := withInFlight(tb, n)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(e)
	return float64(after.HeapAlloc-before.HeapAlloc) / (1 << 20)
}

func BenchmarkMemory100kInFlight(b *testing.B) {
	var mb float64
	for b.Loop() {
		mb = inFlightHeap(b, 100000)
	}
	b.ReportMetric(mb, "MB")
}

// 100,000 transactions of 4 paths in flight must fit in 200 MB: the
// engine's whole holding, not only its index.
func TestMemory100kInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 100,000 transactions")
	}
	if mb := inFlightHeap(t, 100000); mb >= 200 {
		t.Fatalf("100,000 transactions in flight hold %.0f MB, want < 200", mb)
	} else {
		t.Logf("100,000 transactions in flight hold %.0f MB", mb)
	}
}

// BenchmarkBaselineTreeWrite is the floor BenchmarkDecideApply is compared
// with in the same run: planning and folding the same write into the state
// tree, with no intent, no conflict check, no events and no records.
func BenchmarkBaselineTreeWrite(b *testing.B) {
	e := withInFlight(b, 10000)
	writes := make([][]intents.Write, 1000)
	for i := range writes {
		writes[i] = []intents.Write{{Path: "free.d" + strconv.Itoa(i) + ".f", Op: intents.OpSet, Value: json.RawMessage(`1`)}}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		plan, err := e.tree.Plan(writes[i%len(writes)])
		if err != nil {
			b.Fatal(err)
		}
		if err := e.tree.Apply(e.tree.Rev()+1, plan); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
}

// BenchmarkParkAndFree10k parks 10,000 waiters (100 agents, 100 each)
// behind one transaction, then aborts it so that every waiter is decided
// again and applied: ns/op is one waiter's share of both. The waiters
// outnumber a generation of the idempotency window (5,000 by default), as
// the interim decisions of parked intents are kept across its turns.
func BenchmarkParkAndFree10k(b *testing.B) {
	const n = 10000
	waiters := make([]*intents.Intent, n)
	for i := range waiters {
		waiters[i] = &intents.Intent{ID: benchID(1<<30 + i), Agent: "w" + strconv.Itoa(i%100), Kind: intents.KindApply,
			OnConflict: intents.OnConflictWait, WaitMS: 600000,
			Writes: []intents.Write{{Path: "park.doc.w" + strconv.Itoa(i), Op: intents.OpSet, Value: json.RawMessage(`1`)}}}
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		e, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		out := e.Submit(base, Input{Agent: "h", Intent: &intents.Intent{ID: benchID(1), Agent: "h", Kind: intents.KindPropose,
			Writes: []intents.Write{{Path: "park.doc", Op: intents.OpSet}}}}, nil).Events
		grant := out[len(out)-1].Decision
		b.StartTimer()
		for _, in := range waiters {
			out = e.Submit(base, Input{Agent: in.Agent, Intent: in}, out[:0]).Events
			if d := out[len(out)-1].Decision; d.Outcome != intents.OutcomeQueued {
				b.Fatalf("waiter: %s %s", d.Outcome, d.Detail)
			}
		}
		out = e.Submit(base, Input{Agent: "h", Intent: &intents.Intent{ID: benchID(2), Agent: "h", Kind: intents.KindAbort,
			Txn: grant.Txn, Fence: grant.Fence}}, out[:0]).Events
		if got := len(e.Parked()); got != 0 {
			b.Fatalf("%d still parked after the abort", got)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/waiter")
}
