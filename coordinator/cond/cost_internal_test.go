package cond

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/conf"
)

type plainReader map[string]any

func (m plainReader) Get(p string) (any, bool) { v, ok := m[p]; return v, ok }
func (m plainReader) ModTime(string) time.Time { return time.Time{} }
func (m plainReader) Version(p string) uint64 {
	if _, ok := m[p]; ok {
		return 3
	}
	return 0
}

// costedCorpus are expressions over every operator and builtin the cost
// patcher rewrites, right and wrong.
var costedCorpus = []string{
	`state.a.s == "x"`, `state.a.s != state.a.t`, `state.a.s < state.a.t`, `state.a.s >= state.a.t`,
	`state.a.n > state.a.m`, `state.a.n <= state.a.m`, `state.a.l == state.a.l2`, `state.a.o == state.a.o2`,
	`state.a.o != old.a.o`, `state.a.n == state.a.f`, `state.a.nil == state.a.none`, `state.a.s < state.a.n`,
	`state.a.s in state.a.l`, `state.a.n in state.a.l`, `"k" in state.a.o`, `state.a.s in state.a.o`,
	`state.a.o in state.a.l`, `1 in state.a.none`, `state.a.s in ["x", "y"]`, `state.a.n in 1..5`,
	`state.a.s contains state.a.t`, `state.a.s contains "x"`, `state.a.none contains state.a.s`,
	`state.a.s startsWith state.a.t`, `state.a.s endsWith state.a.t`, `state.a.n startsWith state.a.s`,
	`state.a.s + state.a.t == "xyz"`, `state.a.n + state.a.m > 3`, `state.a.s + state.a.n == "x"`,
	`state.a.l + state.a.l == nil`, `len(state.a.s + "!") == 2`, `agent + state.a.s == "w1x"`,
	`state.a.s matches state.a.re`, `state.a.s matches "^x+$"`, `state.a.s matches state.a.bad`,
	`state.a.none matches "x"`, `state.a.n matches "x"`, `not (state.a.s matches "y")`,
	`len(1..state.a.n) == 2`, `state.a.o[state.a.s] == nil`, `state.a.o[state.a.k] == 1`, `state.a.l[state.a.n] == 2`,
	`{(state.a.s): 1}.x == 1`,
	`all(state.a.l, {# > 0})`, `any(state.a.l, {# > 2})`, `none(state.a.l, {# > 9})`, `one(state.a.l, {# == 2})`,
	`len(filter(state.a.l, {# > 1})) == 2`, `map(state.a.l, {# * 2})[2] == 6`, `count(state.a.l, {# > 1}) == 2`,
	`count(state.a.bools) == 1`, `sum(state.a.l) == 6`, `sum(state.a.l, {# * 2}) == 12`, `find(state.a.l, {# > 1}) == 2`,
	`findIndex(state.a.l, {# > 1}) == 1`, `findLast(state.a.l, {# > 1}) == 3`, `findLastIndex(state.a.l, {# > 1}) == 2`,
	`groupBy(state.a.l, {# % 2})[1][0] == 1`, `sortBy(state.a.objs, {.k}, "desc")[0].k == 3`,
	`reduce(state.a.l, {#acc + #}, 0) == 6`, `reduce(state.a.l, {#acc + string(#)}, "") == "123"`,
	`all(state.a.s, {true})`, `filter(state.a.none, {true}) == []`, `state.a.l | map(# + 1) | sum() == 9`,
	`len(filter(state.a.l, {# > 1})) > 0`, `filter(state.a.l, {# > 1})[0] == 2`, `count(state.a.l, {# > 1}) > 0`,
	`string(state.a.o) != ""`, `toJSON(state.a.o) contains "k"`, `fromJSON(state.a.js).k == 1`, `fromJSON(state.a.s) == 1`,
	`toBase64(state.a.s) == "eA=="`, `fromBase64(toBase64(state.a.s)) == state.a.s`, `upper(state.a.s) == "X"`,
	`lower(state.a.t) == "yz"`, `trim(state.a.sp) == "x"`, `trim(state.a.sp, " x") == ""`, `trimPrefix(state.a.s, "x") == ""`,
	`trimSuffix(state.a.t) == "yz"`, `split(state.a.csv, ",")[1] == "b"`, `splitAfter(state.a.csv, ",")[0] == "a,"`,
	`split(state.a.csv, ",", 2)[1] == "b,c"`, `replace(state.a.csv, ",", ";") == "a;b;c"`,
	`replace(state.a.csv, ",", state.a.t, 1) == "ayzb,c"`, `replace(state.a.s, "", "-") == "-x-"`,
	`repeat(state.a.s, 3) == "xxx"`, `repeat(state.a.s, state.a.n) == "x"`, `repeat(state.a.s, -1) == ""`,
	`join(state.a.strs) == "ab"`, `join(state.a.strs, state.a.s) == "axb"`, `join(state.a.l, ",") == ""`,
	`indexOf(state.a.csv, state.a.comma) == 1`, `lastIndexOf(state.a.csv, ",") == 3`, `hasPrefix(state.a.csv, "a")`,
	`hasSuffix(state.a.csv, state.a.t)`, `int(state.a.num) == 42`, `float(state.a.num) == 42.0`, `int(state.a.s) == 0`,
	`duration(state.a.dur) > duration("1s")`, `date(state.a.day) < date("2030-01-01")`, `date(state.a.day, "2006-01-02").Year() == 2026`,
	`max(state.a.l) == 3`, `min(state.a.l) == 1`, `mean(state.a.l) == 2`, `median(state.a.l) == 2`, `max(state.a.n, 7) == 7`,
	`keys(state.a.o)[0] == "k"`, `len(values(state.a.o)) == 2`, `toPairs(state.a.o)[0][1] == 1`, `keys(state.a.s) == nil`,
	`fromPairs(toPairs(state.a.o)).k == 1`, `reverse(state.a.l)[0] == 3`, `uniq(state.a.dups) == [1, 2]`,
	`concat(state.a.l, state.a.l)[3] == 1`, `flatten([state.a.l, [state.a.l]])[5] == 3`, `sort(state.a.strs, "desc")[0] == "b"`,
	`sort(state.a.l)[0] == 1`, `get(state.a.o, state.a.k) == 1`, `get(state.a.l, 9) == nil`, `first(state.a.l) == 1`,
	`last(state.a.l) == 3`, `take(state.a.l, 2) == [1, 2]`, `type(state.a.o) == "map"`, `abs(state.a.neg) == 2`,
	`len(state.a.l) == 3`, `date(state.a.day).Format(state.a.layout) == "2026"`, `(state.a.n ?? 1) == 1`,
	`(state.a.none ?? state.a.s) == "x"`, `state.a.n > 0 ? state.a.s == "x" : false`, `let v = state.a.s; v + v == "xx"`,
	`has("a.s") && !has("a.zz") && version("a.s") == 3`, `intent.kind + state.a.s == "applyx"`,
	`state.a.o.k == old.a.o.k`, `old.a.s == nil`, `state.a.s`, `state.a.n + "x"`, `bitand(int(state.a.n), 3) == 1`,
	`now() == now()`, `now().Unix() > 0`,
}

// The costed form of an expression decides exactly as the uncosted one:
// same values, same errors.
func TestCostedSameAsUncosted(t *testing.T) {
	costed := NewCompiler(Options{})
	plain := NewCompiler(Options{})
	plain.uncosted = true
	a := map[string]any{
		"s": "x", "t": "yz", "n": 1.0, "m": 2.0, "f": 1.0, "nil": nil, "l": []any{1.0, 2.0, 3.0}, "l2": []any{1.0, 2.0, 3.0},
		"o": map[string]any{"k": 1.0, "j": "x"}, "o2": map[string]any{"k": 1.0, "j": "x"}, "re": "^x$", "bad": "(",
		"k": "k", "bools": []any{true, false}, "objs": []any{map[string]any{"k": 1.0}, map[string]any{"k": 3.0}},
		"js": `{"k":1}`, "sp": " x ", "csv": "a,b,c", "strs": []any{"a", "b"}, "comma": ",", "num": "42",
		"dur": "2s", "day": "2026-01-02", "dups": []any{1.0, 2.0, 1.0}, "neg": -2.0, "layout": "2006",
	}
	cur := plainReader{}
	for k, v := range a {
		cur["a."+k] = v
	}
	cur["a"] = a
	old := plainReader{"a.o": map[string]any{"k": 1.0}}
	in := &intents.Intent{ID: "01JD0000000000000000000000", Agent: "w1", Kind: intents.KindApply}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, src := range costedCorpus {
		cc, cerr := costed.Compile("post[0]", src, true)
		pc, perr := plain.Compile("post[0]", src, true)
		if fmt.Sprint(cerr) != fmt.Sprint(perr) {
			t.Errorf("%s: compiles to %v, uncosted to %v", src, cerr, perr)
			continue
		}
		if cerr != nil {
			t.Errorf("%s: %v", src, cerr)
			continue
		}
		ce, pe := costed.NewEvaluator(), plain.NewEvaluator()
		ce.Begin(now)
		pe.Begin(now)
		cok, cerr := ce.Eval(cc, cur, old, in)
		pok, perr := pe.Eval(pc, cur, old, in)
		if cok != pok || fmt.Sprint(cerr) != fmt.Sprint(perr) {
			t.Errorf("%s = %v, %v; uncosted %v, %v", src, cok, cerr, pok, perr)
		}
		t.Logf("%s = %v, %v", src, cok, cerr)
	}
}

// TestEveryBuiltinHasACostClass: every builtin of the expr in go.mod is
// metered as a loop, linear in its arguments, constant or in a way of its
// own, or refused; one that is none of them (an upgrade of expr added it)
// is listed here. The allow-list is expr's own (every builtin disabled,
// each metered one enabled), and a condition that calls a builtin left
// off does not compile, named in the error, whether expr parses the call
// as an unknown function (abs) or, taking a predicate, as the builtin
// regardless of the list (all).
func TestEveryBuiltinHasACostClass(t *testing.T) {
	for _, f := range builtin.Builtins {
		if !metered(f.Name) && refused[f.Name] == "" {
			t.Errorf("expr's builtin %s has no cost class (cost_patch.go: loops, linear, constant, special or refused)", f.Name)
		}
	}
	config := conf.CreateNew()
	for _, op := range builtins() {
		op(config)
	}
	for _, f := range builtin.Builtins {
		if config.Disabled[f.Name] == metered(f.Name) {
			t.Errorf("%s: disabled in expr %v, metered %v", f.Name, config.Disabled[f.Name], metered(f.Name))
		}
	}
	for _, tc := range []struct {
		name, src string
		class     map[string]bool
	}{
		{"abs", `abs(state.a.n) > 1`, constant},
		{"all", `all(state.a.l, {# > 0})`, loops},
	} {
		if _, err := NewCompiler(Options{}).Compile("pre[0]", tc.src, true); err != nil {
			t.Fatalf("%s, classed: %v", tc.name, err)
		}
		delete(tc.class, tc.name)
		_, err := NewCompiler(Options{}).Compile("pre[0]", tc.src, true)
		tc.class[tc.name] = true
		if err == nil || !strings.Contains(err.Error(), "the builtin "+tc.name+" has no cost class") {
			t.Errorf("%s, classed nowhere: %v, want it refused", tc.name, err)
		}
	}
}
