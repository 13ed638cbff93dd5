package coordinator

import (
	"fmt"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
)

// A task claimed under a leased rule comes back when its owner stops
// renewing, though the coordinator is SIGKILLed just after the claim and
// started again: the lease is in the log. The old owner is told, its late
// completion with the old fence is fenced, and the next claim takes a new
// fence.
func TestClaimReclaimedAcrossAKill(t *testing.T) {
	ns := natstest.Run(t)
	dir := t.TempDir()
	child, _ := startKillChild(t, ns.ClientURL(), dir)
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	submit := func(agent, body string) *intents.Decision {
		t.Helper()
		return natstest.Request[intents.Decision](t, nc, subj.Submit(agent), body)
	}

	resp, err := nc.Request(subj.API(intents.APIRulesSet), []byte(`{"rules":[{"pattern":"tasks.*","kind":"task","lease":"1s","reclaim_to":"PENDING"}]}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := submit("lead", `{"id":"01JD0000000000000000000001","agent":"lead","kind":"apply","writes":[{"path":"tasks.t1","op":"set","value":{"status":"PENDING"}}]}`); d.Outcome != intents.OutcomeApplied {
		t.Fatalf("create the task (rules: %s): %+v", resp.Data, d)
	}
	claim := submit("w1", `{"id":"01JD0000000000000000000002","agent":"w1","kind":"apply","pre":["state.tasks.t1.owner == nil"],"writes":[{"path":"tasks.t1","op":"merge","value":{"owner":"w1","status":"RUNNING"}}]}`)
	if claim.Outcome != intents.OutcomeApplied || claim.Fence == 0 || claim.Txn == "" || claim.LeaseExpires == nil {
		t.Fatalf("claim: %+v; want applied with a lease's txn, fence and end", claim)
	}
	notices, err := nc.SubscribeSync(subj.Notices("w1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The owner renews nothing from here on; the coordinator dies.
	child.kill(t)
	child, _ = startKillChild(t, ns.ClientURL(), dir)
	for {
		ev := natstest.Next[intents.Event](t, notices)
		if ev.Notice == nil || ev.Notice.Txn != claim.Txn {
			t.Fatalf("notice %+v", ev)
		}
		if ev.Notice.Kind == intents.NoticeReclaimed {
			break
		}
	}

	st := natstest.Request[stateReply](t, nc, subj.API(intents.APIStateGet), `{"paths":["tasks.t1"]}`)
	task, _ := st.Values["tasks.t1"].Value.(map[string]any)
	if task == nil || task["owner"] != nil || task["status"] != "PENDING" {
		t.Fatalf("the task after its lease ended: %+v", st.Values["tasks.t1"])
	}
	late := submit("w1", fmt.Sprintf(`{"id":"01JD0000000000000000000003","agent":"w1","kind":"apply","fence":%d,"writes":[{"path":"tasks.t1","op":"merge","value":{"owner":"w1","status":"DONE"}}]}`, claim.Fence))
	if late.Outcome != intents.OutcomeRejected || late.Reason != intents.ReasonFenced {
		t.Fatalf("the old owner's late completion: %+v; want fenced", late)
	}
	next := submit("w2", `{"id":"01JD0000000000000000000004","agent":"w2","kind":"apply","pre":["state.tasks.t1.owner == nil"],"writes":[{"path":"tasks.t1","op":"merge","value":{"owner":"w2","status":"RUNNING"}}]}`)
	if next.Outcome != intents.OutcomeApplied || next.Fence <= claim.Fence {
		t.Fatalf("the next claim: %+v; want applied under a fence after %d", next, claim.Fence)
	}
	// The log folds to the state the child stopped with, and to w2's claim.
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
	if cs := eng.Snapshot().Claims; len(cs) != 1 || cs[0].Owner != "w2" || cs[0].Fence != next.Fence || cs[0].ID != next.Txn {
		t.Errorf("replay: claims %+v, want w2's under fence %d", cs, next.Fence)
	}
}

// A reclaim is counted (coagent_task_reclaims_total) before its old owner
// is told.
func TestReclaimCounted(t *testing.T) {
	ns := natstest.Run(t)
	svc := startService(t, ns, t.TempDir(), Options{})
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	if _, err := svc.SetRules(t.Context(), []byte(`{"rules":[{"pattern":"tasks.*","kind":"task","lease":"200ms"}]}`), "test"); err != nil {
		t.Fatal(err)
	}
	notices, err := nc.SubscribeSync(subj.Notices("w1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	reclaims := func() float64 {
		f := scrape(t, svc.Registry())["coagent_task_reclaims_total"]
		if f == nil || len(f.Metric) != 1 {
			t.Fatalf("coagent_task_reclaims_total: %v", f)
		}
		return f.Metric[0].GetCounter().GetValue()
	}
	if n := reclaims(); n != 0 {
		t.Fatalf("%v reclaims at start", n)
	}
	claim := natstest.Request[intents.Decision](t, nc, subj.Submit("w1"),
		`{"id":"01JD0000000000000000000001","agent":"w1","kind":"apply","writes":[{"path":"tasks.t1.owner","op":"set","value":"w1"}]}`)
	if claim.Fence == 0 {
		t.Fatalf("claim: %+v", claim)
	}
	for ev := natstest.Next[intents.Event](t, notices); ev.Notice.Kind != intents.NoticeReclaimed; ev = natstest.Next[intents.Event](t, notices) {
	}
	if n := reclaims(); n != 1 {
		t.Fatalf("%v reclaims after one", n)
	}
}

// state.get says when each path was last changed and by whom, from the
// change at its mod_rev, so that a stale task can be told.
func TestStateGetModTimeAndAgent(t *testing.T) {
	ns := natstest.Run(t)
	clk := &fakeClock{now: t0}
	startService(t, ns, t.TempDir(), Options{Now: clk.Now})
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	natstest.Request[intents.Decision](t, nc, subj.Submit("w1"),
		`{"id":"01JD0000000000000000000001","agent":"w1","kind":"apply","writes":[{"path":"tasks.t1.status","op":"set","value":"RUNNING"}]}`)
	clk.Advance(time.Minute)
	natstest.Request[intents.Decision](t, nc, subj.Submit("w2"),
		`{"id":"01JD0000000000000000000002","agent":"w2","kind":"apply","writes":[{"path":"tasks.t2.status","op":"set","value":"PENDING"}]}`)
	st := natstest.Request[stateReply](t, nc, subj.API(intents.APIStateGet), `{"paths":["tasks.t1.status","tasks.t2.status","tasks.t3"],"mod":true}`)
	for p, want := range map[string]struct {
		agent string
		at    time.Time
	}{"tasks.t1.status": {"w1", t0}, "tasks.t2.status": {"w2", t0.Add(time.Minute)}} {
		v := st.Values[p]
		if v.ModAgent != want.agent || v.ModTime == nil || !v.ModTime.Equal(want.at) {
			t.Errorf("%s: mod_agent %q, mod_time %v; want %s at %s", p, v.ModAgent, v.ModTime, want.agent, want.at)
		}
	}
	if v := st.Values["tasks.t3"]; v.Exists || v.ModTime != nil || v.ModAgent != "" {
		t.Errorf("an absent path: %+v", v)
	}
	// Unasked, the reply is SPEC §6's.
	st = natstest.Request[stateReply](t, nc, subj.API(intents.APIStateGet), `{"paths":["tasks.t1.status"]}`)
	if v := st.Values["tasks.t1.status"]; v.ModTime != nil || v.ModAgent != "" {
		t.Errorf("mod_time and mod_agent unasked: %+v", v)
	}
}
