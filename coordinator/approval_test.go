package coordinator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
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
