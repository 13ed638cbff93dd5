// Package js_test runs the JavaScript agent of this directory (agent.mjs,
// nats.js v3) against a real coordinator: the proof that the wire contract
// of SPEC §6 is enough for a client in another language.
package js_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/coagent/coagent/internal/nodetest"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// text is what agent.mjs writes into its section.
const text = "text written from JavaScript"

// requireNode returns the node binary, or skips the test when node or the
// packages of package-lock.json (npm ci) are missing — unless
// COAGENT_JS_REQUIRED=1, as in CI, where a missing one is a failure.
func requireNode(t *testing.T) string {
	t.Helper()
	return nodetest.Require(t, "examples/js", "@nats-io/jetstream", "the JavaScript agent")
}

// startCoordinator starts an embedded NATS server with JetStream and a
// coordinator on it, and returns the server's URL and a connection of the
// test's own.
func startCoordinator(t *testing.T) (string, *nats.Conn) {
	t.Helper()
	ns := natstest.Run(t)
	coordtest.Start(t, ns, coordinator.Options{})
	return ns.ClientURL(), natstest.Connect(t, ns)
}

// step is one line agent.mjs prints: a step name, the path its intent took
// (api: request/reply on coagent.api.submit.<agent>; stream: stored on
// coagent.intents.<agent>, its decision collected after) and the
// decision's fields (or, for the last step, the state.get reply).
type step struct {
	Step string `json:"step"`
	Via  string `json:"via"`
	intents.Decision
}

// runAgent runs agent.mjs as agent on task and returns its exit status and
// the steps it printed.
func runAgent(t *testing.T, node, url, agent, task string) (int, []step) {
	t.Helper()
	code, steps, _ := startAgent(t, node, url, agent, task)()
	return code, steps
}

// startAgent starts agent.mjs as agent on task, with extra environment
// variables; the function it returns waits for the agent to end and
// returns its exit status, the steps it printed and its stderr. It must be
// called on the test's goroutine.
func startAgent(t *testing.T, node, url, agent, task string, env ...string) func() (int, []step, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	cmd := exec.CommandContext(ctx, node, "agent.mjs")
	cmd.Env = append(append(os.Environ(), "NATS_URL="+url, "AGENT="+agent, "TASK="+task), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("%s: node agent.mjs: %v", agent, err)
	}
	return func() (int, []step, string) {
		t.Helper()
		defer cancel()
		err := cmd.Wait()
		t.Logf("%s stdout:\n%s", agent, stdout.String())
		if stderr.Len() > 0 {
			t.Logf("%s stderr:\n%s", agent, stderr.String())
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: node agent.mjs did not finish: %v", agent, ctx.Err())
		}
		code := 0
		if err != nil {
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("%s: node agent.mjs: %v", agent, err)
			}
			code = exit.ExitCode()
		}
		var steps []step
		sc := bufio.NewScanner(&stdout)
		for sc.Scan() {
			var s step
			if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
				t.Fatalf("%s: output line %q is not a JSON step: %v", agent, sc.Text(), err)
			}
			steps = append(steps, s)
		}
		return code, steps, stderr.String()
	}
}

// find returns the step named name, failing the test if there is none.
func find(t *testing.T, steps []step, name string) step {
	t.Helper()
	for _, s := range steps {
		if s.Step == name {
			return s
		}
	}
	t.Fatalf("no %q step in the output", name)
	return step{}
}

// stateValue is one path of a state.get reply (SPEC §6).
type stateValue struct {
	Exists  bool            `json:"exists"`
	Value   json.RawMessage `json:"value"`
	Version uint64          `json:"version"`
	ModRev  uint64          `json:"mod_rev"`
}

// stateGet reads paths through the API, as any client would.
func stateGet(t *testing.T, nc *nats.Conn, paths ...string) map[string]stateValue {
	t.Helper()
	req, _ := json.Marshal(map[string]any{"paths": paths})
	m, err := nc.Request(intents.Subjects{}.API(intents.APIStateGet), req, 5*time.Second)
	if err != nil {
		t.Fatalf("state.get: %v", err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("state.get: %s: %s", code, m.Header.Get("Nats-Service-Error"))
	}
	var reply struct {
		Rev    uint64                `json:"rev"`
		Values map[string]stateValue `json:"values"`
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		t.Fatalf("state.get reply %s: %v", m.Data, err)
	}
	return reply.Values
}

// wantValue fails the test unless path exists in values and its value
// encodes as want does.
func wantValue(t *testing.T, values map[string]stateValue, path string, want any) {
	t.Helper()
	v, ok := values[path]
	if !ok || !v.Exists {
		t.Fatalf("%s does not exist; state %+v", path, values)
	}
	var got any
	if err := json.Unmarshal(v.Value, &got); err != nil {
		t.Fatalf("%s: value %s: %v", path, v.Value, err)
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Errorf("%s = %s, want %s", path, g, w)
	}
}

func TestJavaScriptAgent(t *testing.T) {
	node := requireNode(t)
	url, nc := startCoordinator(t)

	// What js-writer sends, as the server's subjects see it: the main path
	// and the stream.
	subj := intents.Subjects{}
	submits, err := nc.SubscribeSync(subj.Submit("js-writer"))
	if err != nil {
		t.Fatal(err)
	}
	stored, err := nc.SubscribeSync(subj.Intents("js-writer"))
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()

	// js-writer claims t1, writes its section in a transaction, counts its run.
	code, steps := runAgent(t, node, url, "js-writer", "t1")
	if code != 0 {
		t.Fatalf("js-writer exited with status %d, want 0", code)
	}
	for _, want := range []struct{ step, via, outcome string }{
		{"claim", "api", "applied"}, {"propose", "api", "granted"}, {"commit", "api", "committed"}, {"incr", "stream", "applied"},
	} {
		s := find(t, steps, want.step)
		if string(s.Outcome) != want.outcome || s.Via != want.via {
			t.Errorf("%s: outcome %q (%s %s) via %q, want %q via %q", want.step, s.Outcome, s.Reason, s.Detail, s.Via, want.outcome, want.via)
		}
		if s.Intent == "" || s.Agent != "js-writer" {
			t.Errorf("%s: decision names intent %q of agent %q, want an intent of js-writer", want.step, s.Intent, s.Agent)
		}
	}
	if g := find(t, steps, "propose"); g.Txn == "" || g.Fence == 0 {
		t.Errorf("propose: granted without txn or fence: %+v", g.Decision)
	}
	find(t, steps, "state")
	sentBy := func(sub *nats.Subscription) map[string]bool {
		ids := map[string]bool{}
		for {
			m, err := sub.NextMsg(0)
			if err != nil {
				return ids
			}
			var in intents.Intent
			if err := json.Unmarshal(m.Data, &in); err != nil {
				t.Fatalf("%s carried %q: %v", m.Subject, m.Data, err)
			}
			ids[in.ID] = true
		}
	}
	nc.Flush()
	viaAPI, viaStream := sentBy(submits), sentBy(stored)
	for _, name := range []string{"claim", "propose", "commit", "incr"} {
		s := find(t, steps, name)
		if viaAPI[s.Intent] != (s.Via == "api") || viaStream[s.Intent] != (s.Via == "stream") {
			t.Errorf("%s (%s) says via %s; sent on the submit subject: %v, on the intents stream: %v", name, s.Intent, s.Via, viaAPI[s.Intent], viaStream[s.Intent])
		}
	}

	values := stateGet(t, nc, "tasks.t1.owner", "report.sections.t1", "stats.js_runs")
	wantValue(t, values, "tasks.t1.owner", "js-writer")
	wantValue(t, values, "report.sections.t1", text)
	wantValue(t, values, "stats.js_runs", 1)

	// js-other wants the same task: its claim's precondition fails, and it
	// stops there with status 3.
	code, steps = runAgent(t, node, url, "js-other", "t1")
	if code != 3 {
		t.Fatalf("js-other exited with status %d, want 3 (claim rejected)", code)
	}
	claim := find(t, steps, "claim")
	if claim.Outcome != intents.OutcomeRejected || claim.Reason != intents.ReasonPreconditionFailed {
		t.Errorf("js-other's claim: %s (%s), want rejected (precondition_failed)", claim.Outcome, claim.Reason)
	}
	for _, s := range steps {
		if s.Step != "claim" {
			t.Errorf("js-other went on to %q after its claim was rejected", s.Step)
		}
	}
	values = stateGet(t, nc, "tasks.t1.owner", "stats.js_runs")
	wantValue(t, values, "tasks.t1.owner", "js-writer")
	wantValue(t, values, "stats.js_runs", 1)
}

// TestJavaScriptAgentSendsAgain: the agent's first requests go unanswered
// (a subscriber takes them, as a coordinator that is paused or whose reply
// is lost would); it sends the same intent again, with the same id, until
// a coordinator started meanwhile answers, and goes on.
func TestJavaScriptAgentSendsAgain(t *testing.T) {
	node := requireNode(t)
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	silent, err := nc.SubscribeSync(intents.Subjects{}.Submit("js-late"))
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	wait := startAgent(t, node, ns.ClientURL(), "js-late", "t9", "REQUEST_TIMEOUT_MS=500")
	first, err := silent.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the agent sent nothing: %v", err)
	}
	var claim intents.Intent
	if err := json.Unmarshal(first.Data, &claim); err != nil {
		t.Fatal(err)
	}
	// Sent again unanswered before any coordinator runs.
	for {
		m, err := silent.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("the agent did not send its claim again: %v", err)
		}
		var in intents.Intent
		if json.Unmarshal(m.Data, &in) == nil && in.ID == claim.ID {
			break
		}
	}
	coordtest.Start(t, ns, coordinator.Options{})
	code, steps, stderr := wait()
	if code != 0 {
		t.Fatalf("js-late exited with status %d, want 0", code)
	}
	if c := find(t, steps, "claim"); c.Intent != claim.ID || c.Outcome != intents.OutcomeApplied {
		t.Fatalf("claim: %+v, want %s applied", c.Decision, claim.ID)
	}
	if !strings.Contains(stderr, "sending it again") {
		t.Errorf("stderr %q does not say the intent was sent again", stderr)
	}
	wantValue(t, stateGet(t, nc, "tasks.t9.owner"), "tasks.t9.owner", "js-late")
}

// TestJavaScriptAgentWaitsThroughInterim: another agent holds the section;
// the agent's propose is queued, and it asks again with the same intent
// until the holder aborts and the request in flight is answered granted.
func TestJavaScriptAgentWaitsThroughInterim(t *testing.T) {
	node := requireNode(t)
	url, nc := startCoordinator(t)
	subj := intents.Subjects{}
	api := func(body string) *intents.Decision {
		t.Helper()
		m, err := nc.Request(subj.Submit(""), []byte(body), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var d intents.Decision
		if err := json.Unmarshal(m.Data, &d); err != nil {
			t.Fatalf("submit reply %s: %v", m.Data, err)
		}
		return &d
	}
	grant := api(`{"id":"` + ulid.Make().String() + `","agent":"holder","kind":"propose","writes":[{"path":"report.sections.t5","op":"set"}]}`)
	if grant.Outcome != intents.OutcomeGranted {
		t.Fatalf("the holder's propose: %+v", grant)
	}
	submits, err := nc.SubscribeSync(subj.Submit("js-waiter"))
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	wait := startAgent(t, node, url, "js-waiter", "t5")
	// The claim, then the propose twice: once for its first decision
	// (queued), once more for its final one.
	seen := map[string]int{}
	var propose string
	for propose == "" || seen[propose] < 2 {
		m, err := submits.NextMsg(15 * time.Second)
		if err != nil {
			t.Fatalf("the agent did not ask again for its propose's decision (sent %v): %v", seen, err)
		}
		var in intents.Intent
		if err := json.Unmarshal(m.Data, &in); err != nil {
			t.Fatal(err)
		}
		seen[in.ID]++
		if in.Kind == intents.KindPropose {
			propose = in.ID
		}
	}
	if d := api(fmt.Sprintf(`{"id":%q,"agent":"holder","kind":"abort","txn":%q,"fence":%d}`, ulid.Make().String(), grant.Txn, grant.Fence)); d.Outcome != intents.OutcomeAborted {
		t.Fatalf("the holder's abort: %+v", d)
	}
	code, steps, stderr := wait()
	if code != 0 {
		t.Fatalf("js-waiter exited with status %d, want 0", code)
	}
	if g := find(t, steps, "propose"); g.Intent != propose || g.Outcome != intents.OutcomeGranted {
		t.Fatalf("propose: %+v, want %s granted", g.Decision, propose)
	}
	if !strings.Contains(stderr, propose+" is queued") {
		t.Errorf("stderr %q does not say the propose was queued", stderr)
	}
	wantValue(t, stateGet(t, nc, "report.sections.t5"), "report.sections.t5", text)
}
