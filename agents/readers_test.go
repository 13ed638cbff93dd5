package agents_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/nats-io/nats.go"
)

// readersRules keeps secrets.** for judge, and the notes of every report
// for judge too; obs is an observer.
const readersRules = `{
  "agents": {"obs": {"roles": ["observer"]}, "arb": {"roles": ["arbiter"]}},
  "rules": [
    {"pattern": "secrets.**", "readers": ["judge"], "writers": ["judge"]},
    {"pattern": "report.*.notes", "readers": ["judge", "role:arbiter"]}
  ]
}`

// readersWorld is an authenticated coordinator with readersRules in force,
// a secret and a report with notes written by judge.
func readersWorld(t *testing.T) (*authWorld, map[string]*agents.Client) {
	t.Helper()
	w := newAuthWorld(t, map[string][]string{"alice": {"coder"}, "judge": nil, "obs": {natsauth.RoleObserver}, "arb": {natsauth.RoleArbiter}})
	ctx := ctxFor(t, 30*time.Second)
	if _, err := w.svc.SetRules(ctx, []byte(readersRules), "test"); err != nil {
		t.Fatal(err)
	}
	clients := map[string]*agents.Client{}
	for _, name := range []string{"alice", "judge", "obs", "arb"} {
		nc, _ := w.connect(name)
		c, err := agents.Connect(ctx, nc, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients[name] = c
	}
	return w, clients
}

// What the readers rules keep from an agent is kept from it on every way of
// reading: state.get, log.query, the change feed (its subjects and its
// stream, through Watch), and txn.list's fences; an observer and the agents
// the rules name see it.
func TestReadersOnEveryRead(t *testing.T) {
	w, cl := readersWorld(t)
	ctx := ctxFor(t, 60*time.Second)
	alice, judge, obs := cl["alice"], cl["judge"], cl["obs"]

	// alice follows the change feed both ways before anything is written.
	anc, refused := w.connect("alice")
	feed, err := anc.SubscribeSync(intents.Subjects{}.EventsChange(">"))
	if err != nil {
		t.Fatal(err)
	}
	if err := anc.Flush(); err != nil {
		t.Fatal(err)
	}
	aliceWatch, err := alice.Watch(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer aliceWatch.Stop()
	judgeWatch, err := judge.Watch(ctx, "secrets", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer judgeWatch.Stop()

	secret, err := judge.Apply(ctx, intents.Apply("hide").Set("secrets.k", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	report, err := judge.Apply(ctx, intents.Apply("report").Set("report.r1", map[string]any{"title": "T", "notes": "hidden"}))
	if err != nil {
		t.Fatal(err)
	}

	// state.get.
	st, err := alice.Read(ctx, "secrets.k", "secrets", "report.r1", "report.r1.title")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"secrets.k", "secrets"} {
		if v := st.Values[p]; v.Exists || v.Value != nil || v.Version != 0 || !slices.Equal(v.Redacted, []string{p}) {
			t.Errorf("alice reads %s: %+v, want nothing of it and redacted [%s]", p, v, p)
		}
	}
	if v := st.Values["report.r1"]; !v.Exists || string(v.Value) != `{"title":"T"}` || !slices.Equal(v.Redacted, []string{"report.r1.notes"}) {
		t.Errorf("alice reads report.r1: %+v %s, want it without its notes", v, v.Value)
	}
	if v := st.Values["report.r1.title"]; string(v.Value) != `"T"` || len(v.Redacted) > 0 {
		t.Errorf("alice reads report.r1.title: %+v", v)
	}
	for _, who := range []*agents.Client{judge, obs} {
		st, err := who.Read(ctx, "secrets.k", "report.r1")
		if err != nil {
			t.Fatal(err)
		}
		if v := st.Values["secrets.k"]; string(v.Value) != `"s3cret"` || len(v.Redacted) > 0 {
			t.Errorf("%s reads secrets.k: %+v", who.Name(), v)
		}
		if v := st.Values["report.r1"]; !strings.Contains(string(v.Value), `"notes":"hidden"`) {
			t.Errorf("%s reads report.r1: %s", who.Name(), v.Value)
		}
	}

	// The change feed: on its subjects, what every agent may read.
	for _, want := range []struct {
		rev      uint64
		redacted string
	}{{secret.Rev, "secrets.k"}, {report.Rev, "report.r1.notes"}} {
		m, err := feed.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(m.Data), "s3cret") || strings.Contains(string(m.Data), "hidden") {
			t.Fatalf("the change feed carries a value alice may not read: %s", m.Data)
		}
		evs, err := intents.DecodeFeed(m.Data)
		if err != nil || len(evs) != 1 || evs[0].Seq != want.rev || !slices.Equal(evs[0].Change.Redacted, []string{want.redacted}) {
			t.Fatalf("feed message %s: %v, want rev %d alone with %s redacted", m.Data, err, want.rev, want.redacted)
		}
	}
	// Watch: alice gets the changes without what she may not read; judge
	// gets the secret, which the feed did not carry, from the log.
	for _, want := range []struct {
		rev      uint64
		redacted string
	}{{secret.Rev, "secrets.k"}, {report.Rev, "report.r1.notes"}} {
		ch := next(t, ctx, aliceWatch)
		b, _ := json.Marshal(ch.Writes)
		if ch.Rev != want.rev || !slices.Equal(ch.Redacted, []string{want.redacted}) || strings.Contains(string(b), "s3cret") || strings.Contains(string(b), "hidden") {
			t.Fatalf("alice watched %+v (%s), want rev %d with %s redacted", ch, b, want.rev, want.redacted)
		}
	}
	if ch := next(t, ctx, judgeWatch); ch.Rev != secret.Rev || len(ch.Redacted) > 0 || len(ch.Writes) != 1 || string(ch.Writes[0].Value) != `"s3cret"` {
		t.Fatalf("judge watched %+v, want the secret", ch)
	}

	// log.query: alice sees the changes as the feed shows them, her own
	// events, and nothing else of judge's.
	type page struct {
		Events []*intents.Event `json:"events"`
		Next   uint64           `json:"next"`
	}
	query := func(nc *nats.Conn, q string) page {
		t.Helper()
		m, err := nc.Request(intents.Subjects{}.API(intents.APILogQuery), []byte(q), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var p page
		if err := json.Unmarshal(m.Data, &p); err != nil {
			t.Fatalf("log.query %s: %s: %v", q, m.Data, err)
		}
		return p
	}
	if p := query(anc, `{"path":"secrets.k"}`); len(p.Events) != 1 || p.Events[0].Type != intents.EventChange ||
		p.Events[0].Change.Writes[0].Value != nil || !slices.Equal(p.Events[0].Change.Redacted, []string{"secrets.k"}) {
		b, _ := json.Marshal(p)
		t.Fatalf("alice's log.query of secrets.k: %s, want its change, redacted, and no intent or decision of judge's", b)
	}
	if _, err := alice.Apply(ctx, intents.Apply("mine").Set("alice.n", 1)); err != nil {
		t.Fatal(err)
	}
	if p := query(anc, `{"type":"decision","limit":100}`); len(p.Events) != 1 || p.Events[0].Agent != "alice" {
		b, _ := json.Marshal(p)
		t.Fatalf("alice's log.query of decisions: %s, want her own only", b)
	}
	if p := query(anc, `{"type":"intent","agent":"judge"}`); len(p.Events) != 0 {
		t.Fatalf("alice reads judge's intents: %d", len(p.Events))
	}
	onc, _ := w.connect("obs")
	if p := query(onc, `{"type":"decision","limit":100}`); len(p.Events) != 3 {
		t.Fatalf("the observer's log.query of decisions: %d events, want all 3", len(p.Events))
	}
	if p := query(onc, `{"path":"secrets.k","type":"change"}`); len(p.Events) != 1 || string(p.Events[0].Change.Writes[0].Value) != `"s3cret"` {
		t.Fatalf("the observer's log.query of secrets.k: %+v", p)
	}

	// decision.get: an agent's own decisions only.
	for who, want := range map[*nats.Conn]string{anc: "not_found", onc: ""} {
		m, err := who.Request(intents.Subjects{}.API(intents.APIDecisionGet), []byte(`{"intent":"`+secret.Intent+`"}`), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get("Nats-Service-Error-Code"); got != want {
			t.Fatalf("decision.get of judge's decision: error %q (%s), want %q", got, m.Data, want)
		}
	}

	// txn.list: a fence is its holder's.
	tx, err := judge.Propose(ctx, intents.Propose("hold").Write("secrets.k", intents.OpSet))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Abort(ctx)
	txns := func(nc *nats.Conn) []map[string]any {
		t.Helper()
		m, err := nc.Request(intents.Subjects{}.API(intents.APITxnList), []byte(`{}`), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Txns []map[string]any `json:"txns"`
		}
		if err := json.Unmarshal(m.Data, &r); err != nil || len(r.Txns) != 1 {
			t.Fatalf("txn.list: %s %v", m.Data, err)
		}
		return r.Txns
	}
	if row := txns(anc)[0]; row["fence"] != nil || row["agent"] != "judge" {
		t.Fatalf("alice's txn.list shows judge's fence: %v", row)
	}
	jnc, _ := w.connect("judge")
	for who, nc := range map[string]*nats.Conn{"judge": jnc, "obs": onc} {
		if row := txns(nc)[0]; row["fence"] == nil {
			t.Fatalf("%s's txn.list: %v, want the fence", who, row)
		}
	}
	// conflicts.top: judge collides with its own transaction on secrets.k,
	// arb with judge's on report.r9.
	held, err := judge.Propose(ctx, intents.Propose("hold").Write("report.r9", intents.OpSet))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Abort(ctx)
	if _, err := judge.Apply(ctx, intents.Apply("clash").Set("secrets.k", "x")); err == nil {
		t.Fatal("judge's apply beside its own txn was not refused")
	}
	if _, err := cl["arb"].Apply(ctx, intents.Apply("clash").Set("report.r9", 1)); err == nil {
		t.Fatal("arb's apply was not refused")
	}
	spots := func(nc *nats.Conn) []string {
		t.Helper()
		m, err := nc.Request(intents.Subjects{}.API(intents.APIConflictsTop), []byte(`{"limit":50}`), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Spots []struct{ Kind, Name string } `json:"spots"`
		}
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatalf("conflicts.top: %s: %v", m.Data, err)
		}
		var out []string
		for _, sp := range r.Spots {
			out = append(out, sp.Kind+" "+sp.Name)
		}
		slices.Sort(out)
		return out
	}
	if got := spots(anc); !slices.Equal(got, []string{"prefix report", "prefix report.r9"}) {
		t.Fatalf("alice's conflicts.top: %q, want no secrets and no pairs of others", got)
	}
	if got := spots(onc); !slices.Contains(got, "pair arb/judge") || !slices.Contains(got, "prefix secrets") {
		t.Fatalf("the observer's conflicts.top: %q", got)
	}
	select {
	case err := <-refused:
		t.Fatalf("alice's reads met a refusal: %v", err)
	default:
	}
}

func next(t *testing.T, ctx context.Context, w *agents.Watcher) agents.Change {
	t.Helper()
	select {
	case ch, ok := <-w.Changes():
		if !ok {
			t.Fatalf("the watch ended: %v", w.Err())
		}
		return ch
	case <-ctx.Done():
		t.Fatalf("no change: %v", ctx.Err())
	}
	panic("unreachable")
}

// An arbiter's case shows it only what role:arbiter may read.
func TestReadersInArbiterCases(t *testing.T) {
	w, cl := readersWorld(t)
	ctx := ctxFor(t, 60*time.Second)
	judge := cl["judge"]
	if _, err := judge.Apply(ctx, intents.Apply("seed").Set("secrets.k", "s3cret").Set("report.r1", map[string]any{"notes": "for arbiters"})); err != nil {
		t.Fatal(err)
	}
	tx, err := judge.Propose(ctx, intents.Propose("hold").Write("secrets.k", intents.OpSet).Write("report.r1.notes", intents.OpSet))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Abort(ctx)
	cases := make(chan *intents.Escalation, 1)
	arb, stop := context.WithCancel(ctx)
	defer stop()
	anc, _ := w.connect("arb")
	go agents.RunArbiter(arb, anc, "arb", func(_ context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		select {
		case cases <- c:
		default:
		}
		return &intents.Resolution{Losers: []string{c.ID}, Rationale: "test"}, nil
	})
	if _, err := judge.Apply(ctx, intents.Apply("clash").Set("secrets.k", "other").Set("report.r1.notes", "n2").Escalate()); err == nil {
		t.Fatal("the escalated intent was not rejected")
	}
	var c *intents.Escalation
	select {
	case c = <-cases:
	case <-ctx.Done():
		t.Fatal("no case reached the arbiter")
	}
	b, _ := json.Marshal(c)
	if strings.Contains(string(b), "s3cret") || strings.Contains(string(b), `"other"`) {
		t.Fatalf("the case shows the arbiter a secret: %s", b)
	}
	if !slices.Equal(c.Redacted, []string{"secrets.k"}) || c.State["secrets.k"].Exists {
		t.Fatalf("the case: %s, want secrets.k redacted", b)
	}
	if c.State["report.r1.notes"].Value != "for arbiters" || !strings.Contains(string(b), `"n2"`) {
		t.Fatalf("the case hides what role:arbiter may read: %s", b)
	}
}

// Of JetStream an agent may only pull from the consumers the coordinator
// made for it: it may not make one of its own (filtered to other agents'
// decisions or intents, or pushing into another agent's subjects), nor
// delete, list or change consumers, read a stream's messages or subjects,
// or use any other stream; an arbiter may not make consumers either.
func TestJetStreamRefusals(t *testing.T) {
	w, cl := readersWorld(t)
	ctx := ctxFor(t, 60*time.Second)
	watch, err := cl["alice"].Watch(ctx, "doc", 0) // alice's own follow consumer works
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	events, arb := intents.Subjects{}.Stream(intents.StreamEvents), intents.Subjects{}.Stream(intents.StreamArbiter)
	push := `{"stream_name":"` + events + `","config":{"deliver_subject":"coagent.notices.bob","filter_subject":"coagent.events.change.>","ack_policy":"none"}}`
	pull := func(filter string) string {
		return `{"stream_name":"` + events + `","config":{"name":"spy","filter_subject":"` + filter + `","ack_policy":"none"}}`
	}
	for _, c := range []struct{ who, subject, body string }{
		{"alice", "$JS.API.CONSUMER.CREATE." + events + ".spy.coagent.events.decision", pull("coagent.events.decision")},
		{"alice", "$JS.API.CONSUMER.CREATE." + events + ".spy.coagent.events.intent", pull("coagent.events.intent")},
		{"alice", "$JS.API.CONSUMER.CREATE." + events + ".spy.coagent.events.change.>", pull("coagent.events.change.>")},
		{"alice", "$JS.API.CONSUMER.CREATE." + events, push},
		{"alice", "$JS.API.CONSUMER.DURABLE.CREATE." + events + ".spy", pull("coagent.events.>")},
		{"alice", "$JS.API.CONSUMER.DELETE." + events + ".bobwatch", ""},
		{"alice", "$JS.API.CONSUMER.NAMES." + events, ""},
		{"alice", "$JS.API.CONSUMER.LIST." + events, ""},
		{"alice", "$JS.API.STREAM.INFO." + events, `{"subjects_filter":">"}`},
		{"alice", "$JS.API.STREAM.MSG.GET." + events, `{"seq":1}`},
		{"alice", "$JS.API.DIRECT.GET." + events, `{"seq":1}`},
		{"alice", "$JS.API.CONSUMER.CREATE.COAGENT_DECISIONS.spy.coagent.decisions.bob", `{}`},
		{"alice", "$JS.API.CONSUMER.MSG.NEXT." + arb + ".arbiters", `{"batch":1}`},
		{"alice", "$JS.API.STREAM.PURGE." + events, ""},
		{"arb", "$JS.API.CONSUMER.CREATE." + arb, `{}`},
		{"arb", "$JS.API.CONSUMER.DURABLE.CREATE." + arb + ".mine", `{}`},
		{"arb", "$JS.API.CONSUMER.DELETE." + arb + ".arbiters", ""},
	} {
		nc, refused := w.connect(c.who)
		if err := nc.PublishRequest(c.subject, nats.NewInbox(), []byte(c.body)); err != nil {
			t.Fatal(err)
		}
		awaitRefusal(t, refused, `"`+c.subject+`"`)
	}
}
