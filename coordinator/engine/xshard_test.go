package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/coagent/coagent/intents"
)

// xworld is a shardWorld where s2 owns the board report and the default
// shard the rest.
func xworld(t *testing.T) *shardWorld {
	w := newShardWorld(t)
	want(t, w.apply(w.def, "", "report.done=0", "tasks.t1=\"open\""), intents.OutcomeApplied, "", "")
	w.move(w.def, w.s2, "report")
	return w
}

// begin submits a cross-shard apply to the default shard, which must
// queue it, and returns its id and the prepare request of s2's part.
func (w *shardWorld) begin(pre string, writes ...string) (string, *intents.XShard) {
	w.t.Helper()
	w.n++
	id := fuzzID(w.n)
	d := w.applyAs(w.def, w.n, pre, writes...)
	want(w.t, d, intents.OutcomeQueued, "", "a cross-shard apply: prepared on shard default, waiting for shard s2")
	last := w.logs[w.def][len(w.logs[w.def])-2]
	if last.Type != intents.EventXShard || last.XShard.Phase != intents.XShardBegin {
		w.t.Fatalf("no begin event before the queued decision: %+v", last)
	}
	part := last.XShard.Part("s2")
	if part == nil || len(last.XShard.Parts) != 2 {
		w.t.Fatalf("begin parts: %+v", last.XShard.Parts)
	}
	return id, &intents.XShard{Phase: intents.XShardPrepare, Intent: id, Coord: "default",
		Parts: []intents.XPart{{Shard: "s2", Intent: part}}}
}

// prepare sends x to s2 and returns its vote.
func (w *shardWorld) prepare(x *intents.XShard) intents.XVote {
	w.t.Helper()
	r, v, err := w.s2.XPrepare(w.now(), x, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	w.keep(w.s2, r.Events)
	return v
}

// decide hands the votes to the default shard and returns its decision.
func (w *shardWorld) decide(id string, votes ...intents.XVote) *intents.Decision {
	w.t.Helper()
	r, err := w.def.XDecide(w.now(), id, votes, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	w.keep(w.def, r.Events)
	for _, ev := range r.Events {
		if ev.Decision != nil && ev.Decision.Intent == id {
			return ev.Decision
		}
		if ev.XShard != nil && ev.XShard.Decision != nil {
			return ev.XShard.Decision // the commit point's, answered by XDone
		}
	}
	w.t.Fatalf("no decision of %s among %d events", id, len(r.Events))
	return nil
}

// finish ends s2's part as the coordinator decided.
func (w *shardWorld) finish(id string, commit bool) {
	w.t.Helper()
	r, err := w.s2.XFinish(w.now(), id, commit, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	w.keep(w.s2, r.Events)
}

func (w *shardWorld) value(e *Engine, path string) string {
	v, ok := e.tree.Get(path)
	if !ok {
		return "<absent>"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestXShardCommit commits an apply over two shards' boards: each part
// holds its paths from its prepare until the coordinator's decision,
// which applies the coordinator's part, and the participant's finish
// applies its own; a prepare sent again after that is refused, and each
// log replays, in doubt and after.
func TestXShardCommit(t *testing.T) {
	w := xworld(t)
	id, x := w.begin(`state.report.done == 0`, `tasks.t1="done"`, "report.done=1")
	if got := x.Parts[0].Intent; len(got.Writes) != 1 || got.Writes[0].Path != "report.done" || len(got.Pre) != 1 {
		t.Fatalf("s2's part: %+v", got)
	}
	// The coordinator's part holds tasks.t1 already.
	want(t, w.apply(w.def, "", `tasks.t1="other"`), intents.OutcomeRejected, intents.ReasonConflict, "")
	vote := w.prepare(x)
	if !vote.Prepared || vote.Versions["report.done"] != 2 {
		t.Fatalf("s2's vote: %+v", vote)
	}
	if v := w.prepare(x); !v.Prepared || v.Versions["report.done"] != 2 {
		t.Fatalf("s2's vote asked again: %+v", v)
	}
	// s2's part holds report.done, with no lease: nothing ends it but the
	// coordinator's decision, and the board cannot leave.
	d := w.apply(w.s2, "", "report.done=9")
	want(t, d, intents.OutcomeRejected, intents.ReasonConflict, "")
	for _, c := range d.Conflicts {
		if c.WithTxn != id {
			t.Fatalf("conflicts %+v, want them with %s", d.Conflicts, id)
		}
	}
	if got := w.s2.InDoubt(); len(got) != 1 || got[0].Intent != id || got[0].Coord != "default" {
		t.Fatalf("in doubt: %+v", got)
	}
	if got := w.def.Coordinating(); len(got) != 1 || got[0].Intent != id {
		t.Fatalf("coordinating: %+v", got)
	}
	w.replays()

	d = w.decide(id, vote)
	want(t, d, intents.OutcomeApplied, "", "")
	if d.Versions["report.done"] != 2 || d.Versions["tasks.t1"] != 2 {
		t.Fatalf("the decision's versions: %v", d.Versions)
	}
	if got := w.value(w.def, "tasks.t1"); got != `"done"` {
		t.Fatalf("tasks.t1 = %s after the commit point", got)
	}
	if got := w.value(w.s2, "report.done"); got != "0" {
		t.Fatalf("report.done = %s before s2 was told", got)
	}
	// Committed, and not answered until s2 has applied its part.
	if d, _ := w.def.Decision(id); d == nil || d.Outcome != intents.OutcomeQueued {
		t.Fatalf("the intent's recorded decision before every part is applied: %+v", d)
	}
	if d, ok := w.def.XOutcome(id); !ok || d == nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("the coordinator's outcome at its commit point: %+v %v", d, ok)
	}
	// Until s2 is told, its part holds report.done: a read of it waits,
	// and a compare-and-set at the version the commit point named is in
	// conflict with the part, not stale.
	if !w.s2.XHolds([]string{"report.done"}) || !w.s2.XHolds([]string{"report"}) || w.s2.XHolds([]string{"report.other"}) {
		t.Fatal("XHolds does not say what s2's part holds")
	}
	if w.def.XHolds([]string{"tasks.t1"}) {
		t.Fatal("the coordinator's own part is held for reads")
	}
	cas := w.applyRead(w.s2, "report.done", d.Versions["report.done"], "report.done=7")
	want(t, cas, intents.OutcomeRejected, intents.ReasonConflict, "")
	w.replays()
	if _, _, _, err := w.s2.Release(w.now(), "report", "default", nil); !errors.Is(err, ErrHandoff) {
		t.Fatalf("report released while a part holds it: %v", err)
	}
	w.finish(id, true)
	if got := w.value(w.s2, "report.done"); got != "1" {
		t.Fatalf("report.done = %s after the commit", got)
	}
	r := w.def.XDone(w.now(), id, nil)
	w.keep(w.def, r.Events)
	if d, _ := w.def.Decision(id); d == nil || d.Outcome != intents.OutcomeApplied || d.Versions["tasks.t1"] != 2 {
		t.Fatalf("the intent's decision once every part is applied: %+v", d)
	}
	w.finish(id, true) // told twice: nothing more
	if got := w.s2.tree.Version("report.done"); got != 2 {
		t.Fatalf("report.done at version %d, want 2: applied twice?", got)
	}
	if v := w.prepare(x); v.Prepared || v.Decision.Reason != intents.ReasonConflict {
		t.Fatalf("a prepare after the commit: %+v", v)
	}
	if len(w.s2.InDoubt())+len(w.def.Coordinating()) != 0 {
		t.Fatal("something still in doubt")
	}
	want(t, w.applyRead(w.s2, "report.done", 2, "report.done=7"), intents.OutcomeApplied, "", "")
	want(t, w.apply(w.def, "", `tasks.t1="other"`), intents.OutcomeApplied, "", "")
	w.replays()
}

// applyRead sends an apply of writes to e that reads path at version.
func (w *shardWorld) applyRead(e *Engine, path string, version uint64, writes ...string) *intents.Decision {
	w.t.Helper()
	w.n++
	var ws []string
	for _, kv := range writes {
		p, v, _ := strings.Cut(kv, "=")
		ws = append(ws, fmt.Sprintf(`{"path":%q,"op":"set","value":%s}`, p, v))
	}
	raw := fmt.Sprintf(`{"id":"%s","agent":"a","kind":"apply","reads":[{"path":%q,"version":%d}],"writes":[%s]}`,
		fuzzID(w.n), path, version, strings.Join(ws, ","))
	r := e.Submit(w.now(), Input{Agent: "a", Raw: []byte(raw)}, nil)
	w.keep(e, r.Events)
	return r.Own
}

// TestXShardRefused: a participant that refuses its part refuses the
// whole intent, with its reason, and the coordinator's part is dropped;
// a shard that did not answer counts as a refusal.
func TestXShardRefused(t *testing.T) {
	w := xworld(t)
	id, x := w.begin(`state.report.done == 7`, `tasks.t1="done"`, "report.done=1")
	v := w.prepare(x)
	if v.Prepared {
		t.Fatal("s2 prepared a part whose precondition is false")
	}
	d := w.decide(id, v)
	want(t, d, intents.OutcomeRejected, intents.ReasonPreconditionFailed, "shard s2 refused its part: pre[0]")
	if got := w.value(w.def, "tasks.t1"); got != `"open"` {
		t.Fatalf("tasks.t1 = %s after a refusal", got)
	}
	want(t, w.apply(w.def, "", `tasks.t1="other"`), intents.OutcomeApplied, "", "")

	id, x = w.begin("", `tasks.t1="done"`, "report.done=1")
	want(t, w.decide(id), intents.OutcomeRejected, intents.ReasonConflict, "shard s2 did not answer")
	// The prepare that arrives late holds its paths until s2 asks and is
	// told: its abort frees them.
	if v := w.prepare(x); !v.Prepared {
		t.Fatalf("late prepare: %+v", v.Decision)
	}
	w.finish(id, false)
	if got := w.value(w.s2, "report.done"); got != "0" {
		t.Fatalf("report.done = %s after an abort", got)
	}
	want(t, w.apply(w.s2, "", "report.done=2"), intents.OutcomeApplied, "", "")
	w.replays()
}

// TestXShardRefusedBeforeBegin: what the coordinator's own part, the
// intent's kind or its conditions refuse is refused at once, with
// nothing begun.
func TestXShardRefusedBeforeBegin(t *testing.T) {
	w := xworld(t)
	want(t, w.apply(w.def, `state.tasks.t1 == "closed"`, `tasks.t1="done"`, "report.done=1"),
		intents.OutcomeRejected, intents.ReasonPreconditionFailed, "pre[0]")
	w.n++
	raw := fmt.Sprintf(`{"id":"%s","agent":"a","kind":"propose","writes":[{"path":"tasks.t1","op":"set"},{"path":"report.done","op":"set"}]}`, fuzzID(w.n))
	r := w.def.Submit(w.now(), Input{Agent: "a", Raw: []byte(raw)}, nil)
	w.keep(w.def, r.Events)
	want(t, r.Own, intents.OutcomeRejected, intents.ReasonOutOfScope, "a transaction may touch one shard's boards")
	if len(w.def.Coordinating()) != 0 {
		t.Fatal("a refused intent was begun")
	}
	// Sent to a shard that owns none of its boards: sent there.
	d := w.apply(w.s2, "", `tasks.t1="done"`, "other.x=1")
	want(t, d, intents.OutcomeRejected, intents.ReasonOutOfScope, "")
	if !intents.Misrouted(d) {
		t.Fatalf("%q is not sent on", d.Detail)
	}
	w.replays()
}
