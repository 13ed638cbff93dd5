package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/notify"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// voteReply is case.vote's answer, or its error (from the micro error
// headers).
type voteReply struct {
	OK        bool              `json:"ok"`
	Agent     string            `json:"agent"`
	Decision  *intents.Decision `json:"decision"`
	Code, Err string
}

// castVote sends v to case.vote.
func castVote(t *testing.T, nc *nats.Conn, v intents.Vote) *voteReply {
	t.Helper()
	body, _ := json.Marshal(v)
	m, err := nc.Request(intents.Subjects{}.API(intents.APICaseVote), body, 10*time.Second)
	if err != nil {
		t.Fatalf("case.vote: %v", err)
	}
	r := &voteReply{Code: m.Header.Get(micro.ErrorCodeHeader), Err: m.Header.Get(micro.ErrorHeader)}
	if r.Code == "" {
		if err := json.Unmarshal(m.Data, r); err != nil {
			t.Fatalf("case.vote answered %q: %v", m.Data, err)
		}
	}
	return r
}

// An approval case survives the coordinator's SIGKILL between its two
// approvals: the first vote is in the log, so the second, sent to the
// restarted coordinator, makes the quorum and applies the intent; a
// replay of the log gives the state it stopped with.
func TestApprovalAcrossAKill(t *testing.T) {
	ns := natstest.Run(t)
	dir := t.TempDir()
	child, _ := startKillChild(t, ns.ClientURL(), dir)
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	resp, err := nc.Request(subj.API(intents.APIRulesSet), []byte(`{"agents":{"lina":{"roles":["lead"]},"luc":{"roles":["lead"]}},
		"rules":[{"pattern":"deploy.**","approve":{"by":["role:lead"],"quorum":2,"timeout":"10m"}}]}`), 10*time.Second)
	if err != nil || !strings.Contains(string(resp.Data), `"hash"`) {
		t.Fatalf("rules.set: %v %s", err, resp.Data)
	}
	decisions, err := nc.SubscribeSync(subj.Decisions("dev"))
	if err != nil {
		t.Fatal(err)
	}
	const id = "01JD0000000000000000000A01"
	d := natstest.Request[intents.Decision](t, nc, subj.Submit("dev"),
		`{"id":"`+id+`","agent":"dev","kind":"apply","writes":[{"path":"deploy.web","op":"set","value":3}]}`)
	if d.Outcome != intents.OutcomeEscalated || len(d.Conflicts) != 1 || d.Conflicts[0].Kind != intents.ConflictApproval {
		t.Fatalf("an intent under the gate: %+v", d)
	}
	vote := func(agent, verdict string) *voteReply {
		t.Helper()
		return castVote(t, nc, intents.Vote{Case: id, Agent: agent, Verdict: verdict})
	}
	if r := vote("bob", intents.VerdictApprove); r.Code != string(intents.ReasonUnauthorized) {
		t.Fatalf("an outsider's approval: %+v", r)
	}
	if r := vote("lina", intents.VerdictApprove); !r.OK || r.Decision != nil {
		t.Fatalf("the first approval: %+v", r)
	}
	child.kill(t)
	child, _ = startKillChild(t, ns.ClientURL(), dir)
	if r := vote("lina", intents.VerdictApprove); !strings.Contains(r.Err, "has voted on case "+id+" already") {
		t.Fatalf("lina again after the restart: %+v; want refused, her vote is in the log", r)
	}
	r := vote("luc", intents.VerdictApprove)
	if !r.OK || r.Decision == nil || r.Decision.Outcome != intents.OutcomeApplied {
		t.Fatalf("the second approval after the restart: %+v", r)
	}
	if d := natstest.Next[intents.Decision](t, decisions); d.Intent != id || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("the agent's decision: %+v", d)
	}
	hash, rev := child.stop(t)
	log, err := eventlog.Open(dir, &eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	eng, _, err := replay.Rebuild(log, engine.Config{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if h := replay.Hash(eng.State()); h != hash || eng.State().Rev() != rev {
		t.Errorf("replay: hash %s at rev %d, the child stopped with %s at rev %d", h, eng.State().Rev(), hash, rev)
	}
	if v, _ := eng.State().Get("deploy.web"); v != 3.0 {
		t.Errorf("replay: deploy.web = %v, want 3", v)
	}
}

// An approval case no quorum approves by its deadline: its approver is
// told on its notices subject and the webhook is posted the case; at the
// deadline the fallback rejects it, and the case is a dead letter on the
// stream and on the webhook. Nothing goes to the arbiters' queue.
func TestApprovalDeadline(t *testing.T) {
	var mu sync.Mutex
	var got []notify.Notice
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n notify.Notice
		if json.NewDecoder(r.Body).Decode(&n) == nil {
			mu.Lock()
			got = append(got, n)
			mu.Unlock()
		}
	}))
	defer srv.Close()
	wh, err := notify.New(notify.Config{URL: srv.URL, Secret: []byte("a secret of some length")})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close(context.Background())
	ns := natstest.Run(t)
	svc := startService(t, ns, t.TempDir(), Options{Notify: wh})
	if _, err := svc.SetRules(t.Context(), []byte(`{"rules":[{"pattern":"deploy.**","approve":{"by":["lina"],"timeout":"500ms"}}]}`), "test"); err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	notices, err := nc.SubscribeSync(subj.Notices("lina"))
	if err != nil {
		t.Fatal(err)
	}
	decisions, err := nc.SubscribeSync(subj.Decisions("dev"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	letters, err := js.OrderedConsumer(t.Context(), subj.Stream(intents.StreamDLQ), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const id = "01JD0000000000000000000A02"
	if err := nc.Publish(subj.Intents("dev"), []byte(`{"id":"`+id+`","agent":"dev","kind":"apply","writes":[{"path":"deploy.web","op":"set","value":3}]}`)); err != nil {
		t.Fatal(err)
	}
	if d := natstest.Next[intents.Decision](t, decisions); d.Outcome != intents.OutcomeEscalated {
		t.Fatalf("the gated intent: %+v", d)
	}
	if ev := natstest.Next[intents.Event](t, notices); ev.Notice == nil || ev.Notice.Kind != intents.NoticeApproval || ev.Notice.Intent != id || ev.Notice.From != "dev" {
		t.Fatalf("lina's notice: %+v", ev)
	}
	d := natstest.Next[intents.Decision](t, decisions)
	if d.Outcome != intents.OutcomeRejected || d.Reason != intents.ReasonArbiterRejected || !strings.Contains(d.Detail, "no quorum of approvals by its deadline: 0 of 1") {
		t.Fatalf("the intent at its deadline: %+v", d)
	}
	m, err := letters.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	var dead intents.Escalation
	if err := json.Unmarshal(m.Data(), &dead); err != nil || dead.ID != id || dead.Kind != intents.CaseApproval || dead.Approval == nil {
		t.Fatalf("the dead letter: %s %v", m.Data(), err)
	}
	natstest.CheckFor(t, 10*time.Second, "the webhook's case and dead letter", func() error {
		mu.Lock()
		defer mu.Unlock()
		var kinds []string
		for _, n := range got {
			kinds = append(kinds, string(n.Kind)+" "+n.Summary)
		}
		if len(got) != 2 || got[0].Kind != notify.KindCase || !strings.Contains(got[0].Summary, "waits for 1 approval(s) of lina") ||
			got[1].Kind != notify.KindDeadLetter {
			return fmt.Errorf("notices %q", kinds)
		}
		return nil
	})
	arb, err := js.Stream(t.Context(), subj.Stream(intents.StreamArbiter))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := arb.Info(t.Context()); err != nil || info.State.Msgs != 0 {
		t.Fatalf("the arbiters' queue: %+v %v; want no message", info.State, err)
	}
}
