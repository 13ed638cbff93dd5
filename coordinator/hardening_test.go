package coordinator

import (
	"fmt"
	"testing"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// An API submit is answered with its own decision, even when deciding it
// frees waiters whose decisions come in the same events: a commit that
// frees a waiter gets committed, not the waiter's applied.
func TestSubmitAnswersItsOwnDecision(t *testing.T) {
	w := newProtoWire(t, Options{})
	g := w.grant("a", "doc.x")
	_, waiter := protoIntent(fmtWaitSet, "b", "doc.x", `2`)
	w.publish("b", waiter)
	mustOutcome(t, w.next("b"), intents.OutcomeQueued, "")
	id, commit := protoIntent(fmtCommit, "a", g.Txn, g.Fence, "doc.x", `1`)
	d := w.submit(commit, -1)
	if d.Intent != id {
		t.Fatalf("the commit's submit was answered with the decision of %s: %+v", d.Intent, d)
	}
	mustOutcome(t, d, intents.OutcomeCommitted, "")
	mustOutcome(t, w.next("b"), intents.OutcomeApplied, "")
}

// API submits do not wait on each other: one that waits for its final
// decision (parked behind a transaction) does not hold up the next, which
// micro's handler used to take only once the first had its answer. Past
// MaxSubmits waiting submits, one more is answered unavailable at once.
func TestSubmitsDoNotQueueBehindEachOther(t *testing.T) {
	w := newProtoWire(t, Options{MaxSubmits: 2})
	g := w.grant("a", "doc.x")
	waiting := make(chan *intents.Decision, 2)
	errs := make(chan error, 2)
	for i := range 2 {
		_, body := protoIntent(fmtWaitSet, "b", "doc.x", fmt.Sprint(i))
		go func() {
			d, err := w.trySubmit(body, 60000) // waits for the final decision
			if err != nil {
				errs <- err
				return
			}
			waiting <- d
		}()
	}
	// Both are parked: their queued decisions are on b's subject.
	for range 2 {
		mustOutcome(t, w.next("b"), intents.OutcomeQueued, "")
	}
	// A third submit finds the two slots taken.
	_, third := protoIntent(fmtSet, "c", "doc.y", `3`)
	hdr := nats.Header{}
	if code := w.apiErr("submit", third, hdr); code != codeUnavailable {
		t.Fatalf("a submit past MaxSubmits: error %s, want %s", code, codeUnavailable)
	}
	// The holder ends; both waiters are answered, applied.
	abort := w.send("a", fmtAbort, "a", g.Txn, g.Fence)
	mustOutcome(t, abort, intents.OutcomeAborted, "")
	for range 2 {
		select {
		case d := <-waiting:
			mustOutcome(t, d, intents.OutcomeApplied, "")
		case err := <-errs:
			t.Fatal(err)
		}
		mustOutcome(t, w.next("b"), intents.OutcomeApplied, "")
	}
	// With the slots free again, a submit is decided while another waits.
	g = w.grant("a", "doc.x")
	_, body := protoIntent(fmtWaitSet, "b", "doc.x", `9`)
	go func() {
		d, err := w.trySubmit(body, 60000)
		if err != nil {
			errs <- err
			return
		}
		waiting <- d
	}()
	mustOutcome(t, w.next("b"), intents.OutcomeQueued, "")
	mustOutcome(t, w.submit(third, -1), intents.OutcomeApplied, "")
	mustOutcome(t, w.send("a", fmtAbort, "a", g.Txn, g.Fence), intents.OutcomeAborted, "")
	select {
	case d := <-waiting:
		mustOutcome(t, d, intents.OutcomeApplied, "")
	case err := <-errs:
		t.Fatal(err)
	}
}
