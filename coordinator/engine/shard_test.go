package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
)

// shardWorld is two engines, the default shard and s2, each with its own
// log, as two coordinator groups have.
type shardWorld struct {
	t      *testing.T
	logs   map[*Engine][]*intents.Event
	def    *Engine
	s2     *Engine
	n      int
	at     time.Duration
	ids    *counterIDs
	ids2   *counterIDs
	config func(*counterIDs) Config
}

func newShardWorld(t *testing.T) *shardWorld {
	w := &shardWorld{t: t, logs: map[*Engine][]*intents.Event{}, ids: &counterIDs{}, ids2: &counterIDs{}}
	var err error
	if w.def, err = New(snapConfig(0, w.ids)); err != nil {
		t.Fatal(err)
	}
	if w.s2, err = New(snapConfig(0, w.ids2)); err != nil {
		t.Fatal(err)
	}
	r, err := w.s2.Join(w.now(), "s2", nil)
	if err != nil {
		t.Fatal(err)
	}
	w.keep(w.s2, r.Events)
	return w
}

func (w *shardWorld) now() time.Time { w.at += time.Millisecond; return base.Add(w.at) }

func (w *shardWorld) keep(e *Engine, evs []*intents.Event) { w.logs[e] = append(w.logs[e], evs...) }

// apply sends an apply of writes (path=value) to e and returns its decision.
func (w *shardWorld) apply(e *Engine, pre string, writes ...string) *intents.Decision {
	w.t.Helper()
	w.n++
	return w.applyAs(e, w.n, pre, writes...)
}

// applyAs is apply with the intent id of n.
func (w *shardWorld) applyAs(e *Engine, n int, pre string, writes ...string) *intents.Decision {
	w.t.Helper()
	var ws []string
	for _, kv := range writes {
		p, v, _ := strings.Cut(kv, "=")
		ws = append(ws, fmt.Sprintf(`{"path":%q,"op":"set","value":%s}`, p, v))
	}
	var conds string
	if pre != "" {
		conds = fmt.Sprintf(`,"pre":[%q]`, pre)
	}
	raw := fmt.Sprintf(`{"id":"%s","agent":"a","kind":"apply","writes":[%s]%s}`, fuzzID(n), strings.Join(ws, ","), conds)
	r := e.Submit(w.now(), Input{Agent: "a", Raw: []byte(raw)}, nil)
	w.keep(e, r.Events)
	if r.Own == nil {
		w.t.Fatalf("no decision for %s", raw)
	}
	return r.Own
}

// move moves board from one engine to the other, as coagent shards move
// does: release, then adopt with what the release carried.
func (w *shardWorld) move(from, to *Engine, board string) {
	w.t.Helper()
	r, seq, h, err := from.Release(w.now(), board, to.Shard(), nil)
	if err != nil {
		w.t.Fatal(err)
	}
	w.keep(from, r.Events)
	r2, err := to.Adopt(w.now(), board, from.Shard(), seq, h.Nodes, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	w.keep(to, r2.Events)
}

// replays checks that each engine's log folds back to its state, and that
// its snapshot restores it.
func (w *shardWorld) replays() {
	w.t.Helper()
	for _, e := range []*Engine{w.def, w.s2} {
		f, err := New(snapConfig(0, &counterIDs{}))
		if err != nil {
			w.t.Fatal(err)
		}
		if _, err := f.ApplyAll(w.logs[e]); err != nil {
			w.t.Fatalf("shard %s: replay: %v", e.Shard(), err)
		}
		sameEngine(w.t, "replayed shard "+e.Shard(), e, f)
		snap, _ := encode(w.t, e.Snapshot())
		r, err := Restore(snapConfig(0, &counterIDs{}), snap)
		if err != nil {
			w.t.Fatalf("shard %s: restore: %v", e.Shard(), err)
		}
		sameEngine(w.t, "restored shard "+e.Shard(), e, r)
	}
}

func want(t *testing.T, d *intents.Decision, outcome intents.Outcome, reason intents.Reason, detail string) {
	t.Helper()
	if d.Outcome != outcome || d.Reason != reason || !strings.Contains(d.Detail, detail) {
		t.Fatalf("decided %s %s %q, want %s %s with %q", d.Outcome, d.Reason, d.Detail, outcome, reason, detail)
	}
}

// TestShardMove moves a board from the default shard to s2 and back: the
// owner refuses the board's intents from its release on, the new owner
// decides them against the state and versions the release carried, an
// intent of two shards' boards is refused by both, and each log replays.
func TestShardMove(t *testing.T) {
	w := newShardWorld(t)
	want(t, w.apply(w.def, "", "report.s1=1"), intents.OutcomeApplied, "", "")
	want(t, w.apply(w.def, "", "report.s1=2", "tasks.t1=\"open\""), intents.OutcomeApplied, "", "")
	// s2 owns nothing yet: it refuses, and the refusal does not take the
	// id, which is decided afresh once the board is there.
	early := 1000
	want(t, w.applyAs(w.s2, early, "", "report.early=3"), intents.OutcomeRejected, intents.ReasonOutOfScope, "report (shard default)")
	v := w.def.tree.Version("report.s1")

	w.move(w.def, w.s2, "report")
	want(t, w.applyAs(w.s2, early, "", "report.early=3"), intents.OutcomeApplied, "", "")
	if got := w.s2.tree.Version("report.s1"); got != v {
		t.Fatalf("report.s1 is at version %d on s2, was %d on the default shard", got, v)
	}
	want(t, w.apply(w.def, "", "report.s1=4"), intents.OutcomeRejected, intents.ReasonOutOfScope, "report (shard s2)")
	if d := w.apply(w.def, "", "report.s1=4"); d.Retryable {
		t.Fatalf("out_of_scope is retryable: %+v", d)
	}
	// A compare-and-set against the version read before the move holds.
	want(t, w.apply(w.s2, fmt.Sprintf("version(\"report.s1\") == %d && state.report.s1 == 2", v), "report.s1=5"),
		intents.OutcomeApplied, "", "")
	// Boards of two shards in one condition: no shard can check it alone.
	want(t, w.apply(w.def, `state.tasks.t1 == "open" && state.report.s1 == 5`, "report.s2=1"), intents.OutcomeRejected, intents.ReasonOutOfScope,
		"pre[0] reads report (shard s2) and tasks (shard default); a condition of a cross-shard apply may read one shard's boards")
	want(t, w.apply(w.s2, `state.tasks.t1 == "open" && state.report.s1 == 5`, "report.s2=1"), intents.OutcomeRejected, intents.ReasonOutOfScope,
		"tasks (shard default)")
	if _, ok := w.def.tree.Get("report.s1"); ok {
		t.Fatal("the default shard still has report.s1")
	}

	// A board not owned is not released, nor adopted twice.
	if _, _, _, err := w.s2.Release(w.now(), "tasks", "default", nil); !errors.Is(err, ErrHandoff) {
		t.Fatalf("s2 released tasks, which it does not own: %v", err)
	}
	if _, err := w.s2.Adopt(w.now(), "report", "default", 1, nil, nil); !errors.Is(err, ErrHandoff) {
		t.Fatalf("s2 adopted report twice: %v", err)
	}
	// Asked again, a release names the event that made it.
	var first uint64
	for _, ev := range w.logs[w.def] {
		if ev.Handoff != nil && ev.Handoff.Kind == intents.HandoffRelease {
			first = ev.Seq
		}
	}
	n := len(w.logs[w.def])
	if _, s, h, err := w.def.Release(w.now(), "report", "s2", nil); err != nil || h != nil || s != first || first == 0 {
		t.Fatalf("release asked again: event %d, %v %v; the release was event %d", s, h, err, first)
	} else if r := w.def.seq; int(r) != n {
		t.Fatalf("release asked again recorded an event")
	}

	// Back to the default shard: versions go on from where s2 left them.
	v = w.s2.tree.Version("report.s1")
	w.move(w.s2, w.def, "report")
	if got := w.def.tree.Version("report.s1"); got < v {
		t.Fatalf("report.s1 came back at version %d, below %d", got, v)
	}
	if got, _ := w.def.tree.Get("report.s1"); got != 5.0 {
		t.Fatalf("report.s1 = %v back on the default shard, want 5", got)
	}
	want(t, w.apply(w.def, "", "report.s1=6", "tasks.t1=\"done\""), intents.OutcomeApplied, "", "")
	want(t, w.apply(w.s2, "", "report.s1=7"), intents.OutcomeRejected, intents.ReasonOutOfScope, "report (shard default)")
	w.replays()
}

// TestShardReleaseRefusedWhileHeld: a transaction in flight on the board
// keeps it where it is.
func TestShardReleaseRefusedWhileHeld(t *testing.T) {
	w := newShardWorld(t)
	raw := fmt.Sprintf(`{"id":"%s","agent":"a","kind":"propose","writes":[{"path":"report.s1","op":"set","value":1}]}`, fuzzID(99))
	r := w.def.Submit(w.now(), Input{Agent: "a", Raw: []byte(raw)}, nil)
	w.keep(w.def, r.Events)
	if r.Own == nil || r.Own.Outcome != intents.OutcomeGranted {
		t.Fatalf("propose: %+v", r.Own)
	}
	if _, _, _, err := w.def.Release(w.now(), "report", "s2", nil); !errors.Is(err, ErrHandoff) || !strings.Contains(err.Error(), "holds report.s1") {
		t.Fatalf("released a board a transaction holds: %v", err)
	}
	// Another board moves meanwhile.
	want(t, w.apply(w.def, "", "tasks.t1=1"), intents.OutcomeApplied, "", "")
	w.move(w.def, w.s2, "tasks")
	w.replays()
}

// TestShardJoin: a log joins once, and only while empty.
func TestShardJoin(t *testing.T) {
	w := newShardWorld(t)
	if _, err := w.s2.Join(w.now(), "s3", nil); !errors.Is(err, ErrHandoff) {
		t.Fatalf("s2 joined s3: %v", err)
	}
	if r, err := w.s2.Join(w.now(), "s2", nil); err != nil || len(r.Events) != 0 {
		t.Fatalf("joining its own shard again: %v, %d events", err, len(r.Events))
	}
	for _, bad := range []string{"api", "S1", "", "a.b"} {
		e, _ := New(snapConfig(0, &counterIDs{}))
		if _, err := e.Join(w.now(), bad, nil); err == nil && bad != "" {
			t.Errorf("joined shard %q", bad)
		}
	}
}

// TestShardInvariantSpanningShards: an invariant over boards of two
// shards is refused when set, and keeps its boards together once set.
func TestShardInvariantSpanningShards(t *testing.T) {
	w := newShardWorld(t)
	both := []byte(`{"invariants":[{"name":"budget","expr":"(state.report.n ?? 0) + (state.tasks.n ?? 0) < 10"}]}`)
	r, err := w.def.SetRules(w.now(), both, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	w.keep(w.def, r.Events)
	if _, _, _, err := w.def.Release(w.now(), "report", "s2", nil); !errors.Is(err, ErrHandoff) || !strings.Contains(err.Error(), "invariant budget reads boards") {
		t.Fatalf("released a board an invariant reads with another: %v", err)
	}
	if r, err = w.def.SetRules(w.now(), nil, "test", nil); err != nil {
		t.Fatal(err)
	}
	w.keep(w.def, r.Events)
	w.move(w.def, w.s2, "report")
	if _, err := w.def.SetRules(w.now(), both, "test", nil); err == nil || !strings.Contains(err.Error(), "report (shard s2)") {
		t.Fatalf("an invariant over two shards' boards was put in force: %v", err)
	}
	w.replays()
}

// TestShardReleaseAfterTimers: a claim whose lease has ended by the time
// of the release is reclaimed first, in the same call, and the board
// leaves with the task given back; before then the claim keeps it.
func TestShardReleaseAfterTimers(t *testing.T) {
	w := newShardWorld(t)
	r, err := w.def.SetRules(w.now(), []byte(`{"rules":[{"pattern":"tasks.*","kind":"task","lease":"1s"}]}`), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	w.keep(w.def, r.Events)
	want(t, w.apply(w.def, "", `tasks.t1={"status":"open"}`), intents.OutcomeApplied, "", "")
	want(t, w.apply(w.def, "state.tasks.t1.owner == nil", `tasks.t1.owner="a"`), intents.OutcomeApplied, "", "")
	if _, _, _, err := w.def.Release(w.now(), "tasks", "s2", nil); !errors.Is(err, ErrHandoff) || !strings.Contains(err.Error(), "claimed by a") {
		t.Fatalf("released a board with a claim under its lease: %v", err)
	}
	w.at += 2 * time.Second
	rr, _, h, err := w.def.Release(w.now(), "tasks", "s2", nil)
	if err != nil {
		t.Fatalf("release once the lease ended: %v", err)
	}
	w.keep(w.def, rr.Events)
	if n := len(rr.Events); n < 2 || rr.Events[n-1].Type != intents.EventBoard || rr.Events[0].Type == intents.EventBoard {
		t.Fatalf("the release's events: %s", eventsJSON(rr.Events))
	}
	if strings.Contains(string(h.Nodes), `"path":"tasks.t1.owner","kind":"leaf"`) {
		t.Fatalf("the board left with the ended claim's owner: %s", h.Nodes)
	}
	r2, err := w.s2.Adopt(w.now(), "tasks", "default", rr.Events[len(rr.Events)-1].Seq, h.Nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.keep(w.s2, r2.Events)
	w.replays()
}
