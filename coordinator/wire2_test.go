package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// streamMsgs is how many messages a stream holds.
func streamMsgs(t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// The intents stream keeps an intent only until the coordinator has
// acknowledged it, in bulk: after a run is drained it holds none. And an
// intent is never acknowledged before its decision is stored: while the
// decisions stream refuses it, the intent stays, and once the decision is
// stored, it goes.
func TestIntentsAcknowledgedInBulkOnceStored(t *testing.T) {
	ns := natstest.Run(t)
	startService(t, ns, t.TempDir(), Options{})
	w := &protoWire{t: t, nc: natstest.Connect(t, ns), dec: map[string]*nats.Subscription{}, notices: map[string]*nats.Subscription{}, waiting: map[string][]string{}}
	js, err := jetstream.New(w.nc)
	if err != nil {
		t.Fatal(err)
	}
	const intentsStream, decisionsStream = "COAGENT_INTENTS", "COAGENT_DECISIONS"
	var ids []string
	for i := range 200 {
		id, body := protoIntent(fmtIncr, "a", fmt.Sprintf("n.k%d", i%7))
		w.publish("a", body)
		ids = append(ids, id)
	}
	for _, id := range ids {
		if d := w.next("a"); d.Intent != id || d.Outcome != intents.OutcomeApplied {
			t.Fatalf("decision %+v, want %s applied", d, id)
		}
	}
	natstest.CheckFor(t, 10*time.Second, "the intents stream after a drained run", func() error {
		if n := streamMsgs(t, js, intentsStream); n != 0 {
			return fmt.Errorf("%d messages left", n)
		}
		return nil
	})

	// The decisions stream takes no more: the next decision cannot be
	// stored, so its intent is not acknowledged.
	st, err := js.Stream(context.Background(), decisionsStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	full := cfg
	full.MaxMsgs, full.Discard = int64(streamMsgs(t, js, decisionsStream)), jetstream.DiscardNew
	if _, err := js.UpdateStream(context.Background(), full); err != nil {
		t.Fatal(err)
	}
	id, body := protoIntent(fmtIncr, "a", "n.blocked")
	w.publish("a", body)
	var d intents.Decision
	natstest.CheckFor(t, 10*time.Second, "the decision of the blocked intent", func() error {
		m, err := w.nc.Request(protoAPI+"decision.get", []byte(`{"intent":"`+id+`"}`), protoTimeout)
		if err != nil {
			return err
		}
		if code := m.Header.Get(protoHdrErrCode); code != "" {
			return fmt.Errorf("decision.get: %s", code)
		}
		return json.Unmarshal(m.Data, &d)
	})
	if d.Outcome != intents.OutcomeApplied {
		t.Fatalf("the blocked intent: %+v", d)
	}
	// Decided and durable, its decision refused: still in the stream
	// after the acknowledger has had many tries.
	cons, err := js.Consumer(context.Background(), intentsStream, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, "the acknowledger trying again", func() error {
		info, err := cons.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumRedelivered == 0 && info.Delivered.Consumer < uint64(len(ids))+2 {
			return fmt.Errorf("the intent came once; waiting for AckWait to pass")
		}
		return nil
	})
	if n := streamMsgs(t, js, intentsStream); n != 1 {
		t.Fatalf("the intents stream holds %d messages while the decision is not stored, want the intent", n)
	}
	if _, err := js.UpdateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if got := w.next("a"); got.Intent != id {
		t.Fatalf("once stored, the decision on a's subject is for %s, want %s", got.Intent, id)
	}
	natstest.CheckFor(t, 15*time.Second, "the intents stream once the decision is stored", func() error {
		if n := streamMsgs(t, js, intentsStream); n != 0 {
			return fmt.Errorf("%d messages left", n)
		}
		return nil
	})
}

// An intent published while no coordinator runs is kept (the coordinator's
// consumer exists from the stream's creation on) and decided once one
// starts.
func TestIntentPublishedWhileNoCoordinatorRuns(t *testing.T) {
	ns := natstest.Run(t)
	dir := t.TempDir()
	svc := startService(t, ns, dir, Options{})
	if err := svc.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	client := natstest.Connect(t, ns)
	js, err := jetstream.New(client)
	if err != nil {
		t.Fatal(err)
	}
	id, body := protoIntent(fmtSet, "a", "offline.x", `1`)
	m := nats.NewMsg(protoIntents + "a")
	m.Header.Set(protoHdrMsgID, id)
	m.Data = []byte(body)
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatalf("publish with no coordinator running: %v", err)
	}
	if n := streamMsgs(t, js, "COAGENT_INTENTS"); n != 1 {
		t.Fatalf("the intents stream holds %d messages with no coordinator running, want the intent", n)
	}
	decs, err := client.SubscribeSync(protoDecisions + "a")
	if err != nil {
		t.Fatal(err)
	}
	startService(t, ns, dir, Options{})
	got := natstest.Next[intents.Decision](t, decs)
	if got.Intent != id || got.Outcome != intents.OutcomeApplied {
		t.Fatalf("decision %+v, want %s applied", got, id)
	}
}

// A full intake answers a submit unavailable at once, and loses nothing:
// what was taken is decided, and what was refused, sent again with the
// same id, is decided once.
func TestFullIntakeAnswersUnavailable(t *testing.T) {
	ns := natstest.Run(t)
	svc := startService(t, ns, t.TempDir(), Options{MaxIntake: 4})
	nc := natstest.Connect(t, ns)
	// The loop is held, so nothing leaves the intake.
	hold, held := make(chan struct{}), make(chan struct{})
	go svc.call(context.Background(), func() { close(held); <-hold })
	<-held
	type answer struct {
		body string
		m    *nats.Msg
		err  error
	}
	answers := make(chan answer, 16)
	for range 10 {
		_, body := protoIntent(fmtIncr, "a", "intake.n")
		go func() {
			m, err := nc.Request(protoAPI+"submit.a", []byte(body), protoTimeout)
			answers <- answer{body, m, err}
		}()
	}
	// Four fit in the intake; six are refused at once, while the loop is
	// still held.
	var refused []string
	for range 6 {
		a := <-answers
		if a.err != nil || a.m.Header.Get(protoHdrErrCode) != codeUnavailable {
			t.Fatalf("a submit past a full intake: %v %v %s", a.err, a.m.Header, a.m.Data)
		}
		refused = append(refused, a.body)
	}
	close(hold)
	for range 4 {
		a := <-answers
		var d intents.Decision
		if a.err != nil || json.Unmarshal(a.m.Data, &d) != nil || d.Outcome != intents.OutcomeApplied {
			t.Fatalf("a submit the intake took: %v %s", a.err, a.m.Data)
		}
	}
	for _, body := range refused {
		m, err := nc.Request(protoAPI+"submit.a", []byte(body), protoTimeout)
		var d intents.Decision
		if err != nil || json.Unmarshal(m.Data, &d) != nil || d.Outcome != intents.OutcomeApplied || d.Duplicate {
			t.Fatalf("a refused submit sent again: %v %s", err, m.Data)
		}
	}
	m, err := nc.Request(protoAPI+"state.get", []byte(`{"paths":["intake.n"]}`), protoTimeout)
	if err != nil {
		t.Fatal(err)
	}
	var st stateReply
	if err := json.Unmarshal(m.Data, &st); err != nil || st.Values["intake.n"].Value != 10.0 {
		t.Fatalf("intake.n after 10 increments: %s", m.Data)
	}
}

// With an embedded server's interest (InterestOf), a live event type is
// sent only while someone listens: a subscriber that comes gets the
// events from then on.
func TestLiveEventsFollowInterest(t *testing.T) {
	ns := natstest.Run(t)
	startService(t, ns, t.TempDir(), Options{Interest: InterestOf(ns)})
	w := &protoWire{t: t, nc: natstest.Connect(t, ns), dec: map[string]*nats.Subscription{}, notices: map[string]*nats.Subscription{}, waiting: map[string][]string{}}
	w.viaAPI = true
	first := w.send("a", fmtSet, "a", "live.x", `1`)
	mustOutcome(t, first, intents.OutcomeApplied, "")
	decisions := w.subscribe(protoEvents + "decision")
	intentsLive := w.subscribe(protoEvents + "intent")
	d := w.send("a", fmtSet, "a", "live.x", `2`)
	// The first intent was answered before its live events went out, so
	// they may reach the new subscribers too: interest is looked at when
	// a group is published, not when it was decided.
	if ev := nextLiveOf(t, decisions, first.Intent); ev.Decision == nil || ev.Decision.Intent != d.Intent {
		t.Fatalf("live decision %+v, want %s", ev, d.Intent)
	}
	if ev := nextLiveOf(t, intentsLive, first.Intent); ev.Intent != d.Intent {
		t.Fatalf("live intent %+v, want %s", ev, d.Intent)
	}
}

// nextLiveOf is the next live event on sub that is not about the intent
// skip.
func nextLiveOf(t *testing.T, sub *nats.Subscription, skip string) *intents.Event {
	t.Helper()
	for {
		ev := natstest.Next[intents.Event](t, sub)
		if ev.Intent != skip {
			return ev
		}
	}
}
