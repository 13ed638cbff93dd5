package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// shardOf starts the coordinator of shard name (the default shard for
// "") on ns, in a directory of its own.
func shardOf(t testing.TB, ns interface{ ClientURL() string }, name string) (*Service, string) {
	t.Helper()
	dir := t.TempDir()
	opts := Options{}
	if name != "" {
		opts = Options{Prefix: intents.Subjects{}.Shard(name).Prefix, Shard: name}
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, err := Start(context.Background(), nc, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	return svc, dir
}

// moveBoard moves board between two running shards, as coagent shards
// move does: the release on the owner, then the adoption of what it
// carried.
func moveBoard(t testing.TB, from, to *Service, board string) {
	t.Helper()
	ctx := context.Background()
	toName, fromName := to.opts.Shard, from.opts.Shard
	rel, err := from.Handoff(ctx, &intents.Handoff{Kind: intents.HandoffRelease, Board: board, Shard: shardName(toName)})
	if err != nil {
		t.Fatalf("release %s: %v", board, err)
	}
	if _, err := to.Handoff(ctx, &intents.Handoff{Kind: intents.HandoffAdopt, Board: board, Shard: shardName(fromName),
		Seq: rel.Seq, Nodes: rel.Handoff.Nodes}); err != nil {
		t.Fatalf("adopt %s: %v", board, err)
	}
}

func shardName(s string) string {
	if s == "" {
		return intents.DefaultShard
	}
	return s
}

func liveHash(t *testing.T, svc *Service) string {
	t.Helper()
	var h string
	if !svc.call(context.Background(), func() { h = replay.Hash(svc.core.Engine().State()) }) {
		t.Fatal("the loop does not answer")
	}
	return h
}

// TestShardsOverNATS runs two shards on one NATS server. Agents that know
// nothing of shards submit on coagent.api.submit; a board is moved under
// their load. Every increment is applied exactly once, on one shard or
// the other; the shard that gave the board away refuses it from then on;
// an intent of both shards' boards is refused out_of_scope, not
// retryable, and changes nothing; and each shard's log replays to its
// live state.
func TestShardsOverNATS(t *testing.T) {
	ns := natstest.Run(t)
	def, defDir := shardOf(t, ns, "")
	s2, s2Dir := shardOf(t, ns, "s2")
	nc := natstest.Connect(t, ns)
	base := intents.Subjects{}

	submit := func(subject, body string) (*intents.Decision, error) {
		m := nats.NewMsg(subject)
		m.Data = []byte(body)
		resp, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			return nil, err
		}
		if code := resp.Header.Get("Nats-Service-Error-Code"); code != "" {
			return nil, fmt.Errorf("%s: %s", code, resp.Header.Get("Nats-Service-Error"))
		}
		var d intents.Decision
		return &d, json.Unmarshal(resp.Data, &d)
	}
	incr := func(agent, id, path string) string {
		return fmt.Sprintf(`{"id":%q,"agent":%q,"kind":"apply","writes":[{"path":%q,"op":"incr","value":1}]}`, id, agent, path)
	}

	// Load on two boards, report and tasks, through the default shard's
	// subject, while report moves to s2. An intent refused as the other
	// shard's (the board was between shards) is sent again with its id.
	var applied [2]atomic.Int64
	var misrouted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, board := range []string{"report", "tasks"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent := fmt.Sprintf("w%d", i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := ulid.Make().String()
				for {
					d, err := submit(base.Submit(agent), incr(agent, id, board+".n"))
					if err != nil {
						t.Errorf("submit: %v", err)
						return
					}
					if intents.Misrouted(d) {
						if misrouted.Add(1) > 1000 {
							t.Errorf("incr of %s refused as another shard's a thousand times: %s", board, d.Detail)
							return
						}
						continue
					}
					if d.Outcome != intents.OutcomeApplied {
						t.Errorf("incr of %s: %+v", board, d)
						return
					}
					applied[i].Add(1)
					break
				}
			}
		}()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		natstest.CheckFor(t, 10*time.Second, what, func() error {
			if !cond() {
				return fmt.Errorf("not yet")
			}
			return nil
		})
	}
	waitFor("increments before the move", func() bool { return applied[0].Load() > 20 })
	moveBoard(t, def, s2, "report")
	before := applied[0].Load()
	waitFor("increments after the move", func() bool { return applied[0].Load() > before+20 })
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}

	// The state: every increment once, report on s2, tasks on the default.
	read := func(svc *Service, path string) (any, bool) {
		var v any
		var ok bool
		svc.call(context.Background(), func() { v, ok = svc.core.Engine().State().Get(path) })
		return v, ok
	}
	if v, _ := read(s2, "report.n"); v != float64(applied[0].Load()) {
		t.Errorf("report.n = %v on s2, after %d increments applied", v, applied[0].Load())
	}
	if _, ok := read(def, "report.n"); ok {
		t.Error("the default shard still has report.n")
	}
	if v, _ := read(def, "tasks.n"); v != float64(applied[1].Load()) {
		t.Errorf("tasks.n = %v on the default shard, after %d increments applied", v, applied[1].Load())
	}
	t.Logf("%d increments of report (%d refused while it moved), %d of tasks", applied[0].Load(), misrouted.Load(), applied[1].Load())

	// Asked again, the release is answered from the log: the same event.
	again, err := def.Handoff(context.Background(), &intents.Handoff{Kind: intents.HandoffRelease, Board: "report", Shard: "s2"})
	if err != nil || again.Handoff == nil || again.Handoff.Kind != intents.HandoffRelease || again.Handoff.Board != "report" || len(again.Handoff.Nodes) == 0 {
		t.Fatalf("the release asked again: %+v %v", again, err)
	}

	// Sent straight to the shard that gave it away, as a client with a
	// stale map does, the intent is sent on to its owner.
	d, err := submit(base.Submit("w9"), incr("w9", ulid.Make().String(), "report.n"))
	if err != nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("report through the default shard: %+v %v", d, err)
	}
	// A transaction granted on s2 through the default shard: its renew and
	// abort name no path, and go round the shards to s2; so does a
	// decision.get of an intent s2 decided.
	pid := ulid.Make().String()
	g, err := submit(base.Submit("w9"), fmt.Sprintf(`{"id":%q,"agent":"w9","kind":"propose","writes":[{"path":"report.t","op":"set"}]}`, pid))
	if err != nil || g.Outcome != intents.OutcomeGranted {
		t.Fatalf("propose on report: %+v %v", g, err)
	}
	for _, kind := range []string{"renew", "abort"} {
		d, err := submit(base.Submit("w9"), fmt.Sprintf(`{"id":%q,"agent":"w9","kind":%q,"txn":%q,"fence":%d}`,
			ulid.Make().String(), kind, g.Txn, g.Fence))
		if want := map[string]intents.Outcome{"renew": intents.OutcomeRenewed, "abort": intents.OutcomeAborted}[kind]; err != nil || d.Outcome != want {
			t.Fatalf("%s of s2's transaction through the default shard: %+v %v", kind, d, err)
		}
	}
	m, err := nc.Request(base.API(intents.APIDecisionGet), []byte(fmt.Sprintf(`{"intent":%q}`, pid)), 10*time.Second)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" || !strings.Contains(string(m.Data), `"granted"`) {
		t.Fatalf("decision.get of s2's intent through the default shard: %v %s %s", err, m.Header, m.Data)
	}
	m, err = nc.Request(base.API(intents.APIDecisionGet), []byte(fmt.Sprintf(`{"intent":%q}`, ulid.Make().String())), 10*time.Second)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != "not_found" {
		t.Fatalf("decision.get of an intent no shard decided: %v %s", err, m.Header)
	}
	// A ring the client wrote, naming what is no shard, is not followed:
	// the coordinator asked answers.
	forged := nats.NewMsg(base.API(intents.APIDecisionGet))
	forged.Data = []byte(fmt.Sprintf(`{"intent":%q}`, ulid.Make().String()))
	forged.Header.Set(HeaderRing, "default,api.rules.set")
	if m, err := nc.RequestMsg(forged, 5*time.Second); err != nil || m.Header.Get("Nats-Service-Error-Code") != "not_found" {
		t.Fatalf("decision.get with a forged ring: %v %v", err, m)
	}

	// The log of report's changes is s2's, asked of either shard.
	changes := func(subj intents.Subjects) int {
		t.Helper()
		m, err := nc.Request(subj.API(intents.APILogQuery), []byte(`{"type":"change","path":"report.n","limit":10000}`), 10*time.Second)
		var page struct {
			Events []*intents.Event `json:"events"`
		}
		if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" || json.Unmarshal(m.Data, &page) != nil {
			t.Fatalf("log.query on %s: %v %s", subj.APIGroup(), err, m.Data)
		}
		return len(page.Events)
	}
	if viaDef, onS2 := changes(base), changes(base.Shard("s2")); viaDef != onS2 || onS2 == 0 {
		t.Fatalf("report.n's changes: %d asked of the default shard, %d of s2", viaDef, onS2)
	}

	// Both shards' boards: an apply commits on both, through whichever
	// shard is asked; a transaction is refused, not retryable.
	for i, subj := range []intents.Subjects{base, base.Shard("s2")} {
		cross := fmt.Sprintf(`{"id":%q,"agent":"w9","kind":"apply","writes":[{"path":"report.x","op":"incr","value":1},{"path":"tasks.x","op":"incr","value":1}]}`, ulid.Make().String())
		d, err := submit(subj.Submit("w9"), cross)
		if err != nil || d.Outcome != intents.OutcomeApplied {
			t.Fatalf("an apply of two shards' boards, on %s: %+v %v", subj.Submit("w9"), d, err)
		}
		// The coordinator's part is applied with its decision, the
		// other's once it is told.
		natstest.CheckFor(t, 10*time.Second, "both parts applied", func() error {
			x, _ := read(def, "tasks.x")
			y, _ := read(s2, "report.x")
			if x != float64(i+1) || y != float64(i+1) {
				return fmt.Errorf("tasks.x = %v, report.x = %v after %d cross-shard applies", x, y, i+1)
			}
			return nil
		})
	}
	cross := fmt.Sprintf(`{"id":%q,"agent":"w9","kind":"propose","writes":[{"path":"report.y","op":"set"},{"path":"tasks.y","op":"set"}]}`, ulid.Make().String())
	for _, subj := range []intents.Subjects{base, base.Shard("s2")} {
		d, err := submit(subj.Submit("w9"), cross)
		if err != nil || d.Outcome != intents.OutcomeRejected || d.Reason != intents.ReasonOutOfScope || d.Retryable {
			t.Fatalf("a propose of two shards' boards, on %s: %+v %v", subj.Submit("w9"), d, err)
		}
	}

	// Each shard's log replays to its live state.
	verifyShard(t, def, defDir)
	verifyShard(t, s2, s2Dir)
}

// TestShardRefusesAnotherShardsLog: a directory of one shard does not
// serve another.
func TestShardRefusesAnotherShardsLog(t *testing.T) {
	ns := natstest.Run(t)
	s2, dir := shardOf(t, ns, "s2")
	s2.Shutdown(context.Background())
	nc := natstest.Connect(t, ns)
	_, err := Start(context.Background(), nc, dir, Options{Prefix: "coagent.s3", Shard: "s3"})
	if err == nil {
		t.Fatal("shard s2's directory served shard s3")
	}
	if _, err := Start(context.Background(), nc, dir, Options{}); err == nil {
		t.Fatal("shard s2's directory served the default shard")
	}
}

// TestThreeShards: a board moved twice, default → s2 → s3, is found from
// the default shard by following the pointers (default says s2, s2 says
// s3); a transaction s3 granted is renewed through the default shard,
// round the three; a decision s3 made is found the same way; and every
// log replays to its state.
func TestThreeShards(t *testing.T) {
	ns := natstest.Run(t)
	def, _ := shardOf(t, ns, "")
	s2, _ := shardOf(t, ns, "s2")
	s3, _ := shardOf(t, ns, "s3")
	nc := natstest.Connect(t, ns)
	base := intents.Subjects{}
	submit := func(body string) *intents.Decision {
		t.Helper()
		return natstest.Request[intents.Decision](t, nc, base.Submit("w1"), body)
	}
	apply := func(path string) *intents.Decision {
		t.Helper()
		return submit(fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"apply","writes":[{"path":%q,"op":"incr","value":1}]}`, ulid.Make().String(), path))
	}
	if d := apply("report.n"); d.Outcome != intents.OutcomeApplied {
		t.Fatalf("%+v", d)
	}
	moveBoard(t, def, s2, "report")
	moveBoard(t, s2, s3, "report")
	moveBoard(t, def, s2, "tasks")
	d := apply("report.n")
	if d.Outcome != intents.OutcomeApplied || d.Versions["report.n"] != 2 {
		t.Fatalf("report.n through the default shard, two moves on: %+v", d)
	}
	if d := apply("tasks.n"); d.Outcome != intents.OutcomeApplied {
		t.Fatalf("tasks.n: %+v", d)
	}
	g := submit(fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"propose","writes":[{"path":"report.t","op":"set"}]}`, ulid.Make().String()))
	if g.Outcome != intents.OutcomeGranted {
		t.Fatalf("propose on report: %+v", g)
	}
	r := submit(fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"renew","txn":%q,"fence":%d}`, ulid.Make().String(), g.Txn, g.Fence))
	if r.Outcome != intents.OutcomeRenewed {
		t.Fatalf("renew through the default shard, round three shards: %+v", r)
	}
	m, err := nc.Request(base.API(intents.APIDecisionGet), []byte(fmt.Sprintf(`{"intent":%q}`, r.Intent)), 10*time.Second)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("decision.get of s3's renewal through the default shard: %v %s", err, m.Header)
	}
	for _, svc := range []*Service{def, s2, s3} {
		live := liveHash(t, svc)
		var folded string
		svc.call(context.Background(), func() {
			e, err := engine.New(engine.Config{})
			if err == nil {
				err = svc.core.Log().Fold(1, svc.core.Log().LastSeq(), func(ev *intents.Event) error { return e.Apply(ev) })
			}
			if err != nil {
				t.Errorf("shard %s: fold: %v", shardName(svc.opts.Shard), err)
				return
			}
			folded = replay.Hash(e.State())
		})
		if folded != live {
			t.Errorf("shard %s: the log folds to %s, the live state is %s", shardName(svc.opts.Shard), folded, live)
		}
	}
}
