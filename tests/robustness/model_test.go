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

// The model of a leased task accepts every history a coordinator that
// keeps its claims may give, reclaims included, which no client's
// operation shows, and refuses what a broken lease or fence gives: two
// holders at once, a fence reused or going back, a renewal or release
// under a stale fence.
func TestModelClaims(t *testing.T) {
	const path = "rb0.task.owner"
	claim := func(who int64) Input { return Input{Kind: Claim, Path: path, Value: who} }
	release := func(who int64, fence uint64) Input {
		return Input{Kind: Release, Path: path, Value: who, Fence: fence}
	}
	renew := func(who int64, fence uint64) Input { return Input{Kind: Renew, Path: path, Value: who, Fence: fence} }
	read := Input{Kind: Read, Path: path, Task: true}
	won := func(fence uint64) Output { return Output{Applied: true, Fence: fence} }
	applied := Output{Applied: true}
	taken := Output{Failed: true}
	fenced := Output{Fenced: true}
	unknown := Output{Unknown: true}
	owner := func(who int64) Output { return Output{Value: who} }
	for _, c := range []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"first wins, the holder renews and releases", []porcupine.Operation{
			op(0, claim(1), 0, won(3), 10),
			op(1, claim(2), 11, taken, 20),
			op(1, read, 21, owner(1), 30),
			op(0, renew(1, 3), 31, applied, 40),
			op(0, release(1, 3), 41, applied, 50),
			op(1, read, 51, owner(0), 60),
			op(1, claim(2), 61, won(7), 70),
		}, true},
		{"concurrent claims, one wins", []porcupine.Operation{
			op(0, claim(1), 0, won(1), 30),
			op(1, claim(2), 5, taken, 35),
		}, true},
		{"a reclaim: the lease ended, another claims under a higher fence", []porcupine.Operation{
			op(0, claim(1), 0, won(4), 10),
			op(1, claim(2), 20, won(5), 30),
			op(0, renew(1, 4), 40, fenced, 50),
			op(0, release(1, 4), 51, fenced, 60),
			op(1, release(2, 5), 61, applied, 70),
		}, true},
		{"a reclaim seen by a read, the holder's renewal then refused", []porcupine.Operation{
			op(0, claim(1), 0, won(4), 10),
			op(1, read, 20, owner(0), 30),
			op(0, renew(1, 4), 40, fenced, 50),
			op(0, claim(1), 51, won(9), 60),
			op(0, renew(1, 9), 61, applied, 70),
		}, true},
		{"a claim whose outcome is unknown, read by its claimer, reclaimed", []porcupine.Operation{
			op(0, claim(1), 0, unknown, math.MaxInt64),
			op(0, read, 10, owner(1), 20),
			op(1, claim(2), 21, taken, 30),
			op(1, claim(2), 40, won(6), 50),
		}, true},
		{"an unknown release that did not apply: the lease ended instead", []porcupine.Operation{
			op(0, claim(1), 0, won(2), 10),
			op(0, release(1, 2), 11, unknown, math.MaxInt64),
			op(1, read, 20, owner(1), 30),
			op(1, claim(2), 40, won(3), 50),
		}, true},
		{"two holders: a release under the old fence after another's claim", []porcupine.Operation{
			op(0, claim(1), 0, won(4), 10),
			op(1, claim(2), 20, won(5), 30),
			op(0, release(1, 4), 40, applied, 50),
		}, false},
		{"two holders: the old owner renews after another's claim", []porcupine.Operation{
			op(0, claim(1), 0, won(4), 10),
			op(1, claim(2), 20, won(5), 30),
			op(0, renew(1, 4), 40, applied, 50),
		}, false},
		{"two claims of a free task both won under one fence", []porcupine.Operation{
			op(0, claim(1), 0, won(4), 30),
			op(1, claim(2), 5, won(4), 35),
		}, false},
		{"a fence going back", []porcupine.Operation{
			op(0, claim(1), 0, won(4), 10),
			op(0, release(1, 4), 11, applied, 20),
			op(1, claim(2), 21, won(3), 30),
		}, false},
		{"a renewal under a stale fence of the same owner", []porcupine.Operation{
			op(0, claim(1), 0, won(4), 10),
			op(0, release(1, 4), 11, applied, 20),
			op(0, claim(1), 21, won(6), 30),
			op(0, renew(1, 4), 31, applied, 40),
		}, false},
		{"a release under a stale fence of the same owner", []porcupine.Operation{
			op(0, claim(1), 0, won(4), 10),
			op(0, release(1, 4), 11, applied, 20),
			op(0, claim(1), 21, won(6), 30),
			op(0, release(1, 4), 31, applied, 40),
		}, false},
		{"a release of a task its releaser never held", []porcupine.Operation{
			op(1, release(2, 1), 0, applied, 10),
		}, false},
		{"a claim refused on a free task", []porcupine.Operation{
			op(0, claim(1), 0, taken, 10),
		}, false},
		{"an owner seen after its release", []porcupine.Operation{
			op(0, claim(1), 0, won(1), 10),
			op(0, release(1, 1), 11, applied, 20),
			op(1, read, 21, owner(1), 30),
		}, false},
		{"a renewal refused, then the claim still seen", []porcupine.Operation{
			op(0, claim(1), 0, won(1), 10),
			op(0, renew(1, 1), 11, fenced, 20),
			op(1, read, 21, owner(1), 30),
		}, false},
	} {
		if got := porcupine.CheckOperations(Model, c.ops); got != c.ok {
			t.Errorf("%s: linearizable %v, want %v", c.name, got, c.ok)
		}
	}
}
