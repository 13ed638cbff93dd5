package state_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/intents"
)

// randomWrites makes one intent's worth of non-overlapping writes on a small
// set of paths, so that sets, deletes, merges and deeper writes keep
// replacing each other's subtrees and leave tombstones behind.
func randomWrites(r *rand.Rand) []intents.Write {
	paths := []string{"a", "a.b", "a.b.c", "a.d", "a-b", "a0", "e.f.g", "e.h", "x"}
	values := []string{`1`, `"s"`, `null`, `[1,{"k":2}]`, `{"b":{"c":3},"z":true}`, `{"q":{"r":[]}}`, `2.5`, `{}`}
	var out []intents.Write
	for range 1 + r.IntN(3) {
		p := paths[r.IntN(len(paths))]
		if slicesAnyOverlap(out, p) {
			continue
		}
		wr := intents.Write{Path: p}
		switch r.IntN(6) {
		case 0:
			wr.Op = intents.OpDelete
		case 1:
			wr.Op, wr.Value = intents.OpMerge, json.RawMessage(`{"m":1,"c":null,"n":{"o":"p"}}`)
		case 2:
			wr.Op, wr.Value = intents.OpIncr, json.RawMessage(strconv.Itoa(r.IntN(9)))
		case 3:
			wr.Op, wr.Value = intents.OpAppend, json.RawMessage(values[r.IntN(len(values))])
		default:
			wr.Op, wr.Value = intents.OpSet, json.RawMessage(values[r.IntN(len(values))])
		}
		out = append(out, wr)
	}
	return out
}

func slicesAnyOverlap(ws []intents.Write, p string) bool {
	for _, w := range ws {
		if intents.Overlaps(w.Path, p) {
			return true
		}
	}
	return false
}

// randomTree applies random changes; the ones whose types do not fit (an
// incr on a string) are skipped, as the engine would reject them.
func randomTree(t *testing.T, seed uint64, n int) *state.Tree {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	tr := state.New()
	for range n {
		plan, err := tr.Plan(randomWrites(r))
		if err != nil {
			continue
		}
		if err := tr.Apply(tr.Rev()+1+uint64(r.IntN(3)), plan); err != nil {
			t.Fatalf("apply: %v", err)
		}
	}
	return tr
}

func roundTrip(t *testing.T, tr *state.Tree) *state.Tree {
	t.Helper()
	nodes := tr.Export()
	b, err := json.Marshal(nodes)
	if err != nil {
		t.Fatal(err)
	}
	var back []state.Node
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, nodes) {
		t.Fatalf("nodes changed through JSON:\n%s", b)
	}
	got, err := state.Import(tr.Rev(), back)
	if err != nil {
		t.Fatalf("import: %v\n%s", err, b)
	}
	return got
}

// A tree rebuilt from its export is the same tree, and stays the same under
// the same further changes.
func TestExportImport(t *testing.T) {
	for seed := range uint64(200) {
		tr := randomTree(t, seed, int(seed%60))
		got := roundTrip(t, tr)
		if got.Hash() != tr.Hash() || got.Rev() != tr.Rev() {
			t.Fatalf("seed %d: imported tree differs", seed)
		}
		if !reflect.DeepEqual(got.Paths(), tr.Paths()) || !reflect.DeepEqual(got.Export(), tr.Export()) {
			t.Fatalf("seed %d: imported paths differ", seed)
		}
		nodes := tr.Export()
		if nodes[0].Path != "" || nodes[0].Kind != state.NodeObject {
			t.Fatalf("seed %d: the root does not come first: %+v", seed, nodes[0])
		}
		// Any order will do.
		r := rand.New(rand.NewPCG(seed, 1))
		r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		if shuffled, err := state.Import(tr.Rev(), nodes); err != nil || shuffled.Hash() != tr.Hash() {
			t.Fatalf("seed %d: shuffled import: %v", seed, err)
		}
		for range 20 {
			ws := randomWrites(r)
			p1, err1 := tr.Plan(ws)
			p2, err2 := got.Plan(ws)
			if (err1 == nil) != (err2 == nil) || !reflect.DeepEqual(p1, p2) {
				t.Fatalf("seed %d: plans differ: %v %v / %v %v", seed, p1, err1, p2, err2)
			}
			if err1 != nil {
				continue
			}
			rev := tr.Rev() + 1
			if err := tr.Apply(rev, p1); err != nil {
				t.Fatal(err)
			}
			if err := got.Apply(rev, p2); err != nil {
				t.Fatal(err)
			}
			if got.Hash() != tr.Hash() {
				t.Fatalf("seed %d: trees diverged after %v", seed, ws)
			}
		}
	}
}

// Plan refuses an incr that overflows, but a log written before it did
// folds to +Inf, and a tree holding one exports and imports.
func TestExportNonFinite(t *testing.T) {
	tr := state.New()
	for range 2 {
		change := []intents.Applied{{Path: "n.big", Op: intents.OpIncr, Value: json.RawMessage(`1e308`)}}
		if err := tr.Apply(tr.Rev()+1, change); err != nil {
			t.Fatal(err)
		}
	}
	if v, _ := tr.Get("n.big"); !math.IsInf(v.(float64), 1) {
		t.Fatalf("n.big = %v, want +Inf", v)
	}
	got := roundTrip(t, tr)
	if got.Hash() != tr.Hash() {
		t.Fatal("imported tree differs")
	}
	if v, _ := got.Get("n.big"); !math.IsInf(v.(float64), 1) {
		t.Fatalf("imported n.big = %v", v)
	}
}

func TestImportEmpty(t *testing.T) {
	tr := state.New()
	if got := roundTrip(t, tr); got.Hash() != tr.Hash() {
		t.Fatal("empty tree differs")
	}
}

// Import refuses what no tree could hold, with an error.
func TestImportRejects(t *testing.T) {
	root := state.Node{Path: "", Kind: "object", Version: 2, ModRev: 2}
	obj := func(p string) state.Node { return state.Node{Path: p, Kind: "object", Version: 1, ModRev: 2} }
	leafOf := func(p, v string) state.Node {
		return state.Node{Path: p, Kind: "leaf", Value: json.RawMessage(v), Version: 1, ModRev: 2}
	}
	absentAt := func(p string) state.Node { return state.Node{Path: p, Kind: "absent", Version: 1, ModRev: 1} }
	cases := map[string][]state.Node{
		"no root":              {obj("a")},
		"root twice":           {root, root},
		"root a leaf":          {{Path: "", Kind: "leaf", Value: json.RawMessage(`1`)}},
		"root absent":          {{Path: "", Kind: "absent"}},
		"bad path":             {root, obj("a b")},
		"empty segment":        {root, obj("a"), obj("a..b")},
		"trailing dot":         {root, obj("a.")},
		"path twice":           {root, obj("a"), obj("a")},
		"no parent":            {root, leafOf("a.b", `1`)},
		"unknown kind":         {root, {Path: "a", Kind: "blob", Version: 1, ModRev: 1}},
		"leaf without value":   {root, {Path: "a", Kind: "leaf", Version: 1, ModRev: 1}},
		"leaf with object":     {root, leafOf("a", `{"b":1}`)},
		"leaf with bad JSON":   {root, leafOf("a", `{"b":`)},
		"leaf with two values": {root, {Path: "a", Kind: "leaf", Value: json.RawMessage(`1`), Number: "NaN", Version: 1, ModRev: 1}},
		"finite number":        {root, {Path: "a", Kind: "leaf", Number: "12", Version: 1, ModRev: 1}},
		"object with value":    {root, {Path: "a", Kind: "object", Value: json.RawMessage(`1`), Version: 1, ModRev: 1}},
		"absent with value":    {root, {Path: "a", Kind: "absent", Number: "+Inf", Version: 1, ModRev: 1}},
		"live under leaf":      {root, leafOf("a", `1`), leafOf("a.b", `2`)},
		"live under absent":    {root, absentAt("a"), leafOf("a.b", `2`)},
		"newer than parent":    {root, obj("a"), {Path: "a.b", Kind: "leaf", Value: json.RawMessage(`1`), Version: 5, ModRev: 1}},
		"after rev":            {root, {Path: "a", Kind: "leaf", Value: json.RawMessage(`1`), Version: 1, ModRev: 9}},
		"never written":        {root, {Path: "a", Kind: "absent"}},
	}
	for name, nodes := range cases {
		if _, err := state.Import(2, nodes); err == nil {
			t.Errorf("%s: imported", name)
		}
	}
	// The same shapes, done right, import.
	ok := []state.Node{root, obj("a"), leafOf("a.b", `[1]`), absentAt("a.c"), absentAt("a.c.d"), absentAt("z")}
	if _, err := state.Import(2, ok); err != nil {
		t.Errorf("valid nodes: %v", err)
	}
}
