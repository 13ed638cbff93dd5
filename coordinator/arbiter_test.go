package coordinator

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
)

// Over the wire, as an arbiter in any language would: an escalation
// arrives on the arbiter work queue with its case; arbiter.resolve settles
// it; the newcomer is applied, the holder preempted, both told; a second
// resolution is refused.
func TestArbiterOverTheWire(t *testing.T) {
	ns := natstest.Run(t)
	startService(t, ns, t.TempDir(), Options{})
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	decisions := map[string]*nats.Subscription{}
	for _, a := range []string{"w1", "w2"} {
		sub, err := nc.SubscribeSync(subj.Decisions(a))
		if err != nil {
			t.Fatal(err)
		}
		decisions[a] = sub
	}
	next := func(agent string) *intents.Decision {
		t.Helper()
		return natstest.Next[intents.Decision](t, decisions[agent])
	}
	propose := ulid.Make().String()
	nc.Publish(subj.Intents("w1"), []byte(`{"id":"`+propose+`","agent":"w1","kind":"propose","writes":[{"path":"report.intro","op":"set"}]}`))
	grant := next("w1")
	if grant.Outcome != intents.OutcomeGranted {
		t.Fatalf("propose: %+v", grant)
	}
	esc := ulid.Make().String()
	nc.Publish(subj.Intents("w2"), []byte(`{"id":"`+esc+`","agent":"w2","kind":"apply","on_conflict":"escalate","writes":[{"path":"report.intro","op":"set","value":"rewrite"}]}`))
	if d := next("w2"); d.Outcome != intents.OutcomeEscalated {
		t.Fatalf("escalate: %+v", d)
	}

	// The arbiter pulls its case from the work queue.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cons, err := js.CreateOrUpdateConsumer(ctx, subj.Stream(intents.StreamArbiter), jetstream.ConsumerConfig{Durable: "arbiters", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var cs intents.Escalation
	if err := json.Unmarshal(m.Data(), &cs); err != nil {
		t.Fatal(err)
	}
	if cs.ID != esc || cs.Holder == nil || cs.Holder.Txn != grant.Txn || len(cs.Intents) != 2 || cs.Deadline.IsZero() {
		t.Fatalf("case %+v", cs)
	}
	if st, ok := cs.State["report.intro"]; !ok || st.Exists {
		t.Fatalf("case state %+v", cs.State)
	}
	resolve := func(body string) *nats.Msg {
		t.Helper()
		r, err := nc.Request(subj.API(intents.APIArbiterResolve), []byte(body), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := resolve(`{"escalation":"` + esc + `","arbiter":"judge","winners":["` + esc + `"],"rationale":"the rewrite is better"}`)
	if r.Header.Get(micro.ErrorCodeHeader) != "" || string(r.Data) != `{"ok":true,"settled":true}` {
		t.Fatalf("resolve: %q %v", r.Data, r.Header)
	}
	m.Ack()
	if d := next("w1"); d.Outcome != intents.OutcomeAborted || d.Intent != propose {
		t.Fatalf("holder: %+v", d)
	}
	if d := next("w2"); d.Outcome != intents.OutcomeApplied || d.Intent != esc {
		t.Fatalf("newcomer: %+v", d)
	}
	r = resolve(`{"escalation":"` + esc + `","arbiter":"judge","losers":["` + esc + `"],"rationale":"again"}`)
	if code := r.Header.Get(micro.ErrorCodeHeader); code != string(intents.ReasonInvalid) {
		t.Fatalf("second resolution: code %q, %q", code, r.Header.Get(micro.ErrorHeader))
	}
}

// A restart keeps open cases and their deadlines: the case is still there
// for the arbiters (once, thanks to its message id) and can be resolved.
func TestArbiterCaseSurvivesRestart(t *testing.T) {
	ns := natstest.Run(t)
	dir := t.TempDir()
	svc := startService(t, ns, dir, Options{})
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	sub, err := nc.SubscribeSync(subj.Decisions("w2"))
	if err != nil {
		t.Fatal(err)
	}
	holder := ulid.Make().String()
	r, err := nc.Request(subj.API(intents.APISubmit), []byte(`{"id":"`+holder+`","agent":"w1","kind":"propose","lease_ms":600000,"writes":[{"path":"doc.x","op":"set"}]}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var grant intents.Decision
	json.Unmarshal(r.Data, &grant)
	esc := ulid.Make().String()
	nc.Publish(subj.Intents("w2"), []byte(`{"id":"`+esc+`","agent":"w2","kind":"apply","on_conflict":"escalate","writes":[{"path":"doc.x","op":"set","value":1}]}`))
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	before, ok := svc.Core().Engine().Case(esc)
	if !ok {
		t.Fatal("no open case")
	}
	if err := svc.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	svc2 := startService(t, ns, dir, Options{})
	var after *intents.Escalation
	if !svc2.call(context.Background(), func() { after, ok = svc2.core.Engine().Case(esc) }) || !ok {
		t.Fatal("the case did not survive the restart")
	}
	if !after.Deadline.Equal(before.Deadline) || after.Holder == nil || after.Holder.Txn != grant.Txn {
		t.Fatalf("case after restart %+v, before %+v", after, before)
	}
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), subj.Stream(intents.StreamArbiter))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(context.Background()); err != nil || info.State.Msgs != 1 {
		t.Fatalf("arbiter stream holds %d cases, want 1 (%v)", info.State.Msgs, err)
	}
	resp, err := nc.Request(subj.API(intents.APIArbiterResolve), []byte(`{"escalation":"`+esc+`","arbiter":"judge","losers":["`+esc+`"],"rationale":"w1 holds it"}`), 10*time.Second)
	if err != nil || resp.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Fatalf("resolve after restart: %v %v", err, resp.Header)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var d intents.Decision
	if json.Unmarshal(m.Data, &d); d.Reason != intents.ReasonArbiterRejected || d.Intent != esc {
		t.Fatalf("after resolution: %+v", d)
	}
}

// A replacement whose precondition fails is rejected and recorded, nothing
// is applied, and the escalated intent is told; the log keeps the case's
// resolution with its rationale.
func TestArbiterReplacementRejected(t *testing.T) {
	ns := natstest.Run(t)
	svc := startService(t, ns, t.TempDir(), Options{})
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	sub, err := nc.SubscribeSync(subj.Decisions("w2"))
	if err != nil {
		t.Fatal(err)
	}
	judge, err := nc.SubscribeSync(subj.Decisions("judge"))
	if err != nil {
		t.Fatal(err)
	}
	next := func(s *nats.Subscription) *intents.Decision {
		t.Helper()
		return natstest.Next[intents.Decision](t, s)
	}
	if _, err := nc.Request(subj.API(intents.APISubmit), []byte(`{"id":"`+ulid.Make().String()+`","agent":"w1","kind":"propose","writes":[{"path":"doc.x","op":"set"}]}`), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	esc := ulid.Make().String()
	nc.Publish(subj.Intents("w2"), []byte(`{"id":"`+esc+`","agent":"w2","kind":"apply","on_conflict":"escalate","writes":[{"path":"doc.x","op":"set","value":1}]}`))
	if d := next(sub); d.Outcome != intents.OutcomeEscalated {
		t.Fatalf("escalate: %+v", d)
	}
	repl := ulid.Make().String()
	resp, err := nc.Request(subj.API(intents.APIArbiterResolve), []byte(`{"escalation":"`+esc+`","arbiter":"judge","rationale":"merge them",
		"replacement":{"id":"`+repl+`","agent":"judge","kind":"apply","pre":["state.doc.x == \"draft\""],"writes":[{"path":"doc.x","op":"set","value":2}]}}`), 10*time.Second)
	if err != nil || resp.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Fatalf("resolve: %v %v", err, resp.Header)
	}
	if d := next(judge); d.Intent != repl || d.Reason != intents.ReasonPreconditionFailed {
		t.Fatalf("replacement: %+v", d)
	}
	if d := next(sub); d.Intent != esc || d.Reason != intents.ReasonArbiterRejected {
		t.Fatalf("escalated intent: %+v", d)
	}
	st, err := stateGetNow(svc, []string{"doc.x"}, svc.viewerOf(""))
	if err != nil || st.Values["doc.x"].Exists {
		t.Fatalf("doc.x after a rejected replacement: %+v %v", st, err)
	}
	evs, _, err := svc.Core().Log().Query(eventlogQuery(intents.EventResolve))
	if err != nil || len(evs) != 1 || evs[0].Resolution.Rationale != "merge them" || evs[0].Intent != esc {
		t.Fatalf("the log's resolve events: %v %v", evs, err)
	}
}

func eventlogQuery(t intents.EventType) eventlog.Query { return eventlog.Query{Type: t, Limit: 10} }
