package rules

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/intents"
)

func TestPattern(t *testing.T) {
	cases := []struct {
		pattern, path            string
		matches, covers, overlap bool
	}{
		{"tasks.*.status", "tasks.t1.status", true, true, true},
		{"tasks.*.status", "tasks.t1.status.x", false, true, true},
		{"tasks.*.status", "tasks.t1", false, false, true},
		{"tasks.*.status", "tasks", false, false, true},
		{"tasks.*.status", "tasks.t1.owner", false, false, false},
		{"tasks.*.status", "other.t1.status", false, false, false},
		{"facts.**", "facts", true, true, true},
		{"facts.**", "facts.a.b.c", true, true, true},
		{"facts.**", "factsx", false, false, false},
		{"a.b", "a.bc", false, false, false},
	}
	for _, c := range cases {
		p, err := ParsePattern(c.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Matches(c.path); got != c.matches {
			t.Errorf("%s matches %s = %v", c.pattern, c.path, got)
		}
		if got := p.Covers(c.path); got != c.covers {
			t.Errorf("%s covers %s = %v", c.pattern, c.path, got)
		}
		if got := p.Overlaps(c.path); got != c.overlap {
			t.Errorf("%s overlaps %s = %v", c.pattern, c.path, got)
		}
	}
	for _, bad := range []string{"", "a..b", "a.**.b", "a.b c", "**x"} {
		if _, err := ParsePattern(bad); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
}

func compile(t *testing.T, src string) *Set {
	t.Helper()
	s, err := Compile([]byte(src), cond.NewCompiler(cond.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCompileErrorsNameTheField(t *testing.T) {
	cases := map[string]string{
		`{"rules":[{"pattern":"a..b"}]}`:                                               "rules[0].pattern",
		`{"rules":[{"pattern":"a","writers":["role:"]}]}`:                              "rules[0].writers[0]",
		`{"rules":[{"pattern":"a","transitions":{"A":["B"]},"initial":["C"]}]}`:        "rules[0].initial[0]",
		`{"rules":[{"pattern":"a","schema":{"type":"nope"}}]}`:                         "rules[0].schema",
		`{"rules":[{"pattern":"a","schema":{"$ref":"file:///etc/passwd"}}]}`:           "rules[0].schema",
		`{"rules":[{"pattern":"a","on_conflict":"later"}]}`:                            "rules[0].on_conflict",
		`{"invariants":[{"name":"x","expr":"state.a +"}]}`:                             "invariants[0].expr",
		`{"invariants":[{"name":"x","expr":"1 < 2"}]}`:                                 "invariants[0].expr",
		`{"invariants":[{"name":"x","expr":"state.a"},{"name":"x","expr":"state.b"}]}`: "invariants[1].name",
		`{"quotas":{"role:w":{"intents_per_second":5}}}`:                               "quotas.role:w.burst",
		`{"rule":[]}`: "(document)",
		`{"rules":[{"pattern":"f","kind":"rumour"}]}`:                         "rules[0].kind",
		`{"rules":[{"pattern":"f","kind":"fact","transitions":{"A":["B"]}}]}`: "rules[0].transitions",
		`{"rules":[{"pattern":"d","approve":{}}]}`:                            "rules[0].approve.by",
		`{"rules":[{"pattern":"d","approve":{"by":["role:"]}}]}`:              "rules[0].approve.by[0]",
		`{"rules":[{"pattern":"d","approve":{"by":["a"],"exempt":["x y"]}}]}`: "rules[0].approve.exempt[0]",
		`{"rules":[{"pattern":"d","approve":{"by":["a"],"quorum":101}}]}`:     "rules[0].approve.quorum",
		`{"rules":[{"pattern":"d","approve":{"by":["a"],"timeout":"0s"}}]}`:   "rules[0].approve.timeout",
		`{"rules":[{"pattern":"d","approve":{"by":["a"],"fallback":"x"}}]}`:   "rules[0].approve.fallback",
		`{"rules":[{"pattern":"d","review":{}}]}`:                             "rules[0].review.by",
		`{"rules":[{"pattern":"d","review":{"by":["a"],"on":["conflict"]}}]}`: "rules[0].review.on[0]",
		`{}}`:                   "(document)",
		`{"agents":{"a b":{}}}`: "agents",
	}
	for src, field := range cases {
		_, err := Compile([]byte(src), cond.NewCompiler(cond.Options{}))
		var e *Error
		if !errors.As(err, &e) || e.Field != field {
			t.Errorf("%s: err = %v, want field %s", src, err, field)
		}
	}
}

// The errors that bound a number give the value found.
func TestCompileErrorsGiveTheValue(t *testing.T) {
	expr := `state.a == "` + strings.Repeat("a", intents.MaxExprLen) + `"`
	long := `{"invariants":[{"name":"x","expr":` + strconv.Quote(expr) + `}]}`
	cases := map[string]string{
		long:                              fmt.Sprintf("rules field invariants[0].expr: %d bytes: longer than %d", len(expr), intents.MaxExprLen),
		`{"quotas":{"bob":{"burst":-1}}}`: "rules field quotas.bob.burst: -1: want 0 or more",
		`{"quotas":{"bob":{"intents_per_second":-0.5}}}`:  "rules field quotas.bob.intents_per_second: -0.5: want 0 or more",
		`{"quotas":{"role:w":{"burst":1,"max_txns":-2}}}`: "rules field quotas.role:w.max_txns: -2: want 0 or more",
	}
	for src, want := range cases {
		_, err := Compile([]byte(src), cond.NewCompiler(cond.Options{}))
		if err == nil || err.Error() != want {
			t.Errorf("%.60s: err = %v, want %s", src, err, want)
		}
	}
}

// reader is a state as a map from path to value.
type reader map[string]any

func (r reader) Get(p string) (any, bool) { v, ok := r[p]; return v, ok }
func (r reader) Version(string) uint64    { return 0 }
func (r reader) ModTime(string) time.Time { return time.Time{} }

const board = `{
  "agents": {"alice": {"roles": ["coder"]}, "bob": {"roles": ["reviewer"]}},
  "rules": [
    {"pattern": "tasks.*.status",
     "transitions": {"PENDING": ["CLAIMED", "CANCELLED"], "CLAIMED": ["RUNNING"], "RUNNING": ["DONE", "FAILED"]},
     "initial": ["PENDING"], "writers": ["role:coder", "lead"]},
    {"pattern": "tasks.*.spec", "schema": {"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}}}},
    {"pattern": "secrets.**", "readers": ["lead"], "writers": ["lead"]},
    {"pattern": "queue.**", "on_conflict": "wait"}
  ],
  "invariants": [{"name": "wip", "expr": "count(values(state.tasks), .status == \"RUNNING\") <= 2"}],
  "quotas": {"role:coder": {"intents_per_second": 10, "burst": 5, "max_txns": 2}, "bob": {"max_txns": 1}}
}`

// Gate gives the first rule's approval that covers a write, unless it
// exempts the agent; Members names who may approve.
func TestGate(t *testing.T) {
	s, err := Compile([]byte(`{"agents":{"lina":{"roles":["lead"]},"ops":{"roles":["ops"]}},"rules":[
		{"pattern":"deploy.prod.**","approve":{"by":["role:lead","sam"],"quorum":2,"exempt":["role:ops"],"fallback":"apply","timeout":"1h"}},
		{"pattern":"deploy.**","approve":{"by":["lina"]}}]}`), cond.NewCompiler(cond.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		agent  string
		writes []string
		rule   int
		path   string
	}{
		{"dev", []string{"notes.x"}, -1, ""},
		{"dev", []string{"notes.x", "deploy.prod.web"}, 0, "deploy.prod.web"},
		{"dev", []string{"deploy"}, 0, "deploy"}, // above a gated path
		{"ops", []string{"deploy.prod.web"}, 1, "deploy.prod.web"},
		{"dev", []string{"deploy.test"}, 1, "deploy.test"},
	} {
		g, ok := s.Gate(c.agent, c.writes)
		if !ok && c.rule >= 0 || ok && (g.Rule != c.rule || g.Path != c.path) {
			t.Errorf("Gate(%s, %v) = %+v, %v; want rule %d on %q", c.agent, c.writes, g, ok, c.rule, c.path)
		}
	}
	g, _ := s.Gate("dev", []string{"deploy.prod.web"})
	if g.Quorum != 2 || g.Fallback != intents.FallbackApply || g.Timeout != time.Hour {
		t.Errorf("gate of rules[0]: %+v", g)
	}
	if g, _ := s.Gate("dev", []string{"deploy.x"}); g.Quorum != 1 || g.Fallback != intents.FallbackReject || g.Timeout != DefaultApproveTimeout {
		t.Errorf("gate of rules[1], with the defaults: %+v", g)
	}
	if got := s.Members([]string{"role:lead", "sam"}); !slices.Equal(got, []string{"lina", "sam"}) {
		t.Errorf("Members = %v, want lina and sam", got)
	}
}

func TestAuthorize(t *testing.T) {
	s := compile(t, board)
	cases := []struct {
		agent         string
		reads, writes []string
		ok            bool
		detail        string
	}{
		{"alice", nil, []string{"tasks.t1.status"}, true, ""},
		{"lead", nil, []string{"tasks.t1.status"}, true, ""},
		{"bob", nil, []string{"tasks.t1.status"}, false, "agent bob may not write tasks.t1.status: rules[0] (tasks.*.status) lets only role:coder, lead write there"},
		{"bob", nil, []string{"tasks"}, false, "may not write tasks:"}, // replacing the whole board
		{"bob", nil, []string{"tasks.t1.owner"}, true, ""},
		{"alice", []string{"secrets.k"}, nil, false, "may not read secrets.k"},
		{"lead", []string{"secrets"}, []string{"secrets.k"}, true, ""},
	}
	for _, c := range cases {
		detail, ok := s.Authorize(c.agent, c.reads, c.writes)
		if ok != c.ok || !strings.Contains(detail, c.detail) {
			t.Errorf("%s reads %v writes %v: %v %q, want %v %q", c.agent, c.reads, c.writes, ok, detail, c.ok, c.detail)
		}
	}
}

func TestCheckChange(t *testing.T) {
	s := compile(t, board)
	cases := []struct {
		name          string
		writes        []string
		before, after reader
		reason        intents.Reason
		detail        string
	}{
		{"legal", []string{"tasks.t1.status"}, reader{"tasks.t1.status": "PENDING"}, reader{"tasks.t1.status": "CLAIMED"}, "", ""},
		{"illegal", []string{"tasks.t1.status"}, reader{"tasks.t1.status": "RUNNING"}, reader{"tasks.t1.status": "PENDING"},
			intents.ReasonIllegalTransition, `tasks.t1.status: "RUNNING" → PENDING is not a legal transition of rules[0] (tasks.*.status); from "RUNNING": DONE, FAILED`},
		{"final", []string{"tasks.t1.status"}, reader{"tasks.t1.status": "DONE"}, reader{"tasks.t1.status": "RUNNING"},
			intents.ReasonIllegalTransition, "none: it is a final state"},
		{"initial", []string{"tasks.t1.status"}, reader{}, reader{"tasks.t1.status": "RUNNING"},
			intents.ReasonIllegalTransition, "a new value must start in PENDING, not RUNNING"},
		{"not a state", []string{"tasks.t1.status"}, reader{}, reader{"tasks.t1.status": 3.0},
			intents.ReasonIllegalTransition, "tasks.t1.status = 3 is not a state"},
		{"unchanged", []string{"tasks.t1.status"}, reader{"tasks.t1.status": "DONE"}, reader{"tasks.t1.status": "DONE"}, "", ""},
		{"deleted", []string{"tasks.t1"}, reader{"tasks.t1": map[string]any{"status": "RUNNING"}, "tasks.t1.status": "RUNNING"}, reader{}, "", ""},
		{"whole record", []string{"tasks.t1"},
			reader{"tasks.t1": map[string]any{"status": "RUNNING"}, "tasks.t1.status": "RUNNING"},
			reader{"tasks.t1": map[string]any{"status": "CLAIMED"}, "tasks.t1.status": "CLAIMED"},
			intents.ReasonIllegalTransition, "RUNNING\" → CLAIMED"},
		{"whole board", []string{"tasks"},
			reader{"tasks": map[string]any{}},
			reader{"tasks": map[string]any{"t9": map[string]any{"status": "DONE"}}, "tasks.t9.status": "DONE"},
			intents.ReasonIllegalTransition, "tasks.t9.status: a new value must start in PENDING"},
		{"schema ok", []string{"tasks.t1.spec.title"}, reader{}, reader{"tasks.t1.spec": map[string]any{"title": "x"}}, "", ""},
		{"schema", []string{"tasks.t1.spec"}, reader{}, reader{"tasks.t1.spec": map[string]any{"title": 1.0}},
			intents.ReasonInvalid, `tasks.t1.spec = {"title":1} does not satisfy the schema of rules[1] (tasks.*.spec)`},
	}
	for _, c := range cases {
		v := s.CheckChange("alice", c.writes, c.before, c.after, false, "")
		switch {
		case c.reason == "" && v != nil:
			t.Errorf("%s: refused: %+v", c.name, v)
		case c.reason != "" && (v == nil || v.Reason != c.reason || !strings.Contains(v.Detail, c.detail)):
			t.Errorf("%s: %+v, want %s %q", c.name, v, c.reason, c.detail)
		}
	}
}

// A contradiction goes to the arbiter only when nothing else refuses the
// fact: a value a schema rejects is invalid, settled or not, whether the
// schema is the fact rule's own or another rule's.
func TestCheckChangeContradiction(t *testing.T) {
	fact := func(claim any, evidence ...any) map[string]any {
		return map[string]any{"claim": claim, "evidence": evidence}
	}
	before := reader{"facts.c": fact("Paris", "atlas")}
	for _, src := range []string{
		`{"rules":[{"pattern":"facts.*","kind":"fact","schema":{"properties":{"claim":{"type":"string"}}}}]}`,
		`{"rules":[{"pattern":"facts.*","kind":"fact"},{"pattern":"facts.**","schema":{"properties":{"claim":{"type":"string"}}}}]}`,
	} {
		s := compile(t, src)
		for _, settled := range []bool{false, true} {
			v := s.CheckChange("r2", []string{"facts.c"}, before, reader{"facts.c": fact("Lyon", "blog")}, settled, "")
			if settled && v != nil || !settled && (v == nil || !v.Contradiction || v.Path != "facts.c") {
				t.Errorf("%s: a valid contradicting fact, settled %v: %+v", src, settled, v)
			}
			v = s.CheckChange("r2", []string{"facts.c"}, before, reader{"facts.c": fact(42.0, "blog")}, settled, "")
			if v == nil || v.Contradiction || v.Reason != intents.ReasonInvalid || !strings.Contains(v.Detail, "does not satisfy the schema") {
				t.Errorf("%s: a contradicting fact the schema refuses, settled %v: %+v", src, settled, v)
			}
		}
	}
}

func TestPolicyInvariantsQuotas(t *testing.T) {
	s := compile(t, board)
	if p := s.OnConflict([]string{"queue.q1.items"}); p != intents.OnConflictWait {
		t.Errorf("policy under queue: %q", p)
	}
	if p := s.OnConflict([]string{"tasks.t1"}); p != "" {
		t.Errorf("policy under tasks: %q", p)
	}
	if invs := s.Invariants([]string{"tasks.t3.status"}); len(invs) != 1 || invs[0].Name != "wip" || invs[0].Cond.Paths[0] != "tasks" {
		t.Errorf("invariants for a task write: %v", invs)
	}
	if invs := s.Invariants([]string{"report.x"}); len(invs) != 0 {
		t.Errorf("invariants for an unrelated write: %v", invs)
	}
	if q, ok := s.QuotaOf("alice"); !ok || q.MaxTxns != 2 || q.Burst != 5 {
		t.Errorf("alice's quota (by role) %+v %v", q, ok)
	}
	if q, ok := s.QuotaOf("bob"); !ok || q.MaxTxns != 1 {
		t.Errorf("bob's own quota %+v %v", q, ok)
	}
	if _, ok := s.QuotaOf("carol"); ok {
		t.Error("carol has no quota")
	}
	var none *Set
	if _, ok := none.Authorize("x", nil, []string{"a"}); !ok || none.CheckChange("x", []string{"a"}, reader{}, reader{}, false, "") != nil || !none.Empty() {
		t.Error("the nil set must allow everything")
	}
}

// TestPatternAgainstSplit checks the allocation-free matching against a
// plain segment-by-segment reading, on every pattern and path over a small
// alphabet.
func TestPatternAgainstSplit(t *testing.T) {
	segs := []string{"a", "b", "*"}
	var patterns, paths []string
	var grow func(prefix string, depth int, wild bool)
	grow = func(prefix string, depth int, wild bool) {
		if depth == 0 {
			return
		}
		for _, s := range segs {
			if s == "*" && !wild {
				continue
			}
			p := s
			if prefix != "" {
				p = prefix + "." + s
			}
			if wild {
				patterns = append(patterns, p, p+".**")
			} else {
				paths = append(paths, p)
			}
			grow(p, depth-1, wild)
		}
	}
	grow("", 4, true)
	grow("", 5, false)
	for _, src := range patterns {
		p, err := ParsePattern(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range paths {
			ps := strings.Split(path, ".")
			agree := true
			for i := range min(len(ps), len(p.segs)) {
				agree = agree && (p.segs[i] == "*" || p.segs[i] == ps[i])
			}
			matches := agree && (len(ps) == len(p.segs) || len(ps) > len(p.segs) && p.deep)
			covers := agree && len(ps) >= len(p.segs)
			if p.Matches(path) != matches || p.Covers(path) != covers || p.Overlaps(path) != agree {
				t.Fatalf("%s vs %s: matches %v covers %v overlaps %v, want %v %v %v",
					src, path, p.Matches(path), p.Covers(path), p.Overlaps(path), matches, covers, agree)
			}
		}
	}
}
