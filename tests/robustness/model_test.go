package robustness

import (
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

func op(client int, in Input, call int64, out Output, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

// The model accepts what one serial order explains and refuses the
// anomalies the checker is for: a read of what was never decided (the
// dirty read of a coordinator killed before its group was durable), a
// version given twice, a compare-and-set applied at a version that was
// not the path's.
func TestModel(t *testing.T) {
	incr := Input{Kind: Incr, Path: "a.x", Intent: "i1"}
	read := Input{Kind: Read, Path: "a.x"}
	cas := func(v uint64, value int64) Input { return Input{Kind: CAS, Path: "a.x", Version: v, Value: value} }
	claim := func(who int64) Input { return Input{Kind: Claim, Path: "a.x", Value: who} }
	release := func(who int64) Input { return Input{Kind: Release, Path: "a.x", Value: who} }
	txn := func(va, vb uint64, value int64) Input {
		return Input{Kind: TxnSet, Path: "t.a", Path2: "t.b", Version: va, Version2: vb, Value: value, Value2: value}
	}
	both := Input{Kind: ReadBoth, Path: "t.a", Path2: "t.b"}
	incrA := Input{Kind: Incr, Path: "t.a"}
	readB := Input{Kind: Read, Path: "t.b", Slot: 1}
	for _, c := range []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"serial", []porcupine.Operation{
			op(0, incr, 0, Output{Applied: true, Version: 1}, 10),
			op(1, read, 11, Output{Value: 1, Version: 1}, 20),
			op(1, cas(1, 7), 21, Output{Applied: true, Version: 2}, 30),
			op(0, cas(1, 9), 31, Output{Stale: true}, 40),
			op(0, read, 41, Output{Value: 7, Version: 2}, 50),
		}, true},
		{"concurrent reads either side of a write", []porcupine.Operation{
			op(0, incr, 0, Output{Applied: true, Version: 1}, 30),
			op(1, read, 5, Output{Version: 0}, 10),
			op(2, read, 20, Output{Value: 1, Version: 1}, 25),
		}, true},
		{"an unknown write that may have applied", []porcupine.Operation{
			op(0, incr, 0, Output{Unknown: true}, math.MaxInt64),
			op(1, read, 10, Output{Version: 0}, 20),
			op(1, read, 30, Output{Value: 1, Version: 1}, 40),
		}, true},
		{"a dirty read: the incr was never decided", []porcupine.Operation{
			op(1, read, 10, Output{Value: 1, Version: 1}, 20),
			op(1, read, 30, Output{Version: 0}, 40),
		}, false},
		{"a version given twice", []porcupine.Operation{
			op(0, incr, 0, Output{Applied: true, Version: 1}, 10),
			op(1, cas(0, 5), 20, Output{Applied: true, Version: 1}, 30),
		}, false},
		{"a stale write applied", []porcupine.Operation{
			op(0, incr, 0, Output{Applied: true, Version: 1}, 10),
			op(0, incr, 11, Output{Applied: true, Version: 2}, 20),
			op(1, cas(1, 5), 30, Output{Applied: true, Version: 3}, 40),
		}, false},
		{"a read going back", []porcupine.Operation{
			op(0, incr, 0, Output{Applied: true, Version: 1}, 10),
			op(1, read, 20, Output{Version: 0}, 30),
		}, false},
		{"claims: first wins, the holder releases", []porcupine.Operation{
			op(0, claim(1), 0, Output{Applied: true, Version: 1}, 10),
			op(1, claim(2), 11, Output{Failed: true}, 20),
			op(1, release(2), 21, Output{Failed: true}, 30),
			op(0, release(1), 31, Output{Applied: true, Version: 2}, 40),
			op(1, claim(2), 41, Output{Applied: true, Version: 3}, 50),
			op(0, read, 51, Output{Value: 2, Version: 3}, 60),
		}, true},
		{"concurrent claims, one wins", []porcupine.Operation{
			op(0, claim(1), 0, Output{Applied: true, Version: 1}, 30),
			op(1, claim(2), 5, Output{Failed: true}, 35),
		}, true},
		{"two claims of a free path both won", []porcupine.Operation{
			op(0, claim(1), 0, Output{Applied: true, Version: 1}, 30),
			op(1, claim(2), 5, Output{Applied: true, Version: 2}, 35),
		}, false},
		{"a claim refused on a free path", []porcupine.Operation{
			op(0, claim(1), 0, Output{Failed: true}, 10),
		}, false},
		{"a release by who does not hold it", []porcupine.Operation{
			op(0, claim(1), 0, Output{Applied: true, Version: 1}, 10),
			op(1, release(2), 11, Output{Applied: true, Version: 2}, 20),
		}, false},
		{"a transaction over two paths, and an incr of one", []porcupine.Operation{
			op(0, txn(0, 0, 7), 0, Output{Applied: true, Version: 1, Version2: 1}, 10),
			op(1, incrA, 11, Output{Applied: true, Version: 2}, 20),
			op(0, both, 21, Output{Value: 8, Version: 2, Value2: 7, Version2: 1}, 30),
			op(1, readB, 31, Output{Value: 7, Version: 1}, 40),
			op(1, txn(2, 1, 9), 41, Output{Applied: true, Version: 3, Version2: 2}, 50),
			op(0, txn(2, 1, 5), 51, Output{Stale: true}, 60),
		}, true},
		{"a read of both during a transaction's commit", []porcupine.Operation{
			op(0, txn(0, 0, 7), 0, Output{Applied: true, Version: 1, Version2: 1}, 30),
			op(1, both, 5, Output{}, 10),
			op(2, both, 20, Output{Value: 7, Version: 1, Value2: 7, Version2: 1}, 25),
		}, true},
		{"a torn transaction: one path of two seen written", []porcupine.Operation{
			op(0, txn(0, 0, 7), 0, Output{Applied: true, Version: 1, Version2: 1}, 30),
			op(1, both, 5, Output{Value: 7, Version: 1}, 10),
		}, false},
		{"a refused transaction seen", []porcupine.Operation{
			op(0, txn(0, 0, 7), 0, Output{}, 10),
			op(1, readB, 20, Output{Value: 7, Version: 1}, 30),
		}, false},
		{"a write while a transaction was in flight, overwritten by its commit", []porcupine.Operation{
			op(0, txn(0, 0, 7), 0, Output{Applied: true, Version: 2, Version2: 1}, 30),
			op(1, incrA, 5, Output{Applied: true, Version: 1}, 10),
		}, false},
	} {
		if got := porcupine.CheckOperations(Model, c.ops); got != c.ok {
			t.Errorf("%s: linearizable %v, want %v", c.name, got, c.ok)
		}
	}
}
