package coordinator

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// 32 agents claiming the next task of one lane of 100 at once each get a
// task of their own, the highest priorities first; a lane with nothing
// claimable says so and decides nothing; a resend of a claim is answered
// with the task it got.
func TestClaimNext(t *testing.T) {
	ns := natstest.Run(t)
	svc := startService(t, ns, t.TempDir(), Options{})
	if _, err := svc.SetRules(t.Context(), []byte(`{"rules":[{"pattern":"lane.*","kind":"task","lease":"1m","reclaim_to":"PENDING"}]}`), "test"); err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	// Tasks t000..t099; t0NN has priority NN mod 10, so that the 32 claims
	// must take the ten tasks of priority 9, the ten of 8, the ten of 7 and
	// two of priority 6.
	var writes []string
	for i := range 100 {
		writes = append(writes, fmt.Sprintf(`{"path":"lane.t%03d","op":"set","value":{"status":"PENDING","priority":%d}}`, i, i%10))
	}
	if d := natstest.Request[intents.Decision](t, nc, subj.Submit("lead"), fmt.Sprintf(
		`{"id":"01JD0000000000000000000001","agent":"lead","kind":"apply","writes":[%s]}`, strings.Join(writes, ","))); d.Outcome != intents.OutcomeApplied {
		t.Fatalf("the lane: %+v", d)
	}
	next := func(agent, id string) (*nats.Msg, error) {
		m := nats.NewMsg(subj.Submit(agent))
		m.Header.Set(intents.HeaderClaimNext, "lane")
		m.Data = []byte(fmt.Sprintf(`{"id":%q,"agent":%q,"kind":"apply","writes":[{"path":"status","op":"set","value":"RUNNING"}]}`, id, agent))
		return nc.RequestMsg(m, 30*time.Second)
	}
	type got struct {
		task string
		d    intents.Decision
		err  error
	}
	results := make([]got, 32)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			m, err := next(fmt.Sprintf("w%02d", i), fmt.Sprintf("01JD00000000000000000001%02d", i))
			if err != nil {
				results[i].err = err
				return
			}
			results[i].task = m.Header.Get(intents.HeaderTask)
			results[i].err = json.Unmarshal(m.Data, &results[i].d)
		})
	}
	wg.Wait()
	seen := map[string]string{}
	prio := map[int]int{}
	for i, r := range results {
		agent := fmt.Sprintf("w%02d", i)
		if r.err != nil || r.d.Outcome != intents.OutcomeApplied || r.d.Fence == 0 || r.task == "" {
			t.Fatalf("%s: task %q, %+v, %v", agent, r.task, r.d, r.err)
		}
		if other, dup := seen[r.task]; dup {
			t.Fatalf("%s and %s both got %s", other, agent, r.task)
		}
		seen[r.task] = agent
		var n int
		fmt.Sscanf(r.task, "lane.t%03d", &n)
		prio[n%10]++
	}
	if prio[9] != 10 || prio[8] != 10 || prio[7] != 10 || prio[6] != 2 {
		t.Fatalf("priorities of the tasks given: %v; want the 32 highest", prio)
	}
	st := natstest.Request[stateReply](t, nc, subj.API(intents.APIStateGet), `{"paths":["lane"]}`)
	lane, _ := st.Values["lane"].Value.(map[string]any)
	for task, agent := range seen {
		rec, _ := lane[strings.TrimPrefix(task, "lane.")].(map[string]any)
		if rec["owner"] != agent || rec["status"] != "RUNNING" {
			t.Errorf("%s: %v, want owned by %s and RUNNING", task, rec, agent)
		}
	}

	// A resend gets the task the first got, not another.
	m, err := next("w00", "01JD0000000000000000000100")
	if err != nil || m.Header.Get(intents.HeaderTask) != results[0].task {
		t.Fatalf("resend: %v, task %q, want %q", err, m.Header.Get(intents.HeaderTask), results[0].task)
	}

	// The rest are claimed one by one; then the lane has nothing claimable.
	for i := 32; i < 100; i++ {
		if _, err := next("w99", fmt.Sprintf("01JD00000000000000000002%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	m, err = next("w98", "01JD0000000000000000000300")
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != intents.CodeNothingClaimable {
		t.Fatalf("an empty lane: %v, %v %s", err, m.Header, m.Data)
	}
	if d, err := svc.Core().Log().Decision("01JD0000000000000000000300"); err == nil {
		t.Fatalf("nothing claimable decided something: %+v", d)
	}
}

// A claim of a lane's next task that waits (on_conflict wait) is decided
// when a task becomes claimable — added, or released — and, when none
// does, answered nothing_claimable once its wait ends.
func TestClaimNextWaits(t *testing.T) {
	ns := natstest.Run(t)
	svc := startService(t, ns, t.TempDir(), Options{})
	if _, err := svc.SetRules(t.Context(), []byte(`{"rules":[{"pattern":"lane.*","kind":"task","lease":"1m","reclaim_to":"PENDING"}]}`), "test"); err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	next := func(agent, id string, waitMS int) (*nats.Msg, error) {
		m := nats.NewMsg(subj.Submit(agent))
		m.Header.Set(intents.HeaderClaimNext, "lane")
		m.Data = []byte(fmt.Sprintf(`{"id":%q,"agent":%q,"kind":"apply","on_conflict":"wait","wait_ms":%d,"writes":[{"path":"status","op":"set","value":"RUNNING"}]}`, id, agent, waitMS))
		return nc.RequestMsg(m, 30*time.Second)
	}
	type reply struct {
		m   *nats.Msg
		err error
	}
	got := make(chan reply, 1)
	go func() {
		m, err := next("w1", "01JD0000000000000000000010", 20000)
		got <- reply{m, err}
	}()
	// The claim is parked once the service has decided nothing for it:
	// the lane is empty, and the request has no answer.
	awaitLaneWaiter(t, svc, "lane")
	select {
	case r := <-got:
		t.Fatalf("answered before any task was claimable: %v %v", r.err, r.m)
	default:
	}
	natstest.Request[intents.Decision](t, nc, subj.Submit("lead"),
		`{"id":"01JD0000000000000000000001","agent":"lead","kind":"apply","writes":[{"path":"lane.t1","op":"set","value":{"status":"PENDING"}}]}`)
	r := <-got
	var d intents.Decision
	if r.err != nil || json.Unmarshal(r.m.Data, &d) != nil || d.Outcome != intents.OutcomeApplied || r.m.Header.Get(intents.HeaderTask) != "lane.t1" {
		t.Fatalf("the waiting claim once lane.t1 was added: %v, %v %s", r.err, r.m.Header, r.m.Data)
	}

	// None comes: answered at the end of its wait.
	began := time.Now()
	m, err := next("w2", "01JD0000000000000000000011", 300)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != intents.CodeNothingClaimable || time.Since(began) < 300*time.Millisecond {
		t.Fatalf("a wait that ends: %v, %v %s after %s", err, m.Header, m.Data, time.Since(began))
	}
}

// A task whose lease ends past its rule's max_retries is a dead letter:
// counted (coagent_task_dead_letters_total) and kept on the dead-letter
// stream, named by the header Coagent-Dead-Task, with its last owner.
func TestDeadTaskLetter(t *testing.T) {
	ns := natstest.Run(t)
	svc := startService(t, ns, t.TempDir(), Options{})
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	if _, err := svc.SetRules(t.Context(), []byte(`{"rules":[{"pattern":"tasks.*","kind":"task","lease":"200ms","reclaim_to":"PENDING","max_retries":1}]}`), "test"); err != nil {
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
	dead := func() float64 {
		f := scrape(t, svc.Registry())["coagent_task_dead_letters_total"]
		if f == nil || len(f.Metric) != 1 {
			t.Fatalf("coagent_task_dead_letters_total: %v", f)
		}
		return f.Metric[0].GetCounter().GetValue()
	}
	notices, err := nc.SubscribeSync(subj.Notices("w1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Two tries whose leases run out: the second is past max_retries 1.
	for i, id := range []string{"01JD0000000000000000000001", "01JD0000000000000000000002"} {
		claim := natstest.Request[intents.Decision](t, nc, subj.Submit("w1"),
			`{"id":"`+id+`","agent":"w1","kind":"apply","writes":[{"path":"tasks.t1","op":"merge","value":{"owner":"w1","status":"RUNNING"}}]}`)
		if claim.Outcome != intents.OutcomeApplied || claim.Fence == 0 {
			t.Fatalf("claim %d: %+v", i, claim)
		}
		for ev := natstest.Next[intents.Event](t, notices); ev.Notice.Kind != intents.NoticeReclaimed; ev = natstest.Next[intents.Event](t, notices) {
		}
		if n := dead(); n != float64(i) {
			t.Fatalf("%v dead letters after %d tries", n, i+1)
		}
	}
	m, err := letters.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	var d intents.DeadTask
	if err := json.Unmarshal(m.Data(), &d); err != nil || m.Headers().Get(intents.HeaderDeadTask) != "tasks.t1" {
		t.Fatalf("dead letter %s %v: %v", m.Data(), m.Headers(), err)
	}
	if d.Task != "tasks.t1" || d.Status != "DEAD" || d.Pool != "PENDING" || d.Tries != 2 || d.Owner != "w1" ||
		d.Lease != "01JD0000000000000000000002" || d.Why != intents.TryLeaseEnded || d.Rev == 0 {
		t.Fatalf("dead letter %+v", d)
	}
}

// A claim of a lane's next task that finds the lane at its wip limit
// waits for a slot and gets the task once a claim of the lane ends; one
// that may not wait is told the lane is full.
func TestClaimNextWaitsForAWIPSlot(t *testing.T) {
	ns := natstest.Run(t)
	svc := startService(t, ns, t.TempDir(), Options{})
	if _, err := svc.SetRules(t.Context(), []byte(`{"rules":[{"pattern":"lane.*","kind":"task","lease":"1m","reclaim_to":"PENDING","wip":1}]}`), "test"); err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	natstest.Request[intents.Decision](t, nc, subj.Submit("lead"),
		`{"id":"01JD0000000000000000000001","agent":"lead","kind":"apply","writes":[{"path":"lane.t1","op":"set","value":{"status":"PENDING","priority":2}},{"path":"lane.t2","op":"set","value":{"status":"PENDING"}}]}`)
	next := func(agent, id string, onConflict string) (*nats.Msg, error) {
		m := nats.NewMsg(subj.Submit(agent))
		m.Header.Set(intents.HeaderClaimNext, "lane")
		m.Data = []byte(fmt.Sprintf(`{"id":%q,"agent":%q,"kind":"apply","on_conflict":%q,"wait_ms":20000,"writes":[{"path":"status","op":"set","value":"RUNNING"}]}`, id, agent, onConflict))
		return nc.RequestMsg(m, 30*time.Second)
	}
	m, err := next("w1", "01JD0000000000000000000010", "reject")
	var first intents.Decision
	if err != nil || json.Unmarshal(m.Data, &first) != nil || first.Outcome != intents.OutcomeApplied || m.Header.Get(intents.HeaderTask) != "lane.t1" {
		t.Fatalf("the first claim: %v, %v %s", err, m.Header, m.Data)
	}
	m, err = next("w2", "01JD0000000000000000000011", "reject")
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != intents.CodeNothingClaimable || !strings.Contains(m.Header.Get("Nats-Service-Error"), "wip limit of 1") {
		t.Fatalf("a claim of a full lane that may not wait: %v, %v %s", err, m.Header, m.Data)
	}
	type reply struct {
		m   *nats.Msg
		err error
	}
	got := make(chan reply, 1)
	go func() {
		m, err := next("w2", "01JD0000000000000000000012", "wait")
		got <- reply{m, err}
	}()
	awaitLaneWaiter(t, svc, "lane")
	select {
	case r := <-got:
		t.Fatalf("answered while the lane was full: %v %v", r.err, r.m)
	default:
	}
	// w1 is done with lane.t1: the slot goes to the waiting claim, which
	// gets lane.t2.
	natstest.Request[intents.Decision](t, nc, subj.Submit("w1"), fmt.Sprintf(
		`{"id":"01JD0000000000000000000020","agent":"w1","kind":"apply","fence":%d,"writes":[{"path":"lane.t1.owner","op":"delete"},{"path":"lane.t1.status","op":"set","value":"DONE"}]}`, first.Fence))
	r := <-got
	var d intents.Decision
	if r.err != nil || json.Unmarshal(r.m.Data, &d) != nil || d.Outcome != intents.OutcomeApplied || r.m.Header.Get(intents.HeaderTask) != "lane.t2" {
		t.Fatalf("the waiting claim once a slot freed: %v, %v %s", r.err, r.m.Header, r.m.Data)
	}
}

// awaitLaneWaiter waits until one claim of lane's next task waits on the
// loop: the service has decided nothing for it, and its request has no
// answer.
func awaitLaneWaiter(t *testing.T, svc *Service, lane string) {
	t.Helper()
	natstest.CheckFor(t, 10*time.Second, "a claim waiting on "+lane, func() error {
		var n int
		if !svc.call(t.Context(), func() { n = len(svc.lanes[lane]) }) {
			return fmt.Errorf("the loop did not run the call")
		}
		if n != 1 {
			return fmt.Errorf("%d waiting", n)
		}
		return nil
	})
}
