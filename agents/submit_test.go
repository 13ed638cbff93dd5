package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// relayPrefix is the subject prefix of the clients that go through a
// relay: their API requests reach the coordinator only as the relay passes
// them on.
const relayPrefix = "relayed"

// relay passes the API requests made under relayPrefix on to the
// coordinator (prefix coagent) and its replies back, as the network
// between an agent and the coordinator would, and can lose a reply on the
// way. It records every submit it passes on, by intent id.
type relay struct {
	nc *nats.Conn

	mu      sync.Mutex
	lose    map[string]int // intent id → how many more of its replies to lose
	submits map[string][]string
	seen    chan string // the intent id of each submit passed on
}

func (w *world) relay() *relay {
	w.t.Helper()
	r := &relay{nc: w.connect(), lose: map[string]int{}, submits: map[string][]string{}, seen: make(chan string, 1024)}
	_, err := r.nc.Subscribe(relayPrefix+".api.>", func(m *nats.Msg) {
		fwd := nats.NewMsg(intents.DefaultPrefix + strings.TrimPrefix(m.Subject, relayPrefix))
		fwd.Data, fwd.Header = m.Data, m.Header
		id := ""
		if strings.HasPrefix(m.Subject, relayPrefix+".api.submit") {
			var in struct{ ID string }
			json.Unmarshal(m.Data, &in)
			id = in.ID
			r.mu.Lock()
			r.submits[id] = append(r.submits[id], m.Header.Get(intents.HeaderWait))
			r.mu.Unlock()
			r.seen <- id
		}
		go func() {
			reply, err := r.nc.RequestMsg(fwd, time.Minute)
			if err != nil {
				return
			}
			r.mu.Lock()
			lost := r.lose[id] > 0
			if lost {
				r.lose[id]--
			}
			r.mu.Unlock()
			if !lost {
				r.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Data: reply.Data, Header: reply.Header})
			}
		}()
	})
	if err != nil {
		w.t.Fatal(err)
	}
	r.nc.Flush()
	return r
}

// loseReplies makes the relay lose the next n replies to intent id.
func (r *relay) loseReplies(id string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lose[id] = n
}

// waits returns the Coagent-Wait-Ms of each submit of intent id passed on.
func (r *relay) waits(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.submits[id]...)
}

// awaitSubmits waits until the relay has passed on n submits of intent id.
func (r *relay) awaitSubmits(t *testing.T, id string, n int) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for len(r.waits(id)) < n {
		select {
		case <-r.seen:
		case <-timeout:
			t.Fatalf("%d submits of %s passed on in 20s, want %d: %v", len(r.waits(id)), id, n, r.waits(id))
		}
	}
}

// TestSubmitResendsALostReply: the reply to a submit is lost after the
// coordinator decided the intent; the client sends the same intent again
// when the request's time is up and gets the recorded decision, marked
// duplicate, and nothing is applied twice.
func TestSubmitResendsALostReply(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 30*time.Second)
	r := w.relay()
	c := w.client("lossy", agents.WithPrefix(relayPrefix), agents.WithResend(300*time.Millisecond))
	in := &intents.Intent{ID: newID(), Kind: intents.KindApply, Writes: []intents.Write{{Path: "n.v", Op: intents.OpIncr}}}
	r.loseReplies(in.ID, 2)
	d, err := c.Submit(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != intents.OutcomeApplied || !d.Duplicate {
		t.Fatalf("decision %+v, want the recorded one marked duplicate", d)
	}
	// Three at least: a reply slower than the resend (a loaded machine,
	// the race detector) makes one more, which changes nothing either.
	if n := len(r.waits(in.ID)); n < 3 {
		t.Fatalf("%d submits of the intent, want 3 (two replies lost)", n)
	}
	st, err := c.Read(ctx, "n.v")
	if err != nil {
		t.Fatal(err)
	}
	if v := st.Values["n.v"]; string(v.Value) != "1" || v.Version != 1 {
		t.Fatalf("n.v = %s (version %d): applied more than once", v.Value, v.Version)
	}
}

// TestSubmitAsksAgainThroughInterim: a waiter queued behind a transaction
// gets its queued decision (the first request asks for the first decision,
// with a wait of 0), then asks again with the same intent, each request
// held by the coordinator for its wait, until the holder ends and the
// request in flight is answered with the final decision. No decision comes
// on the agent's decisions subject: the replies alone carry it.
func TestSubmitAsksAgainThroughInterim(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 60*time.Second)
	r := w.relay()
	holder := w.client("holder")
	queued := make(chan *intents.Decision, 4)
	waiter := w.client("waiter", agents.WithPrefix(relayPrefix), agents.WithResend(400*time.Millisecond),
		agents.WithDecisionHook(func(d *intents.Decision) {
			if !d.Outcome.Final() {
				queued <- d
			}
		}))
	tx, err := holder.Propose(ctx, intents.Propose("hold").Write("doc.y", intents.OpSet))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var applied *intents.Decision
	go func() {
		var err error
		applied, err = waiter.Apply(ctx, intents.Apply("edit").Set("doc.y", "waited").Wait(30*time.Second))
		done <- err
	}()
	var q *intents.Decision
	select {
	case q = <-queued:
	case err := <-done:
		t.Fatalf("the waiter returned before it was queued: %v", err)
	}
	if q.Outcome != intents.OutcomeQueued {
		t.Fatalf("interim decision %+v, want queued", q)
	}
	// Three more requests: each held for its wait, answered queued.
	r.awaitSubmits(t, q.Intent, 4)
	if _, err := tx.Commit(ctx, intents.Apply("hold").Set("doc.y", "held")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if applied.Outcome != intents.OutcomeApplied || applied.Intent != q.Intent {
		t.Fatalf("final decision %+v, want intent %s applied", applied, q.Intent)
	}
	select {
	case d := <-queued:
		t.Fatalf("the hook was given the interim decision again: %+v", d)
	default:
	}
	waits := r.waits(q.Intent)
	if waits[0] != "0" {
		t.Fatalf("first request asked to wait %s ms, want 0 (the first decision at once)", waits[0])
	}
	for i, ms := range waits[1:] {
		if ms != "300" {
			t.Fatalf("request %d after the interim decision asked to wait %s ms, want 300 (the request's 400 less its margin)", i+2, ms)
		}
	}
	st, err := holder.Read(ctx, "doc.y")
	if err != nil {
		t.Fatal(err)
	}
	if v := st.Values["doc.y"]; string(v.Value) != `"waited"` || v.Version != 2 {
		t.Fatalf("doc.y = %s (version %d), want the waiter's write after the holder's", v.Value, v.Version)
	}
}

// logRecords is a slog handler that hands every record to a channel, so a
// test can wait for what the client reports.
type logRecords chan slog.Record

func (h logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h logRecords) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r:
	default:
	}
	return nil
}
func (h logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logRecords) WithGroup(string) slog.Handler      { return h }

// attr returns the value of record r's attribute key.
func attr(r slog.Record, key string) string {
	var v string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// TestSubmitRetriesWhileUnavailable: a coordinator whose submits are all
// taken answers unavailable at once; the client sends the same intent
// again with backoff until there is room, and then gets its decision.
func TestSubmitRetriesWhileUnavailable(t *testing.T) {
	w := newWorld(t, coordinator.Options{MaxSubmits: 1})
	ctx := ctxFor(t, 60*time.Second)
	holder := w.client("holder")
	tx, err := holder.Propose(ctx, intents.Propose("hold").Write("doc.y", intents.OpSet))
	if err != nil {
		t.Fatal(err)
	}
	// A waiter's submit takes the only slot, for as long as it waits.
	nc := w.connect()
	events, err := nc.SubscribeSync(intents.Subjects{}.Events(intents.EventDecision))
	if err != nil {
		t.Fatal(err)
	}
	// Live events go out only to a subscription the server knows of.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waiterID := newID()
	held := nats.NewMsg(intents.Subjects{}.Submit("waiter"))
	held.Data = []byte(fmt.Sprintf(`{"id":%q,"agent":"waiter","kind":"apply","on_conflict":"wait","wait_ms":30000,"writes":[{"path":"doc.y","op":"set","value":1}]}`, waiterID))
	held.Header.Set(intents.HeaderWait, "30000")
	heldDone := make(chan error, 1)
	go func() {
		_, err := nc.RequestMsg(held, 40*time.Second)
		heldDone <- err
	}()
	for {
		m, err := events.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("the waiter was not queued: %v", err)
		}
		var ev intents.Event
		if json.Unmarshal(m.Data, &ev) == nil && ev.Intent == waiterID && ev.Decision != nil && ev.Decision.Outcome == intents.OutcomeQueued {
			break
		}
	}

	logs := make(logRecords, 64)
	c := w.client("other", agents.WithLogger(slog.New(logs)), agents.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, err := c.Apply(ctx, intents.Apply("x").Set("doc.z", 1))
		done <- err
	}()
	for unavailable := false; !unavailable; {
		select {
		case rec := <-logs:
			unavailable = strings.Contains(attr(rec, "err"), "unavailable")
		case err := <-done:
			t.Fatalf("the apply returned before it was told the coordinator was unavailable: %v", err)
		case <-ctx.Done():
			t.Fatal("the client was never told the coordinator was unavailable")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the apply returned while the coordinator was unavailable: %v", err)
	default:
	}
	// The holder ends its transaction through the stream, which takes no
	// submit slot: the waiter is applied, its submit answered, the slot free.
	if _, err := holder.Publish(ctx, &intents.Intent{Kind: intents.KindAbort, Txn: tx.ID(), Fence: tx.Fence()}); err != nil {
		t.Fatal(err)
	}
	if err := <-heldDone; err != nil {
		t.Fatalf("the waiter's submit: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the apply, once there was room: %v", err)
	}
}

// TestCloseEndsASubmit: a submit waiting through an interim decision
// returns ErrClosed when its client closes.
func TestCloseEndsASubmit(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 30*time.Second)
	holder := w.client("holder")
	queued := make(chan struct{}, 1)
	c := w.client("waiter", agents.WithDecisionHook(func(d *intents.Decision) {
		if d.Outcome == intents.OutcomeQueued {
			queued <- struct{}{}
		}
	}))
	if _, err := holder.Propose(ctx, intents.Propose("hold").Write("doc.y", intents.OpSet)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Apply(ctx, intents.Apply("edit").Set("doc.y", 1).Wait(20*time.Second))
		done <- err
	}()
	<-queued
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, agents.ErrClosed) {
			t.Fatalf("a submit of a closed client: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("closing the client did not end its submit")
	}
}

// TestUpdateRetriesOnTheRejectionsVersion: an update that conflicts with a
// transaction holding its path is rejected with the path's version, still
// the one it read; it sends the same write again without reading, and fn
// is called once.
func TestUpdateRetriesOnTheRejectionsVersion(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 30*time.Second)
	holder := w.client("holder")
	if _, err := holder.Apply(ctx, intents.Apply("seed").Set("k.n", 41)); err != nil {
		t.Fatal(err)
	}
	rejected := make(chan *intents.Decision, 1)
	c := w.client("updater", agents.WithRetries(1000), agents.WithBackoff(time.Millisecond, 20*time.Millisecond),
		agents.WithDecisionHook(func(d *intents.Decision) {
			if d.Reason == intents.ReasonConflict {
				select {
				case rejected <- d:
				default:
				}
			}
		}))
	tx, err := holder.Propose(ctx, intents.Propose("hold").Write("k.n", intents.OpSet))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	done := make(chan error, 1)
	var d *intents.Decision
	go func() {
		var err error
		d, err = agents.UpdateJSON(ctx, c, "k.n", func(n float64, _ bool) (float64, error) {
			calls++
			return n + 1, nil
		})
		done <- err
	}()
	if rej := <-rejected; rej.Versions["k.n"] != 1 {
		t.Fatalf("the conflict names versions %v, want k.n at 1", rej.Versions)
	}
	if err := tx.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("fn called %d times; the version did not change, so once is enough", calls)
	}
	if d.Versions["k.n"] != 2 {
		t.Fatalf("applied with versions %v, want k.n at 2", d.Versions)
	}
	st, err := c.Read(ctx, "k.n")
	if err != nil {
		t.Fatal(err)
	}
	if string(st.Values["k.n"].Value) != "42" {
		t.Fatalf("k.n = %s, want 42", st.Values["k.n"].Value)
	}
}
