package coordinator

// Protocol tests: every conflict rule of SPEC §4 and every outcome of SPEC §3,
// the API, the event feed and the streams of SPEC §6, exercised over the wire
// against a real embedded NATS server and a real Pebble directory. The client
// side is what an agent in any language would write: nats.go, encoding/json
// and the subject strings of the contract, nothing from the coordinator (the
// intents types only decode replies). Nothing sleeps: every step waits for
// the message that says it happened; time is a fake clock the service reads,
// or a short real lease or wait whose resulting message is awaited.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// The wire names of SPEC §6, spelled out as a client in another language
// would spell them.
const (
	protoIntents   = "coagent.intents."
	protoDecisions = "coagent.decisions."
	protoNotices   = "coagent.notices."
	protoEvents    = "coagent.events."
	protoAPI       = "coagent.api."

	protoHdrIntent  = "Coagent-Intent"
	protoHdrWait    = "Coagent-Wait-Ms"
	protoHdrMsgID   = "Nats-Msg-Id"
	protoHdrErrCode = "Nats-Service-Error-Code"

	protoTimeout = 10 * time.Second
)

// protoClock is the service's clock: real time plus a skew the test moves
// forward, so that real timers still fire and a jump needs no waiting.
type protoClock struct {
	mu   sync.Mutex
	skew time.Duration
}

func (c *protoClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.skew)
}

func (c *protoClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skew += d
}

// protoWire is one agent-side view of a fresh coordinator: its own server, its
// own log, its own clock.
type protoWire struct {
	t       *testing.T
	nc      *nats.Conn
	clock   *protoClock
	dec     map[string]*nats.Subscription // decisions by agent
	notices map[string]*nats.Subscription // notices by agent
	// api makes send and next go by request/reply on
	// coagent.api.submit.<agent> (the main path) instead of the intents
	// stream; waiting holds, by agent, the intents whose reply was
	// interim, oldest first, for next to ask again for their final one.
	viaAPI  bool
	waiting map[string][]string
}

func newProtoWire(t *testing.T, opts Options) *protoWire {
	t.Helper()
	return newProtoWireOn(t, natstest.Run(t), opts)
}

func newProtoWireOn(t *testing.T, ns *server.Server, opts Options) *protoWire {
	t.Helper()
	clock := &protoClock{}
	opts.Now = clock.Now
	// Start flushes its connection before it returns, so the server has
	// the API's subscriptions and a request sent at once on another
	// connection finds a responder.
	startService(t, ns, t.TempDir(), opts)
	return &protoWire{t: t, nc: natstest.Connect(t, ns), clock: clock,
		dec: map[string]*nats.Subscription{}, notices: map[string]*nats.Subscription{}, waiting: map[string][]string{}}
}

func (w *protoWire) subscribe(subject string) *nats.Subscription {
	w.t.Helper()
	sub, err := w.nc.SubscribeSync(subject)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.nc.Flush(); err != nil {
		w.t.Fatal(err)
	}
	return sub
}

// decisions is the subscription to agent's decision subject, made on first
// use; it must exist before anything that agent is answered is published.
func (w *protoWire) decisions(agent string) *nats.Subscription {
	if w.dec[agent] == nil {
		w.dec[agent] = w.subscribe(protoDecisions + agent)
	}
	return w.dec[agent]
}

// watchNotices subscribes to agent's notices (core NATS: only what arrives
// after this is seen).
func (w *protoWire) watchNotices(agent string) {
	if w.notices[agent] == nil {
		w.notices[agent] = w.subscribe(protoNotices + agent)
	}
}

// protoIntent formats an intent whose first verb is a fresh ULID, returned
// with it.
func protoIntent(format string, args ...any) (id, body string) {
	id = ulid.Make().String()
	return id, fmt.Sprintf(format, append([]any{id}, args...)...)
}

// publish puts body on agent's intents subject with plain core NATS.
func (w *protoWire) publish(agent, body string) {
	w.t.Helper()
	w.publishMsg(&nats.Msg{Subject: protoIntents + agent, Data: []byte(body)})
}

func (w *protoWire) publishMsg(m *nats.Msg) {
	w.t.Helper()
	if agent, ok := strings.CutPrefix(m.Subject, protoIntents); ok && !strings.Contains(agent, ".") {
		w.decisions(agent)
	}
	if err := w.nc.PublishMsg(m); err != nil {
		w.t.Fatalf("publish on %s: %v", m.Subject, err)
	}
}

// next is the next decision on agent's decision subject; its Coagent-Intent
// header must name its intent. On the API path it is the final decision of
// the oldest intent sent whose reply was interim: the same intent sent
// again, which waits for it.
func (w *protoWire) next(agent string) *intents.Decision {
	w.t.Helper()
	if w.viaAPI && len(w.waiting[agent]) > 0 {
		body := w.waiting[agent][0]
		w.waiting[agent] = w.waiting[agent][1:]
		d := w.submitAs(agent, body, int(protoTimeout/time.Millisecond))
		if !d.Outcome.Final() {
			w.t.Fatalf("no final decision on asking again for %s: %+v", d.Intent, d)
		}
		// Decided before the intent came again, it is the recorded
		// decision, marked duplicate: as the stream path saw it first.
		d.Duplicate = false
		return d
	}
	m, err := w.decisions(agent).NextMsg(protoTimeout)
	if err != nil {
		w.t.Fatalf("no decision on %s%s: %v", protoDecisions, agent, err)
	}
	d := new(intents.Decision)
	if err := json.Unmarshal(m.Data, d); err != nil {
		w.t.Fatalf("decision %s: %v", m.Data, err)
	}
	if got := m.Header.Get(protoHdrIntent); got != d.Intent {
		w.t.Fatalf("decision for %q has header %s = %q", d.Intent, protoHdrIntent, got)
	}
	if d.Agent != agent {
		w.t.Fatalf("decision on %s%s names agent %q", protoDecisions, agent, d.Agent)
	}
	return d
}

// send publishes an intent made by protoIntent on agent's subject and
// returns its decision; on the API path it submits it as agent, and the
// reply is the first decision, final or interim.
func (w *protoWire) send(agent, format string, args ...any) *intents.Decision {
	w.t.Helper()
	id, body := protoIntent(format, args...)
	if w.viaAPI {
		d := w.submitAs(agent, body, 0)
		if d.Intent != id {
			w.t.Fatalf("submit of %s answered for %q: %+v", id, d.Intent, d)
		}
		if !d.Outcome.Final() {
			w.waiting[agent] = append(w.waiting[agent], body)
		}
		return d
	}
	w.publish(agent, body)
	d := w.next(agent)
	if d.Intent != id {
		w.t.Fatalf("next decision on %s is for %q, want %q: %+v", agent, d.Intent, id, d)
	}
	return d
}

// notice waits for the next notice of kind on agent's notices subject that
// also satisfies match (nil: any), skipping the others.
func (w *protoWire) notice(agent string, kind intents.NoticeKind, match func(*intents.Notice) bool) *intents.Event {
	w.t.Helper()
	sub := w.notices[agent]
	if sub == nil {
		w.t.Fatalf("watchNotices(%q) first", agent)
	}
	deadline := time.Now().Add(protoTimeout)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			w.t.Fatalf("no %s notice on %s%s: %v", kind, protoNotices, agent, err)
		}
		ev := new(intents.Event)
		if err := json.Unmarshal(m.Data, ev); err != nil {
			w.t.Fatalf("notice %s: %v", m.Data, err)
		}
		if ev.Type != intents.EventNotice || ev.Notice == nil || ev.Agent != agent {
			w.t.Fatalf("not a notice for %s: %s", agent, m.Data)
		}
		if ev.Notice.Kind == kind && (match == nil || match(ev.Notice)) {
			return ev
		}
	}
}

func mustOutcome(t *testing.T, d *intents.Decision, outcome intents.Outcome, reason intents.Reason) {
	t.Helper()
	if d.Outcome != outcome || d.Reason != reason {
		t.Fatalf("decision %s %s, want %s %s: %+v", d.Outcome, d.Reason, outcome, reason, d)
	}
	if want := outcome == intents.OutcomeRejected && reason.Retryable(); d.Retryable != want {
		t.Fatalf("decision %s %s has retryable=%v: %+v", d.Outcome, d.Reason, d.Retryable, d)
	}
	if d.Duplicate {
		t.Fatalf("decision marked duplicate: %+v", d)
	}
}

func mustConflict(t *testing.T, d *intents.Decision, path string, kind intents.ConflictKind, txn, agent string) {
	t.Helper()
	want := intents.Conflict{Path: path, Kind: kind, WithTxn: txn, WithAgent: agent}
	if !slices.Contains(d.Conflicts, want) {
		t.Fatalf("conflicts %+v lack %+v", d.Conflicts, want)
	}
}

func mustVersion(t *testing.T, d *intents.Decision, path string, version uint64) {
	t.Helper()
	if v, ok := d.Versions[path]; !ok || v != version {
		t.Fatalf("versions %v: want %s@%d", d.Versions, path, version)
	}
}

func mustDetail(t *testing.T, d *intents.Decision, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(d.Detail, p) {
			t.Fatalf("detail %q does not mention %q", d.Detail, p)
		}
	}
}

// request calls an API endpoint ("state.get") and returns the raw reply.
func (w *protoWire) request(endpoint string, body []byte, hdr nats.Header) *nats.Msg {
	w.t.Helper()
	m, err := w.nc.RequestMsg(&nats.Msg{Subject: protoAPI + endpoint, Data: body, Header: hdr}, protoTimeout)
	if err != nil {
		w.t.Fatalf("request %s: %v", endpoint, err)
	}
	return m
}

// api calls an endpoint that must succeed and decodes its reply strictly,
// so a field the contract does not name fails the test.
func (w *protoWire) api(endpoint, body string, out any) {
	w.t.Helper()
	m := w.request(endpoint, []byte(body), nil)
	if code := m.Header.Get(protoHdrErrCode); code != "" {
		w.t.Fatalf("%s %s: error %s: %s", endpoint, body, code, m.Header.Get("Nats-Service-Error"))
	}
	dec := json.NewDecoder(bytes.NewReader(m.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		w.t.Fatalf("%s reply %s: %v", endpoint, m.Data, err)
	}
}

// apiErr calls an endpoint that must fail and returns its error code.
func (w *protoWire) apiErr(endpoint, body string, hdr nats.Header) string {
	w.t.Helper()
	m := w.request(endpoint, []byte(body), hdr)
	code := m.Header.Get(protoHdrErrCode)
	if code == "" {
		w.t.Fatalf("%s %s: no error, reply %s", endpoint, body, m.Data)
	}
	return code
}

// submit is coagent.api.submit with an optional Coagent-Wait-Ms.
func (w *protoWire) submit(body string, waitMS int) *intents.Decision {
	w.t.Helper()
	d, err := w.trySubmit(body, waitMS)
	if err != nil {
		w.t.Fatal(err)
	}
	return d
}

// submitAs is coagent.api.submit.<agent> with Coagent-Wait-Ms waitMS.
func (w *protoWire) submitAs(agent, body string, waitMS int) *intents.Decision {
	w.t.Helper()
	hdr := nats.Header{}
	hdr.Set(protoHdrWait, fmt.Sprint(waitMS))
	m, err := w.nc.RequestMsg(&nats.Msg{Subject: protoAPI + "submit." + agent, Data: []byte(body), Header: hdr}, protoTimeout+5*time.Second)
	if err != nil {
		w.t.Fatalf("submit as %s: %v", agent, err)
	}
	if code := m.Header.Get(protoHdrErrCode); code != "" {
		w.t.Fatalf("submit as %s: error %s: %s", agent, code, m.Header.Get("Nats-Service-Error"))
	}
	d := new(intents.Decision)
	if err := json.Unmarshal(m.Data, d); err != nil {
		w.t.Fatalf("submit reply %s: %v", m.Data, err)
	}
	if d.Agent != agent {
		w.t.Fatalf("submit as %s answered for agent %q", agent, d.Agent)
	}
	return d
}

// trySubmit is submit for use off the test goroutine.
func (w *protoWire) trySubmit(body string, waitMS int) (*intents.Decision, error) {
	hdr := nats.Header{}
	if waitMS >= 0 {
		hdr.Set(protoHdrWait, fmt.Sprint(waitMS))
	}
	m, err := w.nc.RequestMsg(&nats.Msg{Subject: protoAPI + "submit", Data: []byte(body), Header: hdr}, protoTimeout)
	if err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	if code := m.Header.Get(protoHdrErrCode); code != "" {
		return nil, fmt.Errorf("submit: error %s: %s", code, m.Header.Get("Nats-Service-Error"))
	}
	d := new(intents.Decision)
	if err := json.Unmarshal(m.Data, d); err != nil {
		return nil, fmt.Errorf("submit reply %s: %w", m.Data, err)
	}
	return d, nil
}

// The API replies of SPEC §6, as a client declares them.
type (
	protoState struct {
		Rev    uint64                `json:"rev"`
		Values map[string]protoValue `json:"values"`
	}
	protoValue struct {
		Exists  bool            `json:"exists"`
		Value   json.RawMessage `json:"value"`
		Version uint64          `json:"version"`
		ModRev  uint64          `json:"mod_rev"`
	}
	protoTxns struct {
		Txns []protoTxn `json:"txns"`
	}
	protoTxn struct {
		Txn          string          `json:"txn"`
		Agent        string          `json:"agent"`
		Fence        uint64          `json:"fence"`
		Reads        []intents.Read  `json:"reads"`
		Writes       []intents.Write `json:"writes"`
		LeaseExpires time.Time       `json:"lease_expires"`
	}
	protoLog struct {
		Events []*intents.Event `json:"events"`
		Next   uint64           `json:"next"`
	}
)

func (w *protoWire) state(paths ...string) protoState {
	w.t.Helper()
	body, _ := json.Marshal(map[string][]string{"paths": paths})
	var st protoState
	w.api("state.get", string(body), &st)
	return st
}

// value is one path's value as compact JSON ("" when absent).
func (w *protoWire) value(path string) string {
	w.t.Helper()
	v := w.state(path).Values[path]
	if !v.Exists {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, v.Value); err != nil {
		w.t.Fatal(err)
	}
	return buf.String()
}

func (w *protoWire) mustValue(path, want string) {
	w.t.Helper()
	if got := w.value(path); got != want {
		w.t.Fatalf("%s = %s, want %s", path, got, want)
	}
}

// poke runs a call on the service's loop, which then re-arms its timer
// against the clock: after a clock jump, the due timers fire at once.
func (w *protoWire) poke() { w.state("x") }

// Intents used by many cases.
const (
	fmtSet      = `{"id":%q,"agent":%q,"kind":"apply","writes":[{"path":%q,"op":"set","value":%s}]}`
	fmtPropose  = `{"id":%q,"agent":%q,"kind":"propose","writes":[{"path":%q,"op":"set"}]}`
	fmtCommit   = `{"id":%q,"agent":%q,"kind":"commit","txn":%q,"fence":%d,"writes":[{"path":%q,"op":"set","value":%s}]}`
	fmtWaitSet  = `{"id":%q,"agent":%q,"kind":"apply","on_conflict":"wait","writes":[{"path":%q,"op":"set","value":%s}]}`
	fmtIncr     = `{"id":%q,"agent":%q,"kind":"apply","writes":[{"path":%q,"op":"incr"}]}`
	fmtAbort    = `{"id":%q,"agent":%q,"kind":"abort","txn":%q,"fence":%d}`
	fmtRenew    = `{"id":%q,"agent":%q,"kind":"renew","txn":%q,"fence":%d}`
	fmtProposeL = `{"id":%q,"agent":%q,"kind":"propose","lease_ms":%d,"writes":[{"path":%q,"op":"set"}]}`
)

// grant proposes path for agent and returns the granted decision.
func (w *protoWire) grant(agent, path string) *intents.Decision {
	w.t.Helper()
	g := w.send(agent, fmtPropose, agent, path)
	mustOutcome(w.t, g, intents.OutcomeGranted, "")
	if g.Txn == "" || g.Fence == 0 || g.LeaseExpires == nil {
		w.t.Fatalf("grant without txn, fence or lease: %+v", g)
	}
	return g
}

type protoCase struct {
	name string
	opts Options
	run  func(t *testing.T, w *protoWire)
}

// protoOutcomes covers the outcomes of SPEC §3 and the transaction rules of
// SPEC §2 and §4.
var protoOutcomes = []protoCase{
	{name: "applied", run: func(t *testing.T, w *protoWire) {
		d := w.send("a", fmtSet, "a", "doc.x", `{"n":1}`)
		mustOutcome(t, d, intents.OutcomeApplied, "")
		if d.Rev == 0 || d.Txn != "" || d.Fence != 0 {
			t.Fatalf("applied: %+v", d)
		}
		st := w.state("doc.x")
		if v := st.Values["doc.x"]; !v.Exists || v.Version != 1 || v.ModRev != d.Rev || st.Rev != d.Rev {
			t.Fatalf("state after applied rev %d: %+v", d.Rev, st)
		}
	}},
	{name: "write-write conflict rejected", run: func(t *testing.T, w *protoWire) {
		w.send("setup", fmtSet, "setup", "doc.sec.a", `"v0"`)
		g := w.grant("a", "doc.sec.a")
		d := w.send("b", fmtSet, "b", "doc.sec.a", `"b"`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonConflict)
		mustConflict(t, d, "doc.sec.a", intents.ConflictWriteWrite, g.Txn, "a")
		mustVersion(t, d, "doc.sec.a", 1)
		mustDetail(t, d, "write-write", "doc.sec.a", g.Txn, "a")
		// Below and above the held path conflict too (overlap).
		d = w.send("b", fmtSet, "b", "doc.sec.a.deep", `1`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonConflict)
		mustConflict(t, d, "doc.sec.a.deep", intents.ConflictWriteWrite, g.Txn, "a")
		d = w.send("b", fmtSet, "b", "doc", `{}`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonConflict)
		mustConflict(t, d, "doc.sec.a", intents.ConflictWriteWrite, g.Txn, "a")
		w.mustValue("doc.sec.a", `"v0"`)
	}},
	{name: "granted then committed with fence", run: func(t *testing.T, w *protoWire) {
		g := w.grant("a", "doc.title")
		var txns protoTxns
		w.api("txn.list", `{"agent":"a"}`, &txns)
		if len(txns.Txns) != 1 || txns.Txns[0].Txn != g.Txn || txns.Txns[0].Fence != g.Fence {
			t.Fatalf("txn.list after grant %s: %+v", g.Txn, txns)
		}
		c := w.send("a", fmtCommit, "a", g.Txn, g.Fence, "doc.title", `"Final"`)
		mustOutcome(t, c, intents.OutcomeCommitted, "")
		if c.Txn != g.Txn || c.Fence != g.Fence || c.Rev == 0 {
			t.Fatalf("committed %+v after grant %+v", c, g)
		}
		w.mustValue("doc.title", `"Final"`)
		if v := w.state("doc.title").Values["doc.title"]; v.Version != 1 || v.ModRev != c.Rev {
			t.Fatalf("doc.title after commit at rev %d: %+v", c.Rev, v)
		}
		w.api("txn.list", `{"agent":"a"}`, &txns)
		if len(txns.Txns) != 0 {
			t.Fatalf("txn.list after commit: %+v", txns)
		}
	}},
	{name: "aborted", run: func(t *testing.T, w *protoWire) {
		g := w.grant("a", "doc.title")
		d := w.send("a", fmtAbort, "a", g.Txn, g.Fence)
		mustOutcome(t, d, intents.OutcomeAborted, "")
		if d.Txn != g.Txn || d.Fence != g.Fence {
			t.Fatalf("aborted %+v", d)
		}
		// Over: a commit now is fenced and writes nothing.
		d = w.send("a", fmtCommit, "a", g.Txn, g.Fence, "doc.title", `"late"`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonFenced)
		w.mustValue("doc.title", "")
	}},
	{name: "renewed", run: func(t *testing.T, w *protoWire) {
		g := w.send("a", fmtProposeL, "a", 60000, "doc.title")
		mustOutcome(t, g, intents.OutcomeGranted, "")
		w.clock.Advance(5 * time.Second)
		r := w.send("a", fmtRenew, "a", g.Txn, g.Fence)
		mustOutcome(t, r, intents.OutcomeRenewed, "")
		if r.Txn != g.Txn || r.Fence != g.Fence || r.LeaseExpires == nil || r.LeaseExpires.Sub(*g.LeaseExpires) < 5*time.Second {
			t.Fatalf("renewed %+v after grant %+v", r, g)
		}
		var txns protoTxns
		w.api("txn.list", `{}`, &txns)
		if len(txns.Txns) != 1 || !txns.Txns[0].LeaseExpires.Equal(*r.LeaseExpires) {
			t.Fatalf("txn.list after renew to %s: %+v", r.LeaseExpires, txns)
		}
	}},
	{name: "commit with wrong fence is fenced", run: func(t *testing.T, w *protoWire) {
		g := w.grant("a", "doc.title")
		d := w.send("a", fmtCommit, "a", g.Txn, g.Fence+1, "doc.title", `"x"`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonFenced)
		mustDetail(t, d, fmt.Sprint(g.Fence+1))
		w.mustValue("doc.title", "")
		// It changed nothing: the grant is still live.
		d = w.send("a", fmtCommit, "a", g.Txn, g.Fence, "doc.title", `"ok"`)
		mustOutcome(t, d, intents.OutcomeCommitted, "")
	}},
	{name: "commit outside scope", run: func(t *testing.T, w *protoWire) {
		g := w.grant("a", "doc.title")
		d := w.send("a", fmtCommit, "a", g.Txn, g.Fence, "doc.titles", `"x"`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonOutOfScope)
		mustDetail(t, d, "doc.titles")
		w.mustValue("doc.titles", "")
		// SPEC §2: a rejected commit leaves the transaction open.
		d = w.send("a", fmtCommit, "a", g.Txn, g.Fence, "doc.title", `"ok"`)
		mustOutcome(t, d, intents.OutcomeCommitted, "")
	}},
	{name: "commit after lease expiry", run: func(t *testing.T, w *protoWire) {
		w.watchNotices("a")
		g := w.send("a", fmtProposeL, "a", 200, "doc.title")
		mustOutcome(t, g, intents.OutcomeGranted, "")
		w.notice("a", intents.NoticeLeaseExpired, func(n *intents.Notice) bool { return n.Txn == g.Txn })
		d := w.send("a", fmtCommit, "a", g.Txn, g.Fence, "doc.title", `"late"`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonFenced) // SPEC §4: a commit after expiry is fenced
		mustDetail(t, d, "lease expired")
		w.mustValue("doc.title", "")
	}},
	{name: "lease warning and expiry on clock jumps", opts: Options{Core: CoreOptions{Engine: engine.Config{LeaseWarning: 5 * time.Minute}}}, run: func(t *testing.T, w *protoWire) {
		// A 10m lease warned 5m before its end: the first jump passes the
		// warning with minutes to spare, the second the end.
		w.watchNotices("a")
		g := w.send("a", fmtProposeL, "a", 600000, "doc.title")
		mustOutcome(t, g, intents.OutcomeGranted, "")
		w.clock.Advance(5*time.Minute + time.Second)
		w.poke()
		w.notice("a", intents.NoticeLeaseExpiring, func(n *intents.Notice) bool { return n.Txn == g.Txn })
		w.clock.Advance(5 * time.Minute)
		w.poke()
		w.notice("a", intents.NoticeLeaseExpired, func(n *intents.Notice) bool { return n.Txn == g.Txn })
		d := w.send("a", fmtCommit, "a", g.Txn, g.Fence, "doc.title", `"late"`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonFenced) // SPEC §4: a commit after expiry is fenced
		mustDetail(t, d, "lease expired")
	}},
	{name: "precondition_failed names the expression", run: func(t *testing.T, w *protoWire) {
		w.send("setup", fmtSet, "setup", "tasks.t1", `{"owner":"ann","est":3}`)
		d := w.send("b", `{"id":%q,"agent":"b","kind":"apply","pre":["state.tasks.t1.est < 3"],"writes":[{"path":"tasks.t1.owner","op":"set","value":"b"}]}`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonPreconditionFailed)
		mustDetail(t, d, "pre[0]", "`state.tasks.t1.est < 3`", "tasks.t1.est = 3")
		// A missing path reads as nil at any depth, never an error.
		d = w.send("b", `{"id":%q,"agent":"b","kind":"apply","pre":["state.tasks.t9.owner == nil"],"writes":[{"path":"tasks.t9.owner","op":"set","value":"b"}]}`)
		mustOutcome(t, d, intents.OutcomeApplied, "")
		w.mustValue("tasks.t1.owner", `"ann"`)
	}},
	{name: "postcondition_failed", run: func(t *testing.T, w *protoWire) {
		w.send("setup", fmtSet, "setup", "doc.n", `1`)
		d := w.send("a", `{"id":%q,"agent":"a","kind":"apply","post":["state.doc.n <= 1"],"writes":[{"path":"doc.n","op":"incr"},{"path":"doc.m","op":"set","value":1}]}`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonPostconditionFailed)
		mustDetail(t, d, "post[0]", "`state.doc.n <= 1`", "doc.n = 2")
		w.mustValue("doc.n", `1`) // no partial write
		w.mustValue("doc.m", "")
	}},
	{name: "stale_read", run: func(t *testing.T, w *protoWire) {
		w.send("w", fmtSet, "w", "doc.x", `1`)
		w.send("w", fmtSet, "w", "doc.x", `2`)
		const stale = `{"id":%q,"agent":"r","kind":"apply","reads":[{"path":"doc.x","version":%d}],"writes":[{"path":"out.r","op":"set","value":1}]}`
		d := w.send("r", stale, 1)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonStaleRead)
		mustConflict(t, d, "doc.x", intents.ConflictStale, "", "")
		mustVersion(t, d, "doc.x", 2)
		// Retrying with the versions given needs no re-read.
		d = w.send("r", stale, d.Versions["doc.x"])
		mustOutcome(t, d, intents.OutcomeApplied, "")
	}},
	{name: "wait queued then decided when the holder commits", run: func(t *testing.T, w *protoWire) {
		w.watchNotices("a")
		g := w.grant("a", "doc.y")
		q := w.send("b", fmtWaitSet, "b", "doc.y", `"b"`)
		mustOutcome(t, q, intents.OutcomeQueued, "")
		mustConflict(t, q, "doc.y", intents.ConflictWriteWrite, g.Txn, "a")
		n := w.notice("a", intents.NoticeWaiting, nil)
		if n.Notice.Txn != g.Txn || n.Notice.Intent != q.Intent || n.Notice.From != "b" {
			t.Fatalf("waiting notice %+v for %s waiting on %s", n.Notice, q.Intent, g.Txn)
		}
		c := w.send("a", fmtCommit, "a", g.Txn, g.Fence, "doc.y", `"a"`)
		mustOutcome(t, c, intents.OutcomeCommitted, "")
		d := w.next("b")
		if d.Intent != q.Intent {
			t.Fatalf("final decision for %s, want %s", d.Intent, q.Intent)
		}
		mustOutcome(t, d, intents.OutcomeApplied, "")
		w.mustValue("doc.y", `"b"`)
	}},
	{name: "wait_timeout", run: func(t *testing.T, w *protoWire) {
		g := w.grant("a", "doc.y")
		q := w.send("b", `{"id":%q,"agent":"b","kind":"apply","on_conflict":"wait","wait_ms":200,"writes":[{"path":"doc.y","op":"set","value":1}]}`)
		mustOutcome(t, q, intents.OutcomeQueued, "")
		d := w.next("b")
		if d.Intent != q.Intent {
			t.Fatalf("final decision for %s, want %s", d.Intent, q.Intent)
		}
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonWaitTimeout)
		mustConflict(t, d, "doc.y", intents.ConflictWriteWrite, g.Txn, "a")
		w.mustValue("doc.y", "")
	}},
	{name: "escalated then arbiter_rejected", opts: Options{Core: CoreOptions{Engine: engine.Config{ArbiterTimeout: 300 * time.Millisecond}}}, run: func(t *testing.T, w *protoWire) {
		g := w.grant("a", "doc.sec")
		e := w.send("b", `{"id":%q,"agent":"b","kind":"apply","on_conflict":"escalate","writes":[{"path":"doc.sec","op":"set","value":1}]}`)
		mustOutcome(t, e, intents.OutcomeEscalated, "")
		mustConflict(t, e, "doc.sec", intents.ConflictWriteWrite, g.Txn, "a")
		d := w.next("b")
		if d.Intent != e.Intent {
			t.Fatalf("final decision for %s, want %s", d.Intent, e.Intent)
		}
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonArbiterRejected)
		w.mustValue("doc.sec", "")
	}},
	{name: "deadlock", run: func(t *testing.T, w *protoWire) {
		w.grant("a", "doc.one")
		g2 := w.grant("b", "doc.two")
		q := w.send("a", fmtWaitSet, "a", "doc.two", `"a"`)
		mustOutcome(t, q, intents.OutcomeQueued, "")
		mustConflict(t, q, "doc.two", intents.ConflictWriteWrite, g2.Txn, "b")
		d := w.send("b", fmtWaitSet, "b", "doc.one", `"b"`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonDeadlock)
		mustDetail(t, d, "deadlock")
	}},
	{name: "rate_limited", opts: Options{Core: CoreOptions{Engine: engine.Config{MaxTxnsPerAgent: 2}}}, run: func(t *testing.T, w *protoWire) {
		w.grant("a", "doc.a1")
		g := w.grant("a", "doc.a2")
		d := w.send("a", fmtPropose, "a", "doc.a3")
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonRateLimited)
		w.grant("b", "doc.b1") // per agent
		mustOutcome(t, w.send("a", fmtAbort, "a", g.Txn, g.Fence), intents.OutcomeAborted, "")
		w.grant("a", "doc.a3") // a freed slot
	}},
	{name: "disjoint edits merged_with", run: func(t *testing.T, w *protoWire) {
		g := w.grant("a", "report.s1.intro")
		d := w.send("b", fmtSet, "b", "report.s1.body", `"text"`)
		mustOutcome(t, d, intents.OutcomeApplied, "")
		if !slices.Equal(d.MergedWith, []string{g.Txn}) {
			t.Fatalf("merged_with %v, want [%s]", d.MergedWith, g.Txn)
		}
		c := w.send("a", fmtCommit, "a", g.Txn, g.Fence, "report.s1.intro", `"hi"`)
		mustOutcome(t, c, intents.OutcomeCommitted, "")
		if !slices.Contains(c.MergedWith, d.Intent) {
			t.Fatalf("commit merged_with %v lacks %s", c.MergedWith, d.Intent)
		}
		w.mustValue("report.s1", `{"body":"text","intro":"hi"}`)
	}},
	{name: "commutative incr merge", run: func(t *testing.T, w *protoWire) {
		w.send("setup", fmtSet, "setup", "stats.views", `10`)
		g := w.send("a", `{"id":%q,"agent":"a","kind":"propose","writes":[{"path":"stats.views","op":"incr"}]}`)
		mustOutcome(t, g, intents.OutcomeGranted, "")
		g2 := w.send("b", `{"id":%q,"agent":"b","kind":"propose","writes":[{"path":"stats.views","op":"incr"}]}`)
		mustOutcome(t, g2, intents.OutcomeGranted, "")
		d := w.send("c", `{"id":%q,"agent":"c","kind":"apply","writes":[{"path":"stats.views","op":"incr","value":5}]}`)
		mustOutcome(t, d, intents.OutcomeApplied, "")
		if !slices.Contains(d.MergedWith, g.Txn) || !slices.Contains(d.MergedWith, g2.Txn) {
			t.Fatalf("merged_with %v, want %s and %s", d.MergedWith, g.Txn, g2.Txn)
		}
		const commitIncr = `{"id":%q,"agent":%q,"kind":"commit","txn":%q,"fence":%d,"writes":[{"path":"stats.views","op":"incr","value":%d}]}`
		mustOutcome(t, w.send("b", commitIncr, "b", g2.Txn, g2.Fence, 1), intents.OutcomeCommitted, "")
		mustOutcome(t, w.send("a", commitIncr, "a", g.Txn, g.Fence, 2), intents.OutcomeCommitted, "")
		w.mustValue("stats.views", `18`)
		// A set on a path being incremented still conflicts.
		w.grant("a", "stats.other")
		g3 := w.send("a", `{"id":%q,"agent":"a","kind":"propose","writes":[{"path":"stats.views","op":"incr"}]}`)
		d = w.send("d", fmtSet, "d", "stats.views", `0`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonConflict)
		mustConflict(t, d, "stats.views", intents.ConflictWriteWrite, g3.Txn, "a")
	}},
	{name: "read-write conflict", run: func(t *testing.T, w *protoWire) {
		w.send("setup", fmtSet, "setup", "cfg.limit", `3`)
		g := w.send("r", `{"id":%q,"agent":"r","kind":"propose","reads":[{"path":"cfg.limit"}],"writes":[{"path":"out.r","op":"set"}]}`)
		mustOutcome(t, g, intents.OutcomeGranted, "")
		d := w.send("w", fmtSet, "w", "cfg.limit", `4`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonConflict)
		mustConflict(t, d, "cfg.limit", intents.ConflictReadWrite, g.Txn, "r")
		mustVersion(t, d, "cfg.limit", 1)
		// Read-read never conflicts.
		d = w.send("w", `{"id":%q,"agent":"w","kind":"apply","reads":[{"path":"cfg.limit"}],"writes":[{"path":"log.w","op":"set","value":1}]}`)
		mustOutcome(t, d, intents.OutcomeApplied, "")
	}},
	{name: "write-read conflict", run: func(t *testing.T, w *protoWire) {
		g := w.grant("w1", "task.t1.owner")
		d := w.send("r", `{"id":%q,"agent":"r","kind":"apply","reads":[{"path":"task.t1.owner"}],"writes":[{"path":"out.r","op":"set","value":1}]}`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonConflict)
		mustConflict(t, d, "task.t1.owner", intents.ConflictWriteRead, g.Txn, "w1")
		// A read only through a precondition counts too.
		d = w.send("r", `{"id":%q,"agent":"r","kind":"apply","pre":["state.task.t1.owner == nil"],"writes":[{"path":"out.r","op":"set","value":1}]}`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonConflict)
		mustConflict(t, d, "task.t1.owner", intents.ConflictWriteRead, g.Txn, "w1")
	}},
}

// protoEdges covers identity, invalid input, odd subjects and idempotency.
var protoEdges = []protoCase{
	{name: "unauthorized answered on the subject agent", run: func(t *testing.T, w *protoWire) {
		w.decisions("a")
		id, forged := protoIntent(fmtSet, "a", "doc.y", `"forged"`)
		w.publish("b", forged)
		d := w.next("b")
		if d.Intent != id {
			t.Fatalf("decision for %s, want %s", d.Intent, id)
		}
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonUnauthorized)
		mustDetail(t, d, `"a"`, `"b"`)
		// a was told nothing, and the id is still a's to use.
		w.publish("a", fmt.Sprintf(fmtSet, id, "a", "doc.y", `"genuine"`))
		d = w.next("a")
		if d.Intent != id {
			t.Fatalf("first decision for a is for %s, want %s", d.Intent, id)
		}
		mustOutcome(t, d, intents.OutcomeApplied, "")
		w.mustValue("doc.y", `"genuine"`)
		// Only the holder may commit its transaction.
		g := w.grant("a", "doc.z")
		d = w.send("b", fmtCommit, "b", g.Txn, g.Fence, "doc.z", `"b"`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonUnauthorized)
		mustDetail(t, d, g.Txn, "agent a")
		mustOutcome(t, w.send("a", fmtCommit, "a", g.Txn, g.Fence, "doc.z", `"a"`), intents.OutcomeCommitted, "")
	}},
	{name: "invalid input and the consumer goes on", run: func(t *testing.T, w *protoWire) {
		w.publish("a", `this is not JSON {`)
		d := w.next("a")
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonInvalid)
		if d.Intent != "" {
			t.Fatalf("garbage decided as intent %q", d.Intent)
		}
		mustDetail(t, d, "not JSON")
		// A schema violation: an unknown field. The id is read and named.
		d = w.send("a", `{"id":%q,"agent":"a","kind":"apply","colour":"red","writes":[{"path":"doc.x","op":"set","value":1}]}`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonInvalid)
		mustDetail(t, d, "colour", "unknown field")
		d = w.send("a", `{"id":%q,"agent":"a","kind":"apply","writes":[{"path":"doc..x","op":"set","value":1}]}`)
		mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonInvalid)
		mustDetail(t, d, "writes[0].path")
		mustOutcome(t, w.send("a", fmtSet, "a", "doc.x", `1`), intents.OutcomeApplied, "")
		w.mustValue("doc.x", `1`)
	}},
	{name: "two tokens after intents are answered to no one", run: func(t *testing.T, w *protoWire) {
		all := w.subscribe(protoDecisions + ">")
		id, body := protoIntent(fmtSet, "a", "doc.ab", `1`)
		w.publish("a.b", body)
		d := w.send("a", fmtSet, "a", "doc.x", `1`)
		mustOutcome(t, d, intents.OutcomeApplied, "")
		// Decisions come in stream order: if a.b had been answered on any
		// decision subject, that answer would be first.
		m, err := all.NextMsg(protoTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(protoHdrIntent) != d.Intent {
			t.Fatalf("first decision on %s> is %s: %s", protoDecisions, m.Subject, m.Data)
		}
		w.mustValue("doc.ab", "")
		// It is recorded nevertheless (SPEC §7), as invalid.
		var lg protoLog
		w.api("log.query", `{"type":"decision"}`, &lg)
		found := false
		for _, ev := range lg.Events {
			found = found || (ev.Decision.Reason == intents.ReasonInvalid && strings.Contains(ev.Decision.Detail, `"a.b"`))
		}
		if !found {
			t.Fatalf("no invalid decision for %s on a.b in the log: %d events", id, len(lg.Events))
		}
	}},
	{name: "duplicate intent id", run: func(t *testing.T, w *protoWire) {
		id, body := protoIntent(fmtIncr, "a", "ctr.n")
		msg := func(msgID string) *nats.Msg {
			m := nats.NewMsg(protoIntents + "a")
			m.Data = []byte(body)
			if msgID != "" {
				m.Header.Set(protoHdrMsgID, msgID)
			}
			return m
		}
		w.publishMsg(msg(id))
		first := w.next("a")
		mustOutcome(t, first, intents.OutcomeApplied, "")
		for _, msgID := range []string{id + "-again", ""} {
			w.publishMsg(msg(msgID))
			d := w.next("a")
			if !d.Duplicate || d.Intent != id || d.Outcome != first.Outcome || d.Rev != first.Rev {
				t.Fatalf("resent with %s=%q: %+v, want a duplicate of %+v", protoHdrMsgID, msgID, d, first)
			}
		}
		// The same Nats-Msg-Id: JetStream drops it, so no decision at all —
		// the next decision is the next intent's.
		js, err := jetstream.New(w.nc)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := js.PublishMsg(context.Background(), msg(id))
		if err != nil || !ack.Duplicate {
			t.Fatalf("publish with the same %s: ack %+v, %v", protoHdrMsgID, ack, err)
		}
		mustOutcome(t, w.send("a", fmtSet, "a", "ctr.done", `true`), intents.OutcomeApplied, "")
		st := w.state("ctr.n")
		if v := st.Values["ctr.n"]; string(v.Value) != "1" || v.Version != 1 || v.ModRev != first.Rev {
			t.Fatalf("ctr.n after one application: %+v", v)
		}
		var lg protoLog
		w.api("log.query", `{"path":"ctr.n","type":"change"}`, &lg)
		if len(lg.Events) != 1 {
			t.Fatalf("%d changes of ctr.n in the log, want 1", len(lg.Events))
		}
	}},
}

func runProtoCases(t *testing.T, cases []protoCase) {
	runProtoCasesOn(t, cases, false)
}

// runProtoCasesOn runs each case on a fresh coordinator, by the intents
// stream or (api) by request/reply.
func runProtoCasesOn(t *testing.T, cases []protoCase, api bool) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newProtoWire(t, c.opts)
			w.viaAPI = api
			c.run(t, w)
		})
	}
}

// The outcomes over both paths of SPEC §6: the intents stream and the main
// path, request/reply.
func TestProtocolOutcomes(t *testing.T) {
	t.Run("stream", func(t *testing.T) { runProtoCasesOn(t, protoOutcomes, false) })
	t.Run("api", func(t *testing.T) { runProtoCasesOn(t, protoOutcomes, true) })
}

func TestProtocolEdges(t *testing.T) { runProtoCases(t, protoEdges) }

// padIntent is an apply of big.x padded through meta to exactly size bytes.
func padIntent(t *testing.T, size int) (id, body string) {
	const format = `{"id":%q,"agent":"a","kind":"apply","meta":{"pad":%q},"writes":[{"path":"big.x","op":"set","value":1}]}`
	_, probe := protoIntent(format, "")
	id, body = protoIntent(format, strings.Repeat("x", size-len(probe)))
	if len(body) != size {
		t.Fatalf("padded to %d bytes, want %d", len(body), size)
	}
	return id, body
}

// TestProtocolOversize sends intents around the 1 MiB limit of SPEC §2 on a
// server whose max_payload lets them reach JetStream.
func TestProtocolOversize(t *testing.T) {
	w := newProtoWireOn(t, natstest.Run(t, func(o *server.Options) { o.MaxPayload = 4 << 20 }), Options{})
	js, err := jetstream.New(w.nc)
	if err != nil {
		t.Fatal(err)
	}
	// 1 MiB + 1 on the intents subject with plain NATS, then a valid intent:
	// the stream takes messages up to coordinator.MaxWireMessage, so the big
	// one reaches the coordinator and gets its invalid decision, is never
	// applied, and the consumer goes on.
	bigID, big := padIntent(t, intents.MaxIntentSize+1)
	w.publish("a", big)
	id, body := protoIntent(fmtSet, "a", "doc.x", `1`)
	w.publish("a", body)
	d := w.next("a")
	if d.Intent != bigID {
		t.Fatalf("decision for %s, want the oversized %s first", d.Intent, bigID)
	}
	mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonInvalid)
	mustDetail(t, d, "1048576")
	if d = w.next("a"); d.Intent != id {
		t.Fatalf("decision for %s, want %s", d.Intent, id)
	}
	mustOutcome(t, d, intents.OutcomeApplied, "")
	w.mustValue("big.x", "")
	// The same intent again through a JetStream publish: stored, and answered
	// with its recorded decision.
	if _, err := js.Publish(context.Background(), protoIntents+"a", []byte(big)); err != nil {
		t.Fatalf("JetStream refuses a 1 MiB+1 intent: %v", err)
	}
	if d = w.next("a"); d.Intent != bigID || !d.Duplicate || d.Reason != intents.ReasonInvalid {
		t.Fatalf("the oversized intent again: %+v, want its invalid decision as a duplicate", d)
	}
	// Through the API another one reaches the coordinator, which answers
	// invalid.
	_, big2 := padIntent(t, intents.MaxIntentSize+1)
	d = w.submit(big2, -1)
	mustOutcome(t, d, intents.OutcomeRejected, intents.ReasonInvalid)
	mustDetail(t, d, "1048576")
	w.mustValue("big.x", "")
	// An intent of exactly 1 MiB is within the limit.
	_, exact := padIntent(t, intents.MaxIntentSize)
	w.publish("a", exact)
	mustOutcome(t, w.next("a"), intents.OutcomeApplied, "")
	w.mustValue("big.x", `1`)
}

// TestProtocolOversizeMsgID: an intent of exactly 1 MiB is within SPEC §2
// also when it carries the Nats-Msg-Id header SPEC §6 dedups on.
func TestProtocolOversizeMsgID(t *testing.T) {
	w := newProtoWireOn(t, natstest.Run(t, func(o *server.Options) { o.MaxPayload = 4 << 20 }), Options{})
	js, err := jetstream.New(w.nc)
	if err != nil {
		t.Fatal(err)
	}
	id, exact := padIntent(t, intents.MaxIntentSize)
	m := nats.NewMsg(protoIntents + "a")
	m.Data = []byte(exact)
	m.Header.Set(protoHdrMsgID, id)
	w.decisions("a")
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatalf("a 1 MiB intent with its %s header is refused: %v", protoHdrMsgID, err)
	}
	mustOutcome(t, w.next("a"), intents.OutcomeApplied, "")
}

// TestProtocolAPI covers the request/reply endpoints of SPEC §6.
func TestProtocolAPI(t *testing.T) {
	t.Run("submit final and interim", func(t *testing.T) {
		t.Parallel()
		w := newProtoWire(t, Options{})
		w.decisions("a")
		w.decisions("c")
		live := w.subscribe(protoEvents + "decision")
		d := w.submit(fmt.Sprintf(fmtSet, ulid.Make().String(), "a", "doc.x", `1`), -1)
		mustOutcome(t, d, intents.OutcomeApplied, "")
		// A decision made through the API is the reply, and goes out live
		// on the feed (v2: it is not stored on the agent's decisions).
		ev := natstest.Next[intents.Event](t, live)
		if d2 := ev.Decision; d2 == nil || d2.Intent != d.Intent || d2.Outcome != d.Outcome || d2.Rev != d.Rev {
			t.Fatalf("on the live feed %+v, the API said %+v", ev, d)
		}
		w.watchNotices("a")
		g := w.grant("a", "doc.z")
		// A short wait: the interim decision at the deadline.
		id1, body1 := protoIntent(fmtWaitSet, "b", "doc.z", `1`)
		d = w.submit(body1, 50)
		mustOutcome(t, d, intents.OutcomeQueued, "")
		if d.Intent != id1 {
			t.Fatalf("submit answered for %s, want %s", d.Intent, id1)
		}
		mustConflict(t, d, "doc.z", intents.ConflictWriteWrite, g.Txn, "a")
		// A long wait: the final decision once the holder commits.
		id2, body2 := protoIntent(fmtWaitSet, "c", "doc.z", `2`)
		type result struct {
			d   *intents.Decision
			err error
		}
		reply := make(chan result, 1)
		go func() {
			d, err := w.trySubmit(body2, 8000)
			reply <- result{d, err}
		}()
		w.notice("a", intents.NoticeWaiting, func(n *intents.Notice) bool { return n.Intent == id2 })
		mustOutcome(t, w.send("a", fmtCommit, "a", g.Txn, g.Fence, "doc.z", `0`), intents.OutcomeCommitted, "")
		r := <-reply
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.d.Intent != id2 {
			t.Fatalf("submit answered for %s, want %s", r.d.Intent, id2)
		}
		mustOutcome(t, r.d, intents.OutcomeApplied, "")
		w.mustValue("doc.z", `2`) // b's waiter landed first, then c's
		// The decisions of a submit are its replies, not stored on the
		// agent's decisions (SPEC §6 v2): the first there is that of the
		// intent c publishes next (send checks it is its own).
		mustOutcome(t, w.send("c", fmtSet, "c", "doc.q", `1`), intents.OutcomeApplied, "")
	})

	t.Run("state.get", func(t *testing.T) {
		t.Parallel()
		w := newProtoWire(t, Options{})
		mustOutcome(t, w.send("a", fmtSet, "a", "report.title", `"Q3"`), intents.OutcomeApplied, "")
		d2 := w.send("a", fmtSet, "a", "report.title", `"Q4"`)
		st := w.state("report.title", "report", "report.none", "nothing.at.all")
		if st.Rev != d2.Rev {
			t.Fatalf("rev %d, want %d", st.Rev, d2.Rev)
		}
		if v := st.Values["report.title"]; !v.Exists || string(v.Value) != `"Q4"` || v.Version != 2 || v.ModRev != d2.Rev {
			t.Fatalf("report.title: %+v", v)
		}
		if v := st.Values["report"]; !v.Exists || v.Version != 2 || v.ModRev != d2.Rev {
			t.Fatalf("report: %+v", v)
		}
		for _, p := range []string{"report.none", "nothing.at.all"} {
			if v, ok := st.Values[p]; !ok || v.Exists || v.Version != 0 || v.Value != nil {
				t.Fatalf("absent %s: %+v (present in reply: %v)", p, v, ok)
			}
		}
		// On the wire an absent path says so explicitly.
		m := w.request("state.get", []byte(`{"paths":["report.none"]}`), nil)
		if !bytes.Contains(m.Data, []byte(`"report.none":{"exists":false,"version":0}`)) {
			t.Fatalf("absent path on the wire: %s", m.Data)
		}
	})

	t.Run("txn.list filters", func(t *testing.T) {
		t.Parallel()
		w := newProtoWire(t, Options{})
		ga := w.grant("a", "doc.a")
		gb := w.send("b", `{"id":%q,"agent":"b","kind":"propose","reads":[{"path":"other.r"}],"writes":[{"path":"doc.b","op":"set"}]}`)
		mustOutcome(t, gb, intents.OutcomeGranted, "")
		list := func(filter string) []string {
			var txns protoTxns
			w.api("txn.list", filter, &txns)
			var ids []string
			for _, x := range txns.Txns {
				ids = append(ids, x.Txn)
			}
			slices.Sort(ids)
			return ids
		}
		both := []string{ga.Txn, gb.Txn}
		slices.Sort(both)
		for filter, want := range map[string][]string{
			``:                             both,
			`{}`:                           both,
			`{"agent":"a"}`:                {ga.Txn},
			`{"agent":"b"}`:                {gb.Txn},
			`{"path":"doc.b"}`:             {gb.Txn},
			`{"path":"doc"}`:               both,
			`{"path":"doc.a.deep"}`:        {ga.Txn},
			`{"path":"other.r"}`:           {gb.Txn}, // by a read
			`{"agent":"a","path":"doc.b"}`: nil,
			`{"path":"nowhere"}`:           nil,
		} {
			if got := list(filter); !slices.Equal(got, want) {
				t.Errorf("txn.list %s = %v, want %v", filter, got, want)
			}
		}
		var txns protoTxns
		w.api("txn.list", `{"agent":"a"}`, &txns)
		x := txns.Txns[0]
		if x.Agent != "a" || x.Fence != ga.Fence || !x.LeaseExpires.Equal(*ga.LeaseExpires) ||
			len(x.Writes) != 1 || x.Writes[0].Path != "doc.a" || x.Writes[0].Op != intents.OpSet {
			t.Fatalf("txn %+v for grant %+v", x, ga)
		}
		m := w.request("txn.list", []byte(`{"path":"nowhere"}`), nil)
		if !bytes.Contains(m.Data, []byte(`"txns":[]`)) {
			t.Fatalf("empty txn.list is %s, want an empty array", m.Data)
		}
	})

	t.Run("log.query", func(t *testing.T) {
		t.Parallel()
		w := newProtoWire(t, Options{})
		var ids []string
		for i := range 3 {
			ids = append(ids, w.send("pg", fmtSet, "pg", "doc.p", fmt.Sprint(i)).Intent)
		}
		w.send("other", fmtSet, "other", "doc.q", `1`)
		var lg protoLog
		w.api("log.query", `{"agent":"pg","type":"decision"}`, &lg)
		if len(lg.Events) != 3 || lg.Next != 0 {
			t.Fatalf("decisions of pg: %d events, next %d", len(lg.Events), lg.Next)
		}
		for i, ev := range lg.Events {
			if ev.Type != intents.EventDecision || ev.Agent != "pg" || ev.Decision == nil || ev.Decision.Intent != ids[i] {
				t.Fatalf("event %d: %+v", i, ev)
			}
		}
		w.api("log.query", `{"path":"doc.p","type":"change"}`, &lg)
		if len(lg.Events) != 3 {
			t.Fatalf("changes of doc.p: %d", len(lg.Events))
		}
		for _, ev := range lg.Events {
			if ev.Change == nil || len(ev.Change.Writes) != 1 || ev.Change.Writes[0].Path != "doc.p" {
				t.Fatalf("not a change of doc.p: %+v", ev)
			}
		}
		// Paging: two, then from next the last one, then no next.
		w.api("log.query", `{"agent":"pg","type":"decision","limit":2}`, &lg)
		if len(lg.Events) != 2 || lg.Next == 0 || lg.Events[1].Decision.Intent != ids[1] {
			t.Fatalf("first page: %d events, next %d", len(lg.Events), lg.Next)
		}
		w.api("log.query", fmt.Sprintf(`{"agent":"pg","type":"decision","limit":2,"from":%d}`, lg.Next), &lg)
		if len(lg.Events) != 1 || lg.Next != 0 || lg.Events[0].Decision.Intent != ids[2] {
			t.Fatalf("second page: %d events, next %d", len(lg.Events), lg.Next)
		}
		// One intent's events: received, its change, decided.
		lg = protoLog{} // no field of an event before stays
		w.api("log.query", fmt.Sprintf(`{"intent":%q}`, ids[1]), &lg)
		var types []intents.EventType
		for i, ev := range lg.Events {
			if ev.Intent != ids[1] || i > 0 && ev.Seq <= lg.Events[i-1].Seq {
				t.Fatalf("intent %s: event %d is %+v", ids[1], i, ev)
			}
			types = append(types, ev.Type)
		}
		if want := []intents.EventType{intents.EventIntent, intents.EventChange, intents.EventDecision}; !slices.Equal(types, want) || lg.Next != 0 {
			t.Fatalf("intent %s: events %v next %d, want %v", ids[1], types, lg.Next, want)
		}
		lg = protoLog{}
		w.api("log.query", fmt.Sprintf(`{"intent":%q,"type":"change","path":"doc.p"}`, ids[2]), &lg)
		if len(lg.Events) != 1 || lg.Events[0].Change == nil || lg.Events[0].Intent != ids[2] {
			t.Fatalf("the change of intent %s: %+v", ids[2], lg.Events)
		}
		lg = protoLog{}
		w.api("log.query", fmt.Sprintf(`{"intent":%q}`, ulid.Make()), &lg)
		if len(lg.Events) != 0 {
			t.Fatalf("an unknown intent's events: %+v", lg.Events)
		}
		// An intent that is not an intent id is invalid, the reply naming
		// the field and the value.
		for _, id := range []string{"nope", strings.ToLower(ids[0])} {
			m := w.request("log.query", []byte(fmt.Sprintf(`{"intent":%q}`, id)), nil)
			desc := m.Header.Get("Nats-Service-Error")
			if m.Header.Get(protoHdrErrCode) != string(intents.ReasonInvalid) || !strings.Contains(desc, fmt.Sprintf("intent %q", id)) {
				t.Fatalf("log.query of intent %q: code %q, %q", id, m.Header.Get(protoHdrErrCode), desc)
			}
		}
	})

	t.Run("bad requests are invalid", func(t *testing.T) {
		t.Parallel()
		w := newProtoWire(t, Options{})
		waitSoon := nats.Header{}
		waitSoon.Set(protoHdrWait, "soon")
		var bugs []string
		for _, c := range []struct {
			endpoint, body string
			hdr            nats.Header
			bug            string // a known bug, reported: the case is skipped while it stands
		}{
			{endpoint: "state.get", body: `{"paths":["doc.x"],"colour":"red"}`},
			{endpoint: "state.get", body: `{"paths":["doc..x"]}`},
			{endpoint: "state.get", body: `not json`},
			{endpoint: "txn.list", body: `{"colour":"red"}`},
			{endpoint: "log.query", body: `{"colour":"red"}`},
			{endpoint: "log.query", body: `{"limit":"ten"}`},
			{endpoint: "submit", body: fmt.Sprintf(fmtSet, ulid.Make().String(), "a", "doc.x", `1`), hdr: waitSoon},
			{endpoint: "log.query", body: `{"path":"doc..x"}`},
			{endpoint: "log.query", body: `{"type":"nope"}`},
			{endpoint: "log.query", body: `{"agent":"a.b"}`},
			{endpoint: "log.query", body: `{"intent":"01JPA3Z4Y5X6W7V8T9S0R1Q2PU"}`},
			{endpoint: "log.query", body: `{"intent":7}`},
			{endpoint: "txn.list", body: `{"path":"doc..x"}`},
			{endpoint: "txn.list", body: `{"agent":"a b"}`},
		} {
			m := w.request(c.endpoint, []byte(c.body), c.hdr)
			code := m.Header.Get(protoHdrErrCode)
			switch {
			case code == string(intents.ReasonInvalid):
			case c.bug != "":
				bugs = append(bugs, fmt.Sprintf("%s (%s %s: code %q, reply %s)", c.bug, c.endpoint, c.body, code, m.Data))
			default:
				t.Errorf("%s %s: code %q, want invalid; reply %s", c.endpoint, c.body, code, m.Data)
			}
		}
		if len(bugs) > 0 {
			t.Errorf("known bugs:\n%s", strings.Join(bugs, "\n"))
		}
	})
}

// TestProtocolEventFeed: committed writes appear on
// coagent.events.change.<board>, the changes of a commit group in one
// message, so a board can be followed and a subtree found in it; each
// message is chained to the revisions before it.
func TestProtocolEventFeed(t *testing.T) {
	w := newProtoWire(t, Options{})
	board := w.subscribe(protoEvents + "change.report")
	all := w.subscribe(protoEvents + "change.>")
	other := w.send("a", fmtSet, "a", "reports.x", `1`) // not in the board report
	d := w.send("a", fmtSet, "a", "report.sections.intro", `"hello"`)
	m, err := all.NextMsg(protoTimeout)
	if err != nil || m.Subject != protoEvents+"change.reports" {
		t.Fatalf("the whole feed's first message: %v, %v", m, err)
	}
	for _, sub := range []*nats.Subscription{board, all} {
		m, err := sub.NextMsg(protoTimeout)
		if err != nil {
			t.Fatalf("%s: %v", sub.Subject, err)
		}
		if m.Subject != protoEvents+"change.report" {
			t.Fatalf("%s got %s", sub.Subject, m.Subject)
		}
		var msg intents.FeedMessage
		if err := json.Unmarshal(m.Data, &msg); err != nil || len(msg.Changes) != 1 {
			t.Fatalf("feed message %s: %v", m.Data, err)
		}
		// Chained to the feed's last change, on any board and on its own.
		if msg.Prev != other.Rev || msg.BoardPrev != 0 {
			t.Fatalf("feed message %s: chained to %d and, on its board, %d; want %d and none", m.Data, msg.Prev, msg.BoardPrev, other.Rev)
		}
		ev := msg.Changes[0]
		if ev.Type != intents.EventChange || ev.Seq != d.Rev || ev.Intent != d.Intent ||
			len(ev.Change.Writes) != 1 || ev.Change.Writes[0].Path != "report.sections.intro" ||
			string(ev.Change.Writes[0].Value) != `"hello"` || ev.Change.Writes[0].NewVersion != 1 {
			t.Fatalf("change event %s", m.Data)
		}
	}
}

// TestProtocolStreams checks the streams of SPEC §6 and that Start reports a
// stream with other settings instead of changing it.
func TestProtocolStreams(t *testing.T) {
	t.Run("created", func(t *testing.T) {
		t.Parallel()
		w := newProtoWire(t, Options{})
		js, err := jetstream.New(w.nc)
		if err != nil {
			t.Fatal(err)
		}
		info := func(name string) jetstream.StreamConfig {
			st, err := js.Stream(context.Background(), name)
			if err != nil {
				t.Fatalf("stream %s: %v", name, err)
			}
			return st.CachedInfo().Config
		}
		in := info("COAGENT_INTENTS")
		if !slices.Equal(in.Subjects, []string{"coagent.intents.>"}) || in.Retention != jetstream.InterestPolicy ||
			in.Storage != jetstream.FileStorage || in.Duplicates <= 0 {
			t.Errorf("COAGENT_INTENTS: %+v", in)
		}
		cons, err := js.Consumer(context.Background(), "COAGENT_INTENTS", "coordinator")
		if err != nil || cons.CachedInfo().Config.AckPolicy != jetstream.AckAllPolicy {
			t.Errorf("the coordinator's consumer on COAGENT_INTENTS: %v, want one that acknowledges all", err)
		}
		dec := info("COAGENT_DECISIONS")
		if !slices.Equal(dec.Subjects, []string{"coagent.decisions.>"}) || dec.Retention != jetstream.LimitsPolicy || dec.MaxAge <= 0 {
			t.Errorf("COAGENT_DECISIONS: %+v", dec)
		}
		ev := info("COAGENT_EVENTS")
		if !slices.Equal(ev.Subjects, []string{"coagent.events.change.>"}) {
			t.Errorf("COAGENT_EVENTS: %+v", ev)
		}
		arb := info("COAGENT_ARBITER")
		if !slices.Equal(arb.Subjects, []string{"coagent.arbiter.escalations"}) || arb.Retention != jetstream.WorkQueuePolicy {
			t.Errorf("COAGENT_ARBITER: %+v", arb)
		}
		// Decisions are kept: a late subscriber reads them from the stream.
		d := w.send("a", fmtSet, "a", "doc.x", `1`)
		ordered, err := js.OrderedConsumer(context.Background(), "COAGENT_DECISIONS",
			jetstream.OrderedConsumerConfig{FilterSubjects: []string{protoDecisions + "a"}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := ordered.Next(jetstream.FetchMaxWait(protoTimeout))
		if err != nil || m.Headers().Get(protoHdrIntent) != d.Intent {
			t.Fatalf("first decision of a in the stream: %v", err)
		}
	})
	t.Run("mismatch", func(t *testing.T) {
		t.Parallel()
		ns := natstest.Run(t)
		nc := natstest.Connect(t, ns)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "COAGENT_DECISIONS",
			Subjects: []string{"elsewhere.decisions.>"}}); err != nil {
			t.Fatal(err)
		}
		svc, err := Start(context.Background(), nc, t.TempDir(), Options{})
		if err == nil {
			svc.Shutdown(context.Background())
			t.Fatal("Start succeeded over a COAGENT_DECISIONS with other subjects")
		}
		if !errors.Is(err, ErrStreamMismatch) || !strings.Contains(err.Error(), "COAGENT_DECISIONS") {
			t.Fatalf("Start: %v", err)
		}
		st, err := js.Stream(context.Background(), "COAGENT_DECISIONS")
		if err != nil || !slices.Equal(st.CachedInfo().Config.Subjects, []string{"elsewhere.decisions.>"}) {
			t.Fatalf("the stream was changed: %v", err)
		}
	})
}
