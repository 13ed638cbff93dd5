package conflict

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/coagent/coagent/intents"
)

// benchTxn is transaction i of the benchmarks: two writes and two reads in
// a document of its own on one board, the shape of a writer editing fields.
func benchTxn(i int) *Txn {
	doc := fmt.Sprintf("b.doc%d.", i)
	return &Txn{
		ID:    fmt.Sprintf("01J%023d", i), // as long as a ULID
		Agent: fmt.Sprintf("agent%02d", i%16),
		Writes: []intents.Write{
			{Path: doc + "f1", Op: intents.OpSet},
			{Path: doc + "f2", Op: intents.OpSet},
		},
		Reads: []string{doc + "f3", doc + "f4"},
	}
}

func fill(n int) *Index {
	ix := New()
	for i := range n {
		ix.Add(benchTxn(i))
	}
	return ix
}

// probe returns the four paths of a new intent: with i < 0 all in a
// document nobody holds, otherwise with one write on transaction i's f1.
func probe(i int) (reads []string, writes []intents.Write) {
	writes = []intents.Write{{Path: "b.docnew.f1", Op: intents.OpSet}, {Path: "b.docnew.f2", Op: intents.OpSet}}
	if i >= 0 {
		writes[0].Path = fmt.Sprintf("b.doc%d.f1", i)
	}
	return []string{"b.docnew.f3", "b.docnew.f4"}, writes
}

var inflightSizes = []int{100, 10000, 100000}

func BenchmarkCheck(b *testing.B) {
	for _, n := range inflightSizes {
		ix := fill(n)
		b.Run(fmt.Sprintf("inflight=%d", n), func(b *testing.B) {
			for _, c := range []struct {
				name string
				i    int
				want int
			}{{"disjoint", -1, 0}, {"conflict", n / 2, 1}} {
				b.Run(c.name, func(b *testing.B) {
					reads, writes := probe(c.i)
					dst := make([]intents.Conflict, 0, 8)
					for b.Loop() {
						dst, _ = ix.Check("", reads, writes, dst[:0])
					}
					if len(dst) != c.want {
						b.Fatalf("%d conflicts, want %d", len(dst), c.want)
					}
				})
			}
		})
	}
}

// heap100k returns the bytes of heap in use that 100,000 four-path
// transactions take, the Txn structs and their strings included.
func heap100k() (inuse, live uint64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ix := fill(100000)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(ix)
	return after.HeapInuse - before.HeapInuse, after.HeapAlloc - before.HeapAlloc
}

func BenchmarkMemory100k(b *testing.B) {
	var inuse, live uint64
	for b.Loop() {
		inuse, live = heap100k()
	}
	b.ReportMetric(float64(inuse)/(1<<20), "MB")
	b.ReportMetric(float64(live)/(1<<20), "MB-live")
}

func TestMemory100k(t *testing.T) {
	inuse, live := heap100k()
	t.Logf("100000 transactions of 4 paths: %.1f MB heap in use, %.1f MB live", float64(inuse)/(1<<20), float64(live)/(1<<20))
	if inuse > 200<<20 {
		t.Errorf("100000 transactions take %.1f MB of heap, want < 200 MB", float64(inuse)/(1<<20))
	}
}
