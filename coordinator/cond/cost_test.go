package cond_test

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/intents"
)

// freshReader is a Reader that, like the state tree, materializes an
// object afresh on every Get, counts the Gets, and can say how big a read
// is before making it (cond.Sizer).
type freshReader struct {
	vals map[string]any
	gets map[string]int
}

func newFresh(vals map[string]any) *freshReader {
	return &freshReader{vals: vals, gets: map[string]int{}}
}

func (r *freshReader) Get(p string) (any, bool) {
	r.gets[p]++
	v, ok := r.vals[p]
	if m, isObj := v.(map[string]any); isObj {
		return maps.Clone(m), true
	}
	return v, ok
}

func (r *freshReader) Version(string) uint64    { return 1 }
func (r *freshReader) ModTime(string) time.Time { return time.Time{} }

func (r *freshReader) GetWithin(p string, limit int64) (any, bool, int64) {
	m, _ := r.vals[p].(map[string]any)
	if int64(len(m)) > limit {
		return nil, true, int64(len(m))
	}
	v, ok := r.Get(p)
	return v, ok, int64(len(m))
}

var in = &intents.Intent{ID: id, Agent: "w1", Kind: intents.KindApply}

// evalFresh evaluates src as an intent's only precondition, with a new
// budget, and returns the result, the error and the units spent.
func evalFresh(t *testing.T, c *cond.Compiler, src string, r cond.Reader) (bool, error, int64) {
	t.Helper()
	compiled, err := c.Compile("pre[0]", src, false)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	ev := c.NewEvaluator()
	ev.Begin(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ok, err := ev.Eval(compiled, r, nil, in)
	return ok, err, ev.Spent()
}

// overBudget checks that src is refused for its budget, and that a second
// evaluation, from scratch, is refused in the same words after the same
// spending: the budget is counted, not timed.
func overBudget(t *testing.T, c *cond.Compiler, src string, r cond.Reader, what string) *cond.BudgetError {
	t.Helper()
	_, err, _ := evalFresh(t, c, src, r)
	var be *cond.BudgetError
	if !errors.As(err, &be) || !errors.Is(err, cond.ErrBudget) {
		t.Fatalf("%s: err %v, want a BudgetError", src, err)
	}
	if !strings.Contains(be.Error(), what) {
		t.Errorf("%s: %q, want it to name %q", src, be.Error(), what)
	}
	_, again, _ := evalFresh(t, c, src, r)
	if again == nil || again.Error() != err.Error() {
		t.Errorf("%s: refused as %v, then as %v", src, err, again)
	}
	return be
}

// The hostile trial of the issue: a 100,000-byte string matched against a
// pattern of a thousand starred groups took 6.1 s of CPU. It is refused
// before the match runs.
func TestBudgetHostileMatches(t *testing.T) {
	c := cond.NewCompiler(cond.Options{})
	r := newFresh(map[string]any{
		"rx.p": strings.Repeat("(a|b)*", 1000) + "c",
		"rx.s": strings.Repeat("a", 100000),
	})
	be := overBudget(t, c, `state.rx.s matches state.rx.p`, r,
		"over the evaluation budget of 1000000 units per intent: matches on a 100000-byte string with a 6001-byte pattern costs")
	if be.Budget != cond.DefaultBudget || be.Cost <= be.Budget {
		t.Errorf("budget %d, cost %d", be.Budget, be.Cost)
	}
	// A constant pattern, compiled once with the expression, is charged the
	// same way.
	overBudget(t, c, `state.rx.s matches "`+strings.Repeat("(a|b)*", 1000)+`c"`, r, "matches on a 100000-byte string")

	// Refusing it spends what parsing and compiling the pattern would cost,
	// not the match: 64 such conditions in one intent stop at the first.
	ev := c.NewEvaluator()
	ev.Begin(time.Time{})
	compiled, err := c.Compile("pre[0]", `state.rx.s matches state.rx.p`, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ev.Eval(compiled, r, nil, in); !errors.Is(err, cond.ErrBudget) {
		t.Fatalf("err %v", err)
	}
	if spent := ev.Spent(); spent > cond.DefaultBudget/5 {
		t.Errorf("spent %d units to refuse it", spent)
	}
}

func TestBudgetRefusals(t *testing.T) {
	c := cond.NewCompiler(cond.Options{})
	big := make([]any, 2000)
	for i := range big {
		big[i] = float64(i)
	}
	huge := make([]any, 2_000_000)
	for i := range huge {
		huge[i] = 1.0
	}
	board := map[string]any{}
	for i := range 50000 {
		board[fmt.Sprintf("k%05d", i)] = map[string]any{"title": "a task", "n": float64(i)}
	}
	r := newFresh(map[string]any{"big": big, "huge": huge, "board": board, "s": strings.Repeat("x", 300000)})
	for src, what := range map[string]string{
		// Nested loops over a big state array: 2000 × 2000 steps.
		`all(state.big, {all(state.big, {# >= 0})})`: "a loop over 2000 elements",
		// A string doubling in reduce: 2^64 bytes without a bound.
		`len(reduce(1..64, {#acc + #acc}, "ab")) > 0`: "+ on a",
		// A big toJSON of a board.
		`len(toJSON(state.board)) > 0`: "toJSON on an object of 50000 members",
		// in over a big array.
		`-1 in state.huge`: "in on a number and an array of 2000000 elements",
		// Products of their arguments, charged before they run.
		// A constant a million times: 4 GB before expr's memory check.
		`len(repeat("` + strings.Repeat("x", 4000) + `", 1000000)) > 0`: "repeat on a 4000-byte string",
		`len(repeat(state.s, 1000000)) > 0`:                             "repeat on a 300000-byte string",
		`len(replace(state.s, "x", state.s)) > 0`:                       "replace on a 300000-byte string",
		`len(join(state.big, state.s)) > 0`:                             "join on an array of 2000 elements",
		`len(uniq(state.huge)) > 0`:                                     "uniq on an array of 2000000 elements",
		`state.s + state.s + state.s + state.s == ""`:                   "+ on a",
	} {
		t.Run(src, func(t *testing.T) { overBudget(t, c, src, r, what) })
	}
}

// The conditions of one intent share its budget; Begin starts the next
// intent's in full.
func TestBudgetShared(t *testing.T) {
	c := cond.NewCompiler(cond.Options{})
	list := make([]any, 20000)
	for i := range list {
		list[i] = float64(i)
	}
	r := newFresh(map[string]any{"l": list})
	compiled, err := c.Compile("pre[0]", `all(state.l, {# >= 0})`, false)
	if err != nil {
		t.Fatal(err)
	}
	ev := c.NewEvaluator()
	for round := range 2 {
		ev.Begin(time.Time{})
		var refused int
		for i := range intents.MaxConditions {
			ok, err := ev.Eval(compiled, r, nil, in)
			if err != nil {
				var be *cond.BudgetError
				if !errors.As(err, &be) || be.Spent == 0 {
					t.Fatalf("condition %d: %v", i, err)
				}
				refused = i
				break
			}
			if !ok {
				t.Fatalf("condition %d is false", i)
			}
		}
		// Each costs about 100,000 units: the tenth or so goes over.
		if refused < 5 || refused > 15 {
			t.Errorf("round %d: refused at condition %d", round, refused)
		}
	}
}

// A path read many times in one evaluation is materialized once.
func TestBudgetReadsMemoized(t *testing.T) {
	c := cond.NewCompiler(cond.Options{})
	doc := map[string]any{}
	for i := range 1000 {
		doc[fmt.Sprint("m", i)] = float64(i)
	}
	r := newFresh(map[string]any{"doc": doc})
	src := strings.Repeat(`state.doc.m5 == nil && `, 0) + strings.Repeat(`len(state.doc) > 0 && `, 100) + `has("doc")`
	ok, err, spent := evalFresh(t, c, src, r)
	if !ok || err != nil {
		t.Fatalf("%v %v", ok, err)
	}
	if r.gets["doc"] != 1 {
		t.Errorf("doc read %d times, want once", r.gets["doc"])
	}
	if spent > 10000 {
		t.Errorf("spent %d units", spent)
	}
	// A huge object is refused before it is built.
	for i := range 400000 {
		doc[fmt.Sprint("m", i)] = float64(i)
	}
	r.gets = map[string]int{}
	overBudget(t, c, `state.doc != nil`, r, "reading state.doc (an object of more than")
	if r.gets["doc"] != 0 {
		t.Errorf("doc read %d times, want never", r.gets["doc"])
	}
	// Whether it exists needs none of it.
	if ok, err, spent := evalFresh(t, c, `has("doc")`, r); !ok || err != nil || spent > 10 || r.gets["doc"] != 0 {
		t.Errorf("has(doc) = %v, %v, spent %d, %d reads", ok, err, spent, r.gets["doc"])
	}
}

// What an intent spends depends on nothing decided before it: a pattern
// this evaluator compiled already is charged as a new one.
func TestBudgetIndependentOfHistory(t *testing.T) {
	c := cond.NewCompiler(cond.Options{})
	r := newFresh(map[string]any{"s": strings.Repeat("ab", 100), "p": "(a|b)+", "l": []any{"ab", "ba"}})
	compiled, err := c.Compile("pre[0]", `state.s matches state.p && all(state.l, {# matches state.p})`, false)
	if err != nil {
		t.Fatal(err)
	}
	old := c.NewEvaluator()
	var spent []int64
	for range 3 {
		old.Begin(time.Time{})
		if ok, err := old.Eval(compiled, r, nil, in); !ok || err != nil {
			t.Fatal(ok, err)
		}
		spent = append(spent, old.Spent())
	}
	fresh := c.NewEvaluator()
	fresh.Begin(time.Time{})
	fresh.Eval(compiled, r, nil, in)
	if spent[0] != spent[1] || spent[1] != spent[2] || spent[2] != fresh.Spent() {
		t.Errorf("spent %v, then %d on a fresh evaluator", spent, fresh.Spent())
	}
}

// Ordinary conditions, those of the tests and the README, cost little.
func TestBudgetOrdinaryCheap(t *testing.T) {
	c := cond.NewCompiler(cond.Options{})
	tasks := map[string]any{}
	for i := range 100 {
		tasks[fmt.Sprint("t", i)] = map[string]any{"status": "RUNNING", "owner": "w1", "est": 3.0}
	}
	r := newFresh(map[string]any{"report.status": "draft", "count.n": 3.0, "tasks.t1.owner": "w1", "tasks": tasks,
		"items.list": []any{1.0, 2.0, 3.0}, "doc.body": strings.Repeat("word ", 1000)})
	for _, src := range []string{
		`state.report.status == "draft"`,
		`state.count.n == 3 && state.count.n > 2.5`,
		`state.tasks.t9.owner.name.first == nil`,
		`state.tasks.t1.owner == agent`,
		`has("tasks.t1.owner") && !has("tasks.t2")`,
		`version("report.status") == 1`,
		`intent.kind == "apply"`,
		`all(state.items.list, {# > 0})`,
		`count(values(state.tasks), .status == "RUNNING") <= 200`,
		`count(values(state.tasks), .lane == "coder" && .status == "RUNNING") <= 2`, // docs/rules.md's wip invariant
		`state.report.sections.intro.owner == nil`,                                  // the README's precondition
		`state.doc.body contains "word" && len(state.doc.body) > 100`,
		`state.report.status in ["draft", "review"]`,
		`now() >= date("2000-01-01")`,
	} {
		ok, err, spent := evalFresh(t, c, src, r)
		if !ok || err != nil {
			t.Errorf("%s = %v, %v", src, ok, err)
		}
		if spent > cond.DefaultBudget/100 {
			t.Errorf("%s spent %d units, more than 1%% of the budget", src, spent)
		}
	}
	// A smaller budget refuses them.
	small := cond.NewCompiler(cond.Options{Budget: 10})
	overBudget(t, small, `count(values(state.tasks), .status == "RUNNING") <= 200`, r, "over the evaluation budget of 10 units")
}

// now() is the decision's time, given to Begin, not the host's clock: the
// same condition on the same state follows the decision time.
func TestConditionClock(t *testing.T) {
	c := cond.NewCompiler(cond.Options{})
	compiled, err := c.Compile("pre[0]", `now() >= date("2026-01-01T00:00:00Z") && now().Year() == 2026`, false)
	if err != nil {
		t.Fatal(err)
	}
	ev := c.NewEvaluator()
	r := newFresh(nil)
	for at, want := range map[time.Time]bool{
		time.Date(2025, 12, 31, 23, 59, 59, 0, time.UTC):                       false,
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC):                            true,
		time.Date(2026, 6, 1, 0, 0, 0, 0, time.FixedZone("far east", 14*3600)): true,
		time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC):                            false,
	} {
		ev.Begin(at)
		if got, err := ev.Eval(compiled, r, nil, in); got != want || err != nil {
			t.Errorf("at %s: %v, %v; want %v", at, got, err, want)
		}
	}
	// date() reads a zone abbreviation in UTC, whatever the host's zone.
	ev.Begin(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for src, want := range map[string]bool{
		`date("2026-01-01 00:00:00") == now()`:                                            true,
		`date("Thu, 01 Jan 2026 00:00:00 UTC", "Mon, 02 Jan 2006 15:04:05 MST") == now()`: true,
		`now().Hour() == 0 && now().Location().String() == "UTC"`:                         true,
	} {
		compiled, err := c.Compile("pre[0]", src, false)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ev.Eval(compiled, r, nil, in); got != want || err != nil {
			t.Errorf("%s = %v, %v; want %v", src, got, err, want)
		}
	}
	// What would read the host's zones does not compile.
	for src, msg := range map[string]string{
		`now().Local().Hour() == 0`:                             "Local() is not available",
		`timezone("Europe/Paris") != nil`:                       "timezone() is not available",
		`date("2026-01-01", "2006-01-02", "Asia/Tokyo") != nil`: "date() with a time zone name is not available",
		`$env != nil`:             "$env is reserved",
		`CoagentNow($env) != nil`: "CoagentNow is reserved",
	} {
		_, err := c.Compile("pre[0]", src, false)
		var ve *intents.ValidationError
		if !errors.As(err, &ve) || !strings.Contains(ve.Reason, msg) {
			t.Errorf("%s: %v, want %q", src, err, msg)
		}
	}
}

// keys(), values() and toPairs() list an object's members in the order of
// their keys, not Go's map order, which changes from run to run.
func TestConditionMapOrder(t *testing.T) {
	c := cond.NewCompiler(cond.Options{})
	m := map[string]any{}
	for _, k := range []string{"d", "b", "a", "e", "c", "g", "f"} {
		m[k] = k + k
	}
	r := newFresh(map[string]any{"m": m})
	for _, src := range []string{
		`keys(state.m) == ["a", "b", "c", "d", "e", "f", "g"]`,
		`values(state.m) == ["aa", "bb", "cc", "dd", "ee", "ff", "gg"]`,
		`toPairs(state.m)[0][0] == "a" && toPairs(state.m)[6][1] == "gg"`,
		`keys(groupBy([3, 1, 2, 1], #))[0] == 1`,
	} {
		for range 20 {
			if ok, err, _ := evalFresh(t, c, src, r); !ok || err != nil {
				t.Fatalf("%s = %v, %v", src, ok, err)
			}
		}
	}
}
