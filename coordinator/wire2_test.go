package coordinator

import (
	"encoding/json"
	"testing"

	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// decision.get answers the recorded decision of an intent: the final one,
// the interim one of an intent still waiting, and not_found for an id
// never decided.
func TestDecisionGet(t *testing.T) {
	w := newProtoWire(t, Options{})
	id, body := protoIntent(fmtSet, "a", "doc.x", `1`)
	applied := w.submit(body, -1)
	g := w.grant("h", "doc.y")
	wid, waiter := protoIntent(fmtWaitSet, "b", "doc.y", `2`)
	w.publish("b", waiter)
	mustOutcome(t, w.next("b"), intents.OutcomeQueued, "")

	get := func(id string) *intents.Decision {
		t.Helper()
		var d intents.Decision
		w.api("decision.get", `{"intent":"`+id+`"}`, &d)
		return &d
	}
	if d := get(id); d.Intent != id || d.Outcome != intents.OutcomeApplied || d.Rev != applied.Rev {
		t.Fatalf("decision.get of an applied intent: %+v, submit said %+v", d, applied)
	}
	if d := get(wid); d.Intent != wid || d.Outcome != intents.OutcomeQueued {
		t.Fatalf("decision.get of a waiting intent: %+v", d)
	}
	if code := w.apiErr("decision.get", `{"intent":"`+ulid.Make().String()+`"}`, nil); code != codeNotFound {
		t.Fatalf("decision.get of an unknown intent: %s", code)
	}
	if code := w.apiErr("decision.get", `{"intent":"nope"}`, nil); code != string(intents.ReasonInvalid) {
		t.Fatalf("decision.get of a bad id: %s", code)
	}
	mustOutcome(t, w.send("h", fmtAbort, "h", g.Txn, g.Fence), intents.OutcomeAborted, "")
	mustOutcome(t, w.next("b"), intents.OutcomeApplied, "")
	if d := get(wid); d.Outcome != intents.OutcomeApplied {
		t.Fatalf("decision.get once the waiter is applied: %+v", d)
	}
}

// versions is on every decision that names paths (SPEC §3): applied and
// committed carry the versions after the change, granted those of the
// transaction's reads, a rejection the current ones, so an agent chains
// its next compare-and-set without a read.
func TestVersionsOnDecisions(t *testing.T) {
	w := newProtoWire(t, Options{})
	applied := w.send("a", fmtSet, "a", "cas.n", `1`)
	mustOutcome(t, applied, intents.OutcomeApplied, "")
	mustVersion(t, applied, "cas.n", 1)
	// The next compare-and-set, chained on the versions of the last.
	_, next := protoIntent(`{"id":%q,"agent":"a","kind":"apply","reads":[{"path":"cas.n","version":%d}],"writes":[{"path":"cas.n","op":"set","value":2}]}`, applied.Versions["cas.n"])
	w.publish("a", next)
	d := w.next("a")
	mustOutcome(t, d, intents.OutcomeApplied, "")
	mustVersion(t, d, "cas.n", 2)
	// A stale one is rejected with the version to retry with.
	_, stale := protoIntent(`{"id":%q,"agent":"a","kind":"apply","reads":[{"path":"cas.n","version":1}],"writes":[{"path":"cas.n","op":"set","value":3}]}`)
	w.publish("a", stale)
	d = w.next("a")
	mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonStaleRead)
	mustVersion(t, d, "cas.n", 2)
	// A failed precondition names the current versions too.
	_, pre := protoIntent(`{"id":%q,"agent":"a","kind":"apply","pre":["state.cas.n == 1"],"writes":[{"path":"cas.n","op":"set","value":3}]}`)
	w.publish("a", pre)
	d = w.next("a")
	mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonPreconditionFailed)
	mustVersion(t, d, "cas.n", 2)
	// granted: the versions of the transaction's reads; committed: after.
	_, propose := protoIntent(`{"id":%q,"agent":"a","kind":"propose","reads":[{"path":"cas.n"}],"writes":[{"path":"cas.m","op":"set"}]}`)
	w.publish("a", propose)
	g := w.next("a")
	mustOutcome(t, g, intents.OutcomeGranted, "")
	mustVersion(t, g, "cas.n", 2)
	c := w.send("a", fmtCommit, "a", g.Txn, g.Fence, "cas.m", `1`)
	mustOutcome(t, c, intents.OutcomeCommitted, "")
	mustVersion(t, c, "cas.m", 1)
	mustVersion(t, c, "cas.n", 2)
	raw, _ := json.Marshal(c)
	if c.Rev == 0 {
		t.Fatalf("committed without rev: %s", raw)
	}
}
