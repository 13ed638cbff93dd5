package cond_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/cond"
)

// overBudgetCases are the expressions that cost the most time per unit of
// budget that we found, each with the state it runs on, made of n elements.
var overBudgetCases = []struct {
	name, src string
	state     func(n int) map[string]any
}{
	{"all", `all(state.a, {# >= 0})`, nums},
	{"any", `any(state.a, {# < 0})`, nums},
	{"map", `len(map(state.a, {#})) > 0`, nums},
	{"sum", `sum(state.a) > 0`, nums},
	{"reduce", `reduce(state.a, {#acc + #}, 0) > 0`, nums},
	{"nested", `all(state.b, {all(state.a, {# >= 0})})`, func(n int) map[string]any { m := nums(n); m["b"] = []any{1.0, 2.0}; return m }},
	{"filterObjects", `len(filter(state.o, {.s == "x" && .k >= 0})) > 0`, objects},
	{"oneObject", `one(state.o, {.k < 0})`, objects},
	{"groupByNumbers", `len(groupBy(state.a, {#})) > 0`, nums},
	{"groupByStrings", `len(groupBy(state.s, {#})) > 0`, strs},
	{"sortByObjects", `len(sortBy(state.o, {.k})) > 0`, objects},
	{"sortStrings", `len(sort(state.s)) > 0`, strs},
	{"uniq", `len(uniq(state.a)) > 0`, nums},
	{"toJSON", `len(toJSON(state.o)) > 0`, objects},
	{"string", `len(string(state.o)) > 0`, objects},
	{"fromJSON", `len(fromJSON(state.j)) > 0`, func(n int) map[string]any {
		return map[string]any{"j": "[" + strings.Repeat(`{"a":1,"b":[1,2,"x"]},`, n) + "1]"}
	}},
	{"equalObjects", `state.o == state.p`, objects},
	{"inObjects", `{"k": -1.0, "s": "x"} in state.o`, objects},
	{"inNumbers", `-1 in state.a`, nums},
	{"matches", `state.t matches "(a|b)*c"`, text},
	{"matchesDynamic", `state.t matches state.r`, text},
	{"matchesBigPattern", `state.t matches state.r`, func(n int) map[string]any {
		return map[string]any{"t": "ab", "r": strings.Repeat("(a|b)*", n)}
	}},
	{"upper", `len(upper(state.u)) > 0`, func(n int) map[string]any { return map[string]any{"u": strings.Repeat("é", n)} }},
	{"split", `len(split(state.u, "")) > 0`, func(n int) map[string]any { return map[string]any{"u": strings.Repeat("é", n)} }},
	{"keys", `len(keys(state.m)) > 0`, members},
	{"values", `len(values(state.m)) > 0`, members},
	{"readObject", `state.m != nil`, members},
	{"concat", `len(concat(state.a, state.a)) > 0`, nums},
	{"flatten", `len(flatten([state.a, state.a])) > 0`, nums},
	{"median", `median(state.a) > 0`, nums},
	{"join", `len(join(state.s, ",")) > 0`, strs},
	{"replace", `len(replace(state.t, "a", "bb")) > 0`, text},
	{"straightLine", strings.Repeat(`state.x.y + 1 > 0 && `, 90) + `true`, func(n int) map[string]any {
		return map[string]any{"x.y": 1.0, "n": float64(n)}
	}},
}

func nums(n int) map[string]any {
	a := make([]any, n)
	for i := range a {
		a[i] = float64(i)
	}
	return map[string]any{"a": a}
}

func strs(n int) map[string]any {
	a := make([]any, n)
	for i := range a {
		a[i] = fmt.Sprintf("k%07d", (i*7919)%n) // not in order: a sort's worst
	}
	return map[string]any{"s": a}
}

func objects(n int) map[string]any {
	o, p := make([]any, n), make([]any, n)
	for i := range o {
		o[i] = map[string]any{"k": float64(i), "s": "x"}
		p[i] = map[string]any{"k": float64(i), "s": "x"}
	}
	return map[string]any{"o": o, "p": p}
}

func members(n int) map[string]any {
	m := make(map[string]any, n)
	for i := range n {
		m[fmt.Sprint("m", i)] = float64(i)
	}
	return map[string]any{"m": m}
}

func text(n int) map[string]any {
	return map[string]any{"t": strings.Repeat("a", n), "r": "(a|b)*c"}
}

// fits reports whether src on the state of n elements stays within the
// budget, and what it spends.
func fits(c *cond.Compiler, compiled *cond.Condition, r cond.Reader) (bool, int64) {
	ev := c.NewEvaluator()
	ev.Begin(time.Time{})
	_, err := ev.Eval(compiled, r, nil, in)
	return !errors.Is(err, cond.ErrBudget), ev.Spent()
}

// BenchmarkOverBudget runs each costliest expression on the largest state
// that its budget admits, and reports how long a whole budget takes
// (ms/budget): the longest an intent's conditions can hold the decision
// loop. DefaultBudget is chosen from it.
//
//	go test ./coordinator/cond -run '^$' -bench OverBudget -benchtime 5x
func BenchmarkOverBudget(b *testing.B) {
	c := cond.NewCompiler(cond.Options{})
	for _, tc := range overBudgetCases {
		b.Run(tc.name, func(b *testing.B) {
			compiled, err := c.Compile("pre[0]", tc.src, false)
			if err != nil {
				b.Fatal(err)
			}
			// The largest n that fits, by bisection.
			lo, hi := 1, 1<<22
			for lo < hi {
				mid := (lo + hi + 1) / 2
				if ok, _ := fits(c, compiled, newFresh(tc.state(mid))); ok {
					lo = mid
				} else {
					hi = mid - 1
				}
			}
			r := newFresh(tc.state(lo))
			_, spent := fits(c, compiled, r)
			b.ResetTimer()
			for b.Loop() {
				ev := c.NewEvaluator() // with nothing compiled or cached from before
				ev.Begin(time.Time{})
				if _, err := ev.Eval(compiled, r, nil, in); errors.Is(err, cond.ErrBudget) {
					b.Fatal(err)
				}
			}
			perUnit := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(max(spent, 1))
			b.ReportMetric(perUnit*cond.DefaultBudget/1e6, "ms/budget")
			b.ReportMetric(float64(spent), "units")
		})
	}
}
