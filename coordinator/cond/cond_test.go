package cond_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/intents"
)

// id is the id of the intents conditions are evaluated on behalf of.
const id = "01JD0000000000000000000000"

// mapReader is a Reader over flat paths, enough to exercise conditions.
type mapReader map[string]any

func (m mapReader) Get(p string) (any, bool) { v, ok := m[p]; return v, ok }
func (m mapReader) Version(p string) uint64 {
	if _, ok := m[p]; ok {
		return 7
	}
	return 0
}

// changed is when every path of a mapReader last changed.
var changed = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

func (m mapReader) ModTime(p string) time.Time {
	if _, ok := m[p]; ok {
		return changed
	}
	return time.Time{}
}

// mod_time(path) is when path last changed, for telling a stale task:
// compared with now(), the decision's time, and durations.
func TestConditionModTime(t *testing.T) {
	c := cond.NewCompiler(cond.Options{})
	ev := c.NewEvaluator()
	cur := mapReader{"tasks.t1": map[string]any{"owner": "w1"}}
	in := &intents.Intent{ID: id, Agent: "w2", Kind: intents.KindApply}
	for _, tc := range []struct {
		now  time.Time
		src  string
		want bool
	}{
		{changed.Add(2 * time.Hour), `now() - mod_time("tasks.t1") > duration("1h")`, true},
		{changed.Add(30 * time.Minute), `now() - mod_time("tasks.t1") > duration("1h")`, false},
		{changed, `mod_time("tasks.t1") == date("2026-12-01T08:00:00Z")`, true},
		{changed, `mod_time("tasks.t9").IsZero()`, true},
	} {
		compiled, err := c.Compile("pre[0]", tc.src, false)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		ev.Begin(tc.now)
		if got, err := ev.Eval(compiled, cur, nil, in); err != nil || got != tc.want {
			t.Errorf("%s at %s = %v, %v; want %v", tc.src, tc.now, got, err, tc.want)
		}
	}
	if cp, err := c.Compile("pre[0]", `now() - mod_time("tasks.t1") > duration("1h")`, false); err != nil || !slices.Contains(cp.Paths, "tasks.t1") {
		t.Fatalf("mod_time's path is one the condition reads: %v, %v", cp, err)
	}
	for _, src := range []string{`mod_time(state.tasks.t1.owner) != nil`, `mod_time("tasks..t1") != nil`, `mod_time("a", "b") != nil`} {
		if _, err := c.Compile("pre[0]", src, false); err == nil {
			t.Errorf("%s compiled", src)
		}
	}
}

func TestConditionPaths(t *testing.T) {
	c := cond.NewCompiler(cond.Options{})
	for src, want := range map[string][]string{
		`state.report.status == "draft"`:                  {"report.status"},
		`state.a.b == 1 && state.a.c == 2`:                {"a.b", "a.c"},
		`state.a["b"].c == nil`:                           {"a.b.c"},
		`has("tasks.t9") || version("tasks.t1") > 2`:      {"tasks.t1", "tasks.t9"},
		`state.tasks[agent] == nil`:                       {"tasks"},
		`len(state.report.sections) > 0 && agent == "w1"`: {"report.sections"},
		`intent.priority > 1`:                             nil,
		`all(state.items.list, {# > 0})`:                  {"items.list"},
	} {
		compiled, err := c.Compile("pre[0]", src, false)
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		if !slices.Equal(compiled.Paths, want) {
			t.Errorf("%s: paths %v, want %v", src, compiled.Paths, want)
		}
	}
}

func TestConditionCompileErrors(t *testing.T) {
	c := cond.NewCompiler(cond.Options{MaxNodes: 50})
	for src, msg := range map[string]string{
		`state.a ==`:                         "does not compile",
		`1 + 2`:                              "not boolean",
		`"yes"`:                              "not boolean",
		`state == nil`:                       "unknown name",
		`state[agent] == 1`:                  "constant path",
		`has(agent)`:                         "constant path",
		`has("a b")`:                         "segment",
		`state.a["b c"] == 1`:                "segment",
		`CoagentCur("a") == 1`:               "reserved",
		`old.a == 1`:                         "only defined in post",
		strings.Repeat("1 + ", 60) + `1 > 0`: "does not compile",
	} {
		_, err := c.Compile("pre[3]", src, false)
		var ve *intents.ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: err %v, want a ValidationError", src, err)
			continue
		}
		if ve.Field != "pre[3]" || !strings.Contains(ve.Reason, msg) {
			t.Errorf("%s: %v, want field pre[3] and %q", src, err, msg)
		}
	}
	// Cached errors are relabelled with the field asking.
	_, err := c.Compile("post[1]", `1 + 2`, false)
	if ve := (*intents.ValidationError)(nil); !errors.As(err, &ve) || ve.Field != "post[1]" {
		t.Errorf("cached error %v", err)
	}
}

func TestConditionEval(t *testing.T) {
	c := cond.NewCompiler(cond.Options{})
	ev := c.NewEvaluator()
	cur := mapReader{"report.status": "draft", "count.n": 3.0, "tasks.t1.owner": "w1"}
	old := mapReader{"report.status": "new"}
	in := &intents.Intent{ID: id, Agent: "w1", Kind: intents.KindApply, Priority: 4}
	for src, want := range map[string]bool{
		`state.report.status == "draft"`:                 true,
		`state.count.n == 3 && state.count.n > 2.5`:      true,
		`state.tasks.t9.owner == nil`:                    true, // missing at any depth reads as nil
		`state.tasks.t9.owner.name.first == nil`:         true,
		`state.tasks.t1.owner == agent`:                  true,
		`has("tasks.t1.owner") && !has("tasks.t2")`:      true,
		`version("report.status") == 7`:                  true,
		`intent.priority == 4 && intent.kind == "apply"`: true,
		`old.report.status == "new"`:                     true,
		`old.count.n == nil`:                             true,
	} {
		compiled, err := c.Compile("post[0]", src, true)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		got, err := ev.Eval(compiled, cur, old, in)
		if err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", src, got, err, want)
		}
	}
	// A non-boolean at run time, and a runtime failure, are errors.
	for src, notBool := range map[string]bool{`state.count.n`: true, `state.report.status > 3`: false} {
		compiled, err := c.Compile("pre[0]", src, false)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if _, err := ev.Eval(compiled, cur, nil, in); err == nil || errors.Is(err, cond.ErrNotBool) != notBool {
			t.Errorf("%s: err %v, want an error (not bool: %v)", src, err, notBool)
		}
	}
}

func TestCompilerCacheBounded(t *testing.T) {
	c := cond.NewCompiler(cond.Options{CacheSize: 8})
	for i := range 100 {
		if _, err := c.Compile("pre[0]", "state.a.b == "+strconv.Itoa(i), false); err != nil {
			t.Fatal(err)
		}
	}
	if c.Len() != 8 {
		t.Fatalf("cache holds %d, want 8", c.Len())
	}
	a, _ := c.Compile("pre[0]", "state.x.y == 1", false)
	b, _ := c.Compile("pre[1]", "state.x.y == 1", false)
	if a != b {
		t.Fatal("the same text compiled twice")
	}
}

// A condition over two paths, compiled once and cached, is what every
// intent's precondition costs on the hot path.
func BenchmarkConditionEval(b *testing.B) {
	c := cond.NewCompiler(cond.Options{})
	ev := c.NewEvaluator()
	compiled, err := c.Compile("pre[0]", `state.report.status == "draft" && state.tasks.t1.owner == nil`, false)
	if err != nil {
		b.Fatal(err)
	}
	cur := mapReader{"report.status": "draft"}
	in := &intents.Intent{ID: id, Agent: "w1", Kind: intents.KindApply}
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := ev.Eval(compiled, cur, nil, in); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
