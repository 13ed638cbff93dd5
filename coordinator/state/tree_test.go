package state_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/intents"
)

func w(path string, op intents.Op, value string) intents.Write {
	wr := intents.Write{Path: path, Op: op}
	if value != "" {
		wr.Value = json.RawMessage(value)
	}
	return wr
}

func commit(t *testing.T, tr *state.Tree, writes ...intents.Write) []intents.Applied {
	t.Helper()
	plan, err := tr.Plan(writes)
	if err != nil {
		t.Fatalf("plan %v: %v", writes, err)
	}
	if err := tr.Apply(tr.Rev()+1, plan); err != nil {
		t.Fatalf("apply: %v", err)
	}
	return plan
}

func TestVersions(t *testing.T) {
	tr := state.New()
	commit(t, tr, w("a.b.c", intents.OpSet, `1`))
	for p, v := range map[string]uint64{"a": 1, "a.b": 1, "a.b.c": 1, "a.x": 0} {
		if got := tr.Version(p); got != v {
			t.Errorf("after set a.b.c: version(%s) = %d, want %d", p, got, v)
		}
	}
	// Setting an ancestor bumps everything under it that existed or is created.
	commit(t, tr, w("a", intents.OpSet, `{"b":{"d":2},"e":3}`))
	for p, v := range map[string]uint64{"a": 2, "a.b": 2, "a.b.c": 2, "a.b.d": 1, "a.e": 1} {
		if got := tr.Version(p); got != v {
			t.Errorf("after set a: version(%s) = %d, want %d", p, got, v)
		}
	}
	if _, ok := tr.Get("a.b.c"); ok {
		t.Error("a.b.c survived the set of a")
	}
	// Delete and recreate: the version keeps counting (no ABA).
	commit(t, tr, w("a.e", intents.OpDelete, ""))
	if e := tr.Lookup("a.e"); e.Exists || e.Version != 2 || e.ModRev != 3 {
		t.Errorf("deleted a.e: %+v", e)
	}
	commit(t, tr, w("a.e", intents.OpSet, `5`))
	if e := tr.Lookup("a.e"); !e.Exists || e.Version != 3 || e.ModRev != 4 {
		t.Errorf("recreated a.e: %+v", e)
	}
	// Siblings are untouched.
	if got := tr.Version("a.b.d"); got != 1 {
		t.Errorf("sibling a.b.d version %d", got)
	}
	if got, want := tr.Root(), map[string]any{"a": map[string]any{"b": map[string]any{"d": 2.0}, "e": 5.0}}; !reflect.DeepEqual(got, want) {
		t.Errorf("root %v, want %v", got, want)
	}
}

func TestOps(t *testing.T) {
	tr := state.New()
	commit(t, tr, w("c.n", intents.OpIncr, ""), w("c.list", intents.OpAppend, `"x"`), w("c.obj", intents.OpMerge, `{"a":1,"b":null}`))
	commit(t, tr, w("c.n", intents.OpIncr, `2.5`), w("c.list", intents.OpAppend, `{"y":1}`), w("c.obj", intents.OpMerge, `{"a":null,"c":3}`))
	want := map[string]any{"c": map[string]any{"n": 3.5, "list": []any{"x", map[string]any{"y": 1.0}}, "obj": map[string]any{"c": 3.0}}}
	if got := tr.Root(); !reflect.DeepEqual(got, want) {
		t.Fatalf("root %v, want %v", got, want)
	}
	// A merge into an existing object touches only its keys.
	if got := tr.Version("c.obj.c"); got != 1 {
		t.Errorf("c.obj.c version %d", got)
	}
}

func TestTypeErrors(t *testing.T) {
	tr := state.New()
	commit(t, tr, w("s.str", intents.OpSet, `"x"`), w("s.arr", intents.OpSet, `[1]`), w("s.obj", intents.OpSet, `{"k":1}`))
	before := tr.Hash()
	for _, c := range []struct {
		write intents.Write
		at    string
	}{
		{w("s.str", intents.OpIncr, `1`), "s.str"},
		{w("s.obj", intents.OpIncr, `1`), "s.obj"},
		{w("s.str", intents.OpAppend, `1`), "s.str"},
		{w("s.str", intents.OpMerge, `{}`), "s.str"},
		{w("s.str.x", intents.OpSet, `1`), "s.str"},
		{w("s.arr.x.y", intents.OpSet, `1`), "s.arr"},
	} {
		_, err := tr.Plan([]intents.Write{c.write})
		var te *state.TypeError
		if !errors.As(err, &te) || te.At != c.at {
			t.Errorf("%s %s: err %v, want a TypeError at %s", c.write.Op, c.write.Path, err, c.at)
		}
	}
	// A change that fails its check leaves the tree as it was.
	bad := []intents.Applied{{Path: "s.ok", Op: intents.OpSet, Value: json.RawMessage(`1`)}, {Path: "s.str", Op: intents.OpIncr, Value: json.RawMessage(`1`)}}
	if err := tr.Apply(tr.Rev()+1, bad); err == nil {
		t.Fatal("applied incr on a string")
	}
	if tr.Hash() != before {
		t.Fatal("a failed Apply changed the tree")
	}
	if err := tr.Apply(tr.Rev(), nil); err == nil {
		t.Fatal("applied a change at an old rev")
	}
}

// The view after a planned change answers like the tree once the change is
// applied, for every path, on random changes.
func TestViewMatchesApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	paths := []string{"a", "a.b", "a.b.c", "a.d", "e", "e.f"}
	values := []string{`1`, `"s"`, `{"b":{"c":2},"x":1}`, `{"c":3}`, `[1]`, `{}`, `null`}
	tr := state.New()
	for round := range 2000 {
		var writes []intents.Write
		used := map[string]bool{}
		for range 1 + rng.IntN(2) {
			p := paths[rng.IntN(len(paths))]
			clash := false
			for q := range used {
				clash = clash || intents.Overlaps(p, q)
			}
			if clash {
				continue
			}
			used[p] = true
			switch rng.IntN(5) {
			case 0:
				writes = append(writes, w(p, intents.OpSet, values[rng.IntN(len(values))]))
			case 1:
				writes = append(writes, w(p, intents.OpDelete, ""))
			case 2:
				writes = append(writes, w(p, intents.OpIncr, ""))
			case 3:
				writes = append(writes, w(p, intents.OpAppend, `7`))
			case 4:
				writes = append(writes, w(p, intents.OpMerge, `{"c":1,"b":null}`))
			}
		}
		plan, err := tr.Plan(writes)
		if err != nil {
			continue // a type error; Plan changed nothing
		}
		view := tr.After(plan)
		predicted := map[string]any{}
		for _, p := range append(paths, "a.b.c.d", "a.c", "a.x") {
			v, ok := view.Get(p)
			predicted[p] = fmt.Sprint(ok, v, view.Version(p))
		}
		if err := tr.Apply(tr.Rev()+1, plan); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for p, want := range predicted {
			v, ok := tr.Get(p)
			got := fmt.Sprint(ok, v, tr.Version(p))
			if got != want {
				t.Fatalf("round %d, writes %v: %s after apply %s, view said %s", round, writes, p, got, want)
			}
		}
	}
}

func BenchmarkApplySet(b *testing.B) {
	tr := state.New()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		plan, err := tr.Plan([]intents.Write{{Path: fmt.Sprintf("b.doc%d.f", i%10000), Op: intents.OpSet, Value: json.RawMessage(`1`)}})
		if err != nil {
			b.Fatal(err)
		}
		if err := tr.Apply(tr.Rev()+1, plan); err != nil {
			b.Fatal(err)
		}
	}
}

// Touched lists exactly the paths whose version the last Apply bumped.
func TestTouched(t *testing.T) {
	tr := state.New()
	tr.Track(true)
	commit(t, tr, w("a.b.c", intents.OpSet, `1`), w("a.x", intents.OpSet, `{"y":{"z":1}}`))
	tr.Touched()
	before := tr.Paths()
	commit(t, tr, w("a.x", intents.OpSet, `{"q":2}`), w("d", intents.OpIncr, ""))
	after := tr.Paths()
	want := map[string]bool{}
	for p, e := range after {
		if e.Version != before[p].Version {
			want[p] = true
		}
	}
	got := map[string]bool{}
	for _, p := range tr.Touched() {
		if got[p] {
			t.Errorf("%s touched twice", p)
		}
		got[p] = true
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("touched %v, want %v", got, want)
	}
}

// An incr whose sum is not a finite number is refused by Plan, naming the
// path and both numbers (issue 13, item 2: two incr of the largest float64
// used to give +Inf, which no JSON answer can carry).
func TestIncrRange(t *testing.T) {
	const max = `1.7976931348623157e308`
	for _, c := range []struct {
		name, first, by, want string
	}{
		{"issue", max, max, "incr n.a: 1.7976931348623157e+308 + 1.7976931348623157e+308 is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
		{"negative", `-` + max, `-1e308`, "incr n.a: -1.7976931348623157e+308 + -1e+308 is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := state.New()
			commit(t, tr, w("n.a", intents.OpIncr, c.first))
			before := tr.Hash()
			_, err := tr.Plan([]intents.Write{w("n.b", intents.OpSet, `1`), w("n.a", intents.OpIncr, c.by)})
			var re *state.RangeError
			if !errors.As(err, &re) {
				t.Fatalf("Plan = %v, want a *RangeError", err)
			}
			if re.Path != "n.a" || re.Op != intents.OpIncr || err.Error() != c.want {
				t.Errorf("Plan error %+v\n got %s\nwant %s", re, err, c.want)
			}
			if tr.Hash() != before {
				t.Error("a refused Plan changed the tree")
			}
		})
	}
	// Up to the edge is fine, from an absent path and from a number.
	tr := state.New()
	commit(t, tr, w("n.a", intents.OpIncr, `1e308`))
	commit(t, tr, w("n.a", intents.OpIncr, `7.976931348623157e307`))
	commit(t, tr, w("n.a", intents.OpIncr, `-`+max), w("n.b", intents.OpIncr, `-`+max))
	if v, _ := tr.Get("n.a"); v != 0.0 {
		t.Errorf("n.a = %v, want 0", v)
	}
	// An increment no float64 holds is refused too, whoever built it.
	for _, by := range []string{`1e999`, `"1"`, `[1]`} {
		if _, err := tr.Plan([]intents.Write{w("n.a", intents.OpIncr, by)}); err == nil {
			t.Errorf("Plan of incr by %s: no error", by)
		}
	}
}

// Apply, the fold of logged changes, keeps folding what logs written before
// Plan's range check hold (an incr that overflows becomes +Inf, as it did),
// and refuses a value no float64 holds with an error, changing nothing.
func TestApplyTolerates(t *testing.T) {
	tr := state.New()
	max := json.RawMessage(`1.7976931348623157e308`)
	old := []intents.Applied{{Path: "n.a", Op: intents.OpIncr, Value: max, NewVersion: 1}}
	for range 2 {
		if err := tr.Apply(tr.Rev()+1, old); err != nil {
			t.Fatalf("folding an old incr: %v", err)
		}
	}
	if v, _ := tr.Get("n.a"); v != math.Inf(1) {
		t.Fatalf("n.a = %v, want +Inf as before", v)
	}
	before := tr.Hash()
	for _, v := range []string{`1e999`, `[1,{"a":-1e999}]`, `{`, ``} {
		err := tr.Apply(tr.Rev()+1, []intents.Applied{{Path: "n.b", Op: intents.OpSet, Value: json.RawMessage(v)}})
		if err == nil {
			t.Errorf("Apply of set %q: no error", v)
		}
		if tr.Hash() != before {
			t.Fatalf("a refused Apply of %q changed the tree", v)
		}
	}
}

// Apply never panics, whatever the logged change holds: an error leaves the
// tree as it was.
func FuzzApply(f *testing.F) {
	f.Add("n.a", "incr", []byte(`1.7976931348623157e308`), "n.a", "incr", []byte(`1.7976931348623157e308`))
	f.Add("n.a", "set", []byte(`1e999`), "n", "delete", []byte(nil))
	f.Add("s.str", "incr", []byte(`1`), "s.arr.x", "set", []byte(`{"a":[1]}`))
	f.Add("s.obj", "merge", []byte(`{"k":null}`), "s.obj.k", "append", []byte(`"x"`))
	f.Add("s.arr", "append", []byte(`{"a":1,"a":2}`), "s", "set", []byte("\"\xff\""))
	f.Add("s", "set", []byte(`1`), "s.str", "incr", []byte(`2`))
	f.Fuzz(func(t *testing.T, p1, op1 string, v1 []byte, p2, op2 string, v2 []byte) {
		tr := state.New()
		commit(t, tr, w("s.str", intents.OpSet, `"x"`), w("s.arr", intents.OpSet, `[1]`),
			w("s.obj", intents.OpSet, `{"k":1}`), w("n.a", intents.OpSet, `1`))
		before := tr.Hash()
		change := []intents.Applied{{Path: p1, Op: intents.Op(op1), Value: v1}, {Path: p2, Op: intents.Op(op2), Value: v2}}
		if err := tr.Apply(tr.Rev()+1, change); err != nil && tr.Hash() != before {
			t.Fatalf("Apply %v failed (%v) but changed the tree", change, err)
		}
		tr.Export()
		tr.Paths()
	})
}
