package coordinator

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// childAgent is an agent of the hardening tests: it publishes on its
// intents subject and reads its decisions, with plain core NATS, against a
// coordinator in a child process.
type childAgent struct {
	t    *testing.T
	nc   *nats.Conn
	name string
	decs *nats.Subscription
}

func newChildAgent(t *testing.T, nc *nats.Conn, name string) *childAgent {
	t.Helper()
	sub, err := nc.SubscribeSync(intents.Subjects{}.Decisions(name))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &childAgent{t: t, nc: nc, name: name, decs: sub}
}

// send publishes body and returns its decision, skipping decisions of
// other intents; within must cover any pause of the coordinator.
func (a *childAgent) send(id, body string, within time.Duration) *intents.Decision {
	a.t.Helper()
	if err := a.nc.Publish(intents.Subjects{}.Intents(a.name), []byte(body)); err != nil {
		a.t.Fatal(err)
	}
	return a.await(id, within)
}

// await returns the next decision of intent id.
func (a *childAgent) await(id string, within time.Duration) *intents.Decision {
	a.t.Helper()
	deadline := time.Now().Add(within)
	for {
		m, err := a.decs.NextMsg(time.Until(deadline))
		if err != nil {
			a.t.Fatalf("agent %s: no decision for %s: %v", a.name, id, err)
		}
		var d intents.Decision
		if err := json.Unmarshal(m.Data, &d); err != nil {
			a.t.Fatalf("decision %s: %v", m.Data, err)
		}
		if d.Intent == id || id == "" {
			return &d
		}
	}
}

// The poison messages of the hostile trial, sent on the intents stream to
// a coordinator in a child process, are each recorded invalid and
// acknowledged; killed with SIGKILL and restarted, the coordinator comes
// back (nothing poisoned is delivered again to crash it), decides the next
// intent, and its log folds to the state it had.
func TestPoisonSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a child process")
	}
	ns := natstest.Run(t)
	dir := t.TempDir()
	child, _ := startKillChild(t, ns.ClientURL(), dir)
	w1 := newChildAgent(t, natstest.Connect(t, ns), "w1")
	max := "1.7976931348623157e308"
	poisons := []string{
		`{"id":%q,"agent":"w1","kind":"apply","writes":[{"path":"n.a","op":"set","value":1e999}]}`,
		`{"id":%q,"agent":"w1","kind":"apply","writes":[{"path":"n.a","op":"set","value":1` + strings.Repeat("0", 100000) + `}]}`,
		`{"id":%q,"agent":"w1","kind":"apply","writes":[{"path":"n.a","op":"merge","value":{"x":[-1e400]}}]}`,
		`{"id":%q,"agent":"w1","kind":"apply","writes":[{"path":"d.a","op":"set","value":1,"path":"secret.x"}]}`,
		`{"id":%q,"Agent":"w1","kind":"apply","writes":[{"path":"d.a","op":"set","value":1}]}`,
		"{\"id\":%q,\"agent\":\"w1\",\"kind\":\"apply\",\"writes\":[{\"path\":\"d.a\",\"op\":\"set\",\"value\":\"\xff\"}]}",
	}
	for _, p := range poisons {
		id := ulid.Make().String()
		d := w1.send(id, fmt.Sprintf(p, id), 20*time.Second)
		if d.Outcome != intents.OutcomeRejected || d.Reason != intents.ReasonInvalid {
			t.Fatalf("poison %.80s: %+v", p, d)
		}
	}
	// Two increments of the largest double: the second would overflow.
	id := ulid.Make().String()
	if d := w1.send(id, fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"apply","writes":[{"path":"n.i","op":"incr","value":%s}]}`, id, max), 20*time.Second); d.Outcome != intents.OutcomeApplied {
		t.Fatalf("the first incr: %+v", d)
	}
	id = ulid.Make().String()
	if d := w1.send(id, fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"apply","writes":[{"path":"n.i","op":"incr","value":%s}]}`, id, max), 20*time.Second); d.Reason != intents.ReasonInvalid || !strings.Contains(d.Detail, "n.i") {
		t.Fatalf("the overflowing incr: %+v", d)
	}
	child.kill(t)
	child, _ = startKillChild(t, ns.ClientURL(), dir)
	id = ulid.Make().String()
	if d := w1.send(id, fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"apply","writes":[{"path":"n.after","op":"set","value":1}]}`, id), 20*time.Second); d.Outcome != intents.OutcomeApplied {
		t.Fatalf("the intent after the restart: %+v", d)
	}
	nc := natstest.Connect(t, ns)
	m, err := nc.Request(intents.Subjects{}.API(intents.APIStateGet), []byte(`{"paths":["n.i","n"]}`), 10*time.Second)
	if err != nil || m.Header.Get(protoHdrErrCode) != "" {
		t.Fatalf("state.get after the poison: %v %v", err, m.Header)
	}
	hash, _ := child.stop(t)
	lg, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	if got, err := replay.Verify(lg, engine.Config{}, nil); err != nil || got != hash {
		t.Fatalf("verify: %v; folded %s, live %s", err, got, hash)
	}
}

// A waiter is never applied after its own wait_ms, whatever stopped the
// coordinator meanwhile: paused with SIGSTOP past both the holder's lease
// and the waiter's deadline, or killed and restarted after both. The
// timers fire late, in deadline order, and the waiter times out.
func TestWaiterNeverLate(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses and kills a child process")
	}
	for _, how := range []string{"paused", "restarted"} {
		t.Run(how, func(t *testing.T) {
			ns := natstest.Run(t)
			dir := t.TempDir()
			child, _ := startKillChild(t, ns.ClientURL(), dir)
			nc := natstest.Connect(t, ns)
			holder, waiter := newChildAgent(t, nc, "holder"), newChildAgent(t, nc, "waiter")
			id := ulid.Make().String()
			g := holder.send(id, fmt.Sprintf(`{"id":%q,"agent":"holder","kind":"propose","lease_ms":1000,"writes":[{"path":"doc.x","op":"set"}]}`, id), 20*time.Second)
			if g.Outcome != intents.OutcomeGranted {
				t.Fatalf("holder: %+v", g)
			}
			wid := ulid.Make().String()
			if d := waiter.send(wid, fmt.Sprintf(`{"id":%q,"agent":"waiter","kind":"apply","on_conflict":"wait","wait_ms":2000,"writes":[{"path":"doc.x","op":"set","value":1}]}`, wid), 20*time.Second); d.Outcome != intents.OutcomeQueued {
				t.Fatalf("waiter: %+v", d)
			}
			// The pause is the scenario, not a synchronisation: the
			// coordinator must not run while the lease ends (1s) and the
			// wait ends (2s).
			const outage = 3 * time.Second
			switch how {
			case "paused":
				if err := child.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				time.Sleep(outage)
				if err := child.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
			case "restarted":
				child.kill(t)
				time.Sleep(outage)
				child, _ = startKillChild(t, ns.ClientURL(), dir)
			}
			d := waiter.await(wid, 20*time.Second)
			if d.Outcome != intents.OutcomeRejected || d.Reason != intents.ReasonWaitTimeout {
				t.Fatalf("the waiter after the coordinator %s: %+v, want wait_timeout", how, d)
			}
			m, err := nc.Request(intents.Subjects{}.API(intents.APIStateGet), []byte(`{"paths":["doc.x"]}`), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var st stateReply
			if err := json.Unmarshal(m.Data, &st); err != nil || st.Values["doc.x"].Exists {
				t.Fatalf("doc.x after the late waiter: %s %v", m.Data, err)
			}
			child.stop(t)
		})
	}
}
