package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// A case no arbiter resolves by its deadline is rejected by the fallback
// and kept as a dead letter; dlq retry sends its intent again under a new
// id, which escalates again while the conflict stands.
func TestDeadLetters(t *testing.T) {
	url, stop := serve(t, filepath.Join(t.TempDir(), "data"), "--arbiter-timeout", "300ms")
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subj := intents.Subjects{}
	sub, err := nc.SubscribeSync(subj.Decisions("w2"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	next := func() *intents.Decision {
		t.Helper()
		return natstest.Next[intents.Decision](t, sub)
	}
	holder := `{"id":"` + ulid.Make().String() + `","agent":"w1","kind":"propose","lease_ms":600000,"writes":[{"path":"doc.x","op":"set"}]}`
	if out, _, err := runCmd(t, holder, "submit", "--nats", url, "-"); err != nil {
		t.Fatalf("propose: %s %v", out, err)
	}
	esc := ulid.Make().String()
	nc.Publish(subj.Intents("w2"), []byte(`{"id":"`+esc+`","agent":"w2","kind":"apply","on_conflict":"escalate","writes":[{"path":"doc.x","op":"set","value":1}]}`))
	if d := next(); d.Outcome != intents.OutcomeEscalated {
		t.Fatalf("escalate: %+v", d)
	}
	if d := next(); d.Reason != intents.ReasonArbiterRejected || d.Intent != esc {
		t.Fatalf("fallback: %+v", d)
	}
	// The dead letter is published once the fallback's batch is durable;
	// a consumer of the stream sees it once it is stored.
	dead, err := js.OrderedConsumer(context.Background(), subj.Stream(intents.StreamDLQ), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Next(jetstream.FetchMaxWait(10 * time.Second)); err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	out, _, err := runCmd(t, "", "dlq", "--nats", url, "list")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^ID +DEADLINE +AGENT +INTENT +CONFLICTS\n` + esc + ` +\S+ +w2 +apply +write-write doc\.x with w1`).MatchString(out) {
		t.Fatalf("dlq list: %q", out)
	}
	if out, _, err = runCmd(t, "", "dlq", "--nats", url, "show", esc); err != nil || !strings.Contains(out, `"deadline"`) {
		t.Fatalf("dlq show: %q %v", out, err)
	}
	// The retried intent escalates again, and the fallback rejects it
	// again: retry prints that final decision, and exits 1 as submit would.
	p := runBin(t, nil, "", "dlq", "--nats", url, "retry", esc)
	m := regexp.MustCompile(`^retried ` + esc + ` as intent (\S+) of agent w2\n$`).FindStringSubmatch(p.stderr)
	if p.status != 1 || m == nil || p.stdout != "rejected "+m[1]+" arbiter_rejected (doc.x v0): no arbiter resolved the escalation by its deadline; the fallback rejects it; write-write conflict on doc.x with w1\n" {
		t.Fatalf("dlq retry: %+v", p)
	}
	if d := next(); d.Outcome != intents.OutcomeEscalated || d.Intent != m[1] {
		t.Fatalf("the retried intent: %+v, want a new escalation", d)
	}
	if out, _, _ = runCmd(t, "", "dlq", "--nats", url, "list"); strings.Contains(out, esc) {
		t.Fatalf("the dead letter stays after retry: %q", out)
	}
	// The retry was rejected by the fallback in turn: its dead letter,
	// retried with -o json, prints the decision's JSON.
	if d := next(); d.Intent != m[1] || d.Reason != intents.ReasonArbiterRejected {
		t.Fatalf("the retried intent's fallback: %+v", d)
	}
	if _, err := dead.Next(jetstream.FetchMaxWait(10 * time.Second)); err != nil {
		t.Fatalf("no second dead letter: %v", err)
	}
	p = runBin(t, nil, "", "dlq", "retry", m[1], "--nats", url, "-o", "json", "--wait", "10s")
	var d intents.Decision
	if p.status != 1 || json.Unmarshal([]byte(p.stdout), &d) != nil || d.Intent == m[1] || d.Agent != "w2" || d.Reason != intents.ReasonArbiterRejected ||
		!strings.HasPrefix(p.stderr, "retried "+m[1]+" as intent "+d.Intent+" of agent w2\n") {
		t.Fatalf("dlq retry -o json: %+v", p)
	}
	// That retry's dead letter is dropped: gone, and not found again.
	if _, err := dead.Next(jetstream.FetchMaxWait(10 * time.Second)); err != nil {
		t.Fatalf("no third dead letter: %v", err)
	}
	if p = runBin(t, nil, "", "dlq", "drop", d.Intent, "--nats", url); p.status != 0 || p.stdout != "dropped "+d.Intent+"\n" {
		t.Fatalf("dlq drop: %+v", p)
	}
	if p = runBin(t, nil, "", "dlq", "list", "--nats", url); p.status != 0 || p.stdout != "" || !strings.Contains(p.stderr, "no dead letters") {
		t.Fatalf("dlq list after the drop: %+v", p)
	}
	if p = runBin(t, nil, "", "dlq", "drop", d.Intent, "--nats", url); p.status != 1 || !strings.Contains(p.stderr, "no dead letter "+d.Intent) {
		t.Fatalf("dlq drop of a dropped letter: %+v", p)
	}
}

// A task tried past its rule's max_retries is a dead letter: dlq lists
// and shows it, nobody claims it, and dlq retry, as one of the rule's
// operators, puts it back in its pool with its tries at 0 and removes the
// letter; as anyone else it is refused and the letter stays.
func TestDeadTask(t *testing.T) {
	dir := t.TempDir()
	url, stop := serve(t, filepath.Join(dir, "data"))
	defer stop()
	rules := filepath.Join(dir, "rules.json")
	if err := os.WriteFile(rules, []byte(`{"rules":[{"pattern":"tasks.*","kind":"task","lease":"1m","reclaim_to":"PENDING","max_retries":1,"operators":["lead"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if p := runBin(t, nil, "", "rules", "set", rules, "--nats", url); p.status != 0 {
		t.Fatalf("rules set: %+v", p)
	}
	run := func(status int, out string, args ...string) []string {
		t.Helper()
		p := runBin(t, []string{"NATS_URL=" + url}, "", args...)
		m := regexp.MustCompile(out).FindStringSubmatch(p.stdout)
		if p.status != status || m == nil {
			t.Fatalf("coagent %s: %+v", strings.Join(args, " "), p)
		}
		return m
	}
	// Two tries, each given back to the pool by its owner: the second is
	// past max_retries 1.
	for _, agent := range []string{"w1", "w2"} {
		m := run(0, `fence (\d+) `, "task", "claim", "tasks.t1", "--agent", agent)
		run(0, `^applied `, "task", "release", "tasks.t1", "--fence", m[1], "--agent", agent, "--status", "PENDING")
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := js.OrderedConsumer(context.Background(), intents.Subjects{}.Stream(intents.StreamDLQ), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Next(jetstream.FetchMaxWait(10 * time.Second)); err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	run(0, `(?m)^tasks\.t1 +\S+ +w2 +task DEAD, 2 tries +last try: released$`, "dlq", "list")
	run(0, `"max_retries": 1`, "dlq", "show", "tasks.t1")
	run(1, `^rejected \S+ illegal_transition .*dead letter`, "task", "claim", "tasks.t1", "--agent", "w3")
	if p := runBin(t, []string{"NATS_URL=" + url}, "", "dlq", "retry", "tasks.t1", "--agent", "w3"); p.status != 1 {
		l := runBin(t, []string{"NATS_URL=" + url}, "", "log", "--agent", "w3", "-o", "json")
		t.Fatalf("%+v\n%+v", p, l)
	}
	run(0, `(?m)^tasks\.t1 `, "dlq", "list")
	run(0, `^applied `, "dlq", "retry", "tasks.t1", "--agent", "lead")
	if p := runBin(t, []string{"NATS_URL=" + url}, "", "dlq", "list"); p.status != 0 || p.stdout != "" || !strings.Contains(p.stderr, "no dead letters") {
		t.Fatalf("dlq list after the retry: %+v", p)
	}
	run(0, `^tasks\.t1 = {"status":"PENDING","tries":0}`, "get", "tasks.t1")
	run(0, `^applied `, "task", "claim", "tasks.t1", "--agent", "w3")
}

// An escalation is an open case a person lists, reads and settles from
// the command line: the resolution decides the escalated intent, and the
// case is gone.
func TestCaseResolve(t *testing.T) {
	url, stop := serve(t, filepath.Join(t.TempDir(), "data"), "--arbiter-timeout", "5m")
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subj := intents.Subjects{}
	sub, err := nc.SubscribeSync(subj.Decisions("w2"))
	if err != nil {
		t.Fatal(err)
	}
	holder := `{"id":"` + ulid.Make().String() + `","agent":"w1","kind":"propose","lease_ms":600000,"writes":[{"path":"doc.x","op":"set"}]}`
	if out, _, err := runCmd(t, holder, "submit", "--nats", url, "-"); err != nil {
		t.Fatalf("propose: %s %v", out, err)
	}
	esc := ulid.Make().String()
	nc.Publish(subj.Intents("w2"), []byte(`{"id":"`+esc+`","agent":"w2","kind":"apply","on_conflict":"escalate","writes":[{"path":"doc.x","op":"set","value":1}]}`))
	if d := natstest.Next[intents.Decision](t, sub); d.Outcome != intents.OutcomeEscalated {
		t.Fatalf("escalate: %+v", d)
	}
	p := runBin(t, nil, "", "case", "list", "--nats", url)
	if p.status != 0 || !regexp.MustCompile(`(?m)^ID +KIND +DEADLINE +AGENT +INTENT +CONFLICTS\n`+esc+` +conflict +\S+ +w2 +apply +write-write doc\.x with w1$`).MatchString(p.stdout) {
		t.Fatalf("case list: %+v", p)
	}
	if p = runBin(t, nil, "", "case", "show", esc, "--nats", url); p.status != 0 || !strings.Contains(p.stdout, `"deadline"`) || !strings.Contains(p.stdout, esc) {
		t.Fatalf("case show: %+v", p)
	}
	if p = runBin(t, nil, "", "case", "resolve", esc, "--winner", esc, "--nats", url); p.status != 2 || !strings.Contains(p.stderr, "--rationale") {
		t.Fatalf("case resolve without --rationale: %+v", p)
	}
	if p = runBin(t, nil, "", "case", "resolve", esc, "--winner", esc, "--rationale", "w2's value is the one we need", "--agent", "ann", "--nats", url); p.status != 0 || p.stdout != "resolved "+esc+" as ann\n" {
		t.Fatalf("case resolve: %+v", p)
	}
	if d := natstest.Next[intents.Decision](t, sub); d.Intent != esc || !d.Outcome.Final() {
		t.Fatalf("the escalated intent after the resolution: %+v", d)
	}
	if p = runBin(t, nil, "", "case", "list", "--nats", url); p.status != 0 || p.stdout != "" || !strings.Contains(p.stderr, "no open cases") {
		t.Fatalf("case list after the resolution: %+v", p)
	}
	if p = runBin(t, nil, "", "case", "resolve", esc, "--winner", esc, "--rationale", "again", "--nats", url); p.status != 1 {
		t.Fatalf("a second resolution: %+v", p)
	}
}

// A task whose lease ends with an effect pending is a case of kind
// reconcile: a person finds it in case list and declares the effect with
// task reconcile; then the task is claimed again.
func TestReconcileCase(t *testing.T) {
	dir := t.TempDir()
	url, stop := serve(t, filepath.Join(dir, "data"))
	defer stop()
	rules := filepath.Join(dir, "rules.json")
	if err := os.WriteFile(rules, []byte(`{"rules":[{"pattern":"tasks.*","kind":"task","lease":"3s","reclaim_to":"PENDING"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if p := runBin(t, nil, "", "rules", "set", rules, "--nats", url); p.status != 0 {
		t.Fatalf("rules set: %+v", p)
	}
	run := func(status int, out string, args ...string) []string {
		t.Helper()
		p := runBin(t, []string{"NATS_URL=" + url}, "", args...)
		m := regexp.MustCompile(out).FindStringSubmatch(p.stdout)
		if p.status != status || m == nil {
			t.Fatalf("coagent %s: %+v", strings.Join(args, " "), p)
		}
		return m
	}
	fence := run(0, `fence (\d+) `, "task", "claim", "tasks.t1", "--agent", "w1")[1]
	effect := `{"agent":"w1","kind":"apply","fence":` + fence + `,"writes":[{"path":"tasks.t1.effects.mail","op":"set","value":{"status":"pending","description":"send the invoice"}}]}`
	if out, _, err := runCmd(t, effect, "submit", "--nats", url, "-"); err != nil {
		t.Fatalf("the pending effect: %s %v", out, err)
	}
	// The lease runs out unrenewed: the task waits to be reconciled.
	natstest.CheckFor(t, 10*time.Second, "the reconcile case", func() error {
		p := runBin(t, []string{"NATS_URL=" + url}, "", "case", "list")
		if !regexp.MustCompile(`(?m)^tasks\.t1 +reconcile +- +- +- +effects pending: mail$`).MatchString(p.stdout) {
			return fmt.Errorf("case list: %+v", p)
		}
		return nil
	})
	run(0, `"description": "send the invoice"`, "case", "show", "tasks.t1")
	run(1, `^rejected \S+ illegal_transition`, "task", "claim", "tasks.t1", "--agent", "w2")
	if p := runBin(t, []string{"NATS_URL=" + url}, "", "task", "reconcile", "tasks.t1", "--effect", "mail=maybe", "--why", "x"); p.status != 2 {
		t.Fatalf("task reconcile with a bad status: %+v", p)
	}
	run(0, `^applied `, "task", "reconcile", "tasks.t1", "--effect", "mail=confirmed", "--why", "the invoice is in the outbox", "--agent", "ann")
	if p := runBin(t, []string{"NATS_URL=" + url}, "", "case", "list"); p.status != 0 || p.stdout != "" || !strings.Contains(p.stderr, "no open cases") {
		t.Fatalf("case list once reconciled: %+v", p)
	}
	run(0, `^applied `, "task", "claim", "tasks.t1", "--agent", "w2")
}

// An intent a rule holds for approval is an open case of kind approval: a
// person lists it, reads its diff, and approves or denies it from the
// command line; the quorum's last approval decides it, one denial rejects
// it, and an approver the rule does not name is refused.
func TestCaseApprove(t *testing.T) {
	dir := t.TempDir()
	url, stop := serve(t, filepath.Join(dir, "data"))
	defer stop()
	rules := filepath.Join(dir, "rules.json")
	if err := os.WriteFile(rules, []byte(`{"agents":{"lina":{"roles":["lead"]},"luc":{"roles":["lead"]}},
		"rules":[{"pattern":"deploy.**","approve":{"by":["role:lead"],"quorum":2,"timeout":"10m"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if p := runBin(t, nil, "", "rules", "set", rules, "--nats", url); p.status != 0 {
		t.Fatalf("rules set: %+v", p)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subj := intents.Subjects{}
	decisions, err := nc.SubscribeSync(subj.Decisions("dev"))
	if err != nil {
		t.Fatal(err)
	}
	notices, err := nc.SubscribeSync(subj.Notices("lina"))
	if err != nil {
		t.Fatal(err)
	}
	submit := func(value string) string {
		t.Helper()
		id := ulid.Make().String()
		nc.Publish(subj.Intents("dev"), []byte(`{"id":"`+id+`","agent":"dev","kind":"apply","writes":[{"path":"deploy.web","op":"set","value":`+value+`}]}`))
		if d := natstest.Next[intents.Decision](t, decisions); d.Intent != id || d.Outcome != intents.OutcomeEscalated {
			t.Fatalf("an intent under the gate: %+v", d)
		}
		return id
	}
	run := func(status int, out string, args ...string) {
		t.Helper()
		p := runBin(t, []string{"NATS_URL=" + url}, "", args...)
		if p.status != status || !regexp.MustCompile(out).MatchString(p.stdout+p.stderr) {
			t.Fatalf("coagent %s: %+v", strings.Join(args, " "), p)
		}
	}
	id := submit(`{"version":3}`)
	if ev := natstest.Next[intents.Event](t, notices); ev.Notice == nil || ev.Notice.Kind != intents.NoticeApproval || ev.Notice.Intent != id {
		t.Fatalf("the approver's notice: %+v", ev)
	}
	run(0, `(?m)^`+id+` +approval +\S+ +dev +apply +approval of deploy\.web: 0 of 2 by role:lead$`, "case", "list")
	run(0, `"after": \{\s+"deploy.web": \{\s+"exists": true,\s+"value": \{\s+"version": 3`, "case", "show", id)
	run(1, `agent bob may not vote on case `+id+`: rules\[0\] lets only role:lead`, "case", "approve", id, "--agent", "bob")
	run(1, `may not approve or deny its own intent`, "case", "approve", id, "--agent", "dev")
	run(0, `^approved `+id+` as lina\nthe case waits for more approvals\n$`, "case", "approve", id, "--agent", "lina", "--rationale", "ok")
	run(1, `has voted on case `+id+` already`, "case", "approve", id, "--agent", "lina")
	run(0, `(?m)approval of deploy\.web: 1 of 2 by role:lead$`, "case", "list")
	run(0, `^approved `+id+` as luc\nintent `+id+`: applied\n$`, "case", "approve", id, "--agent", "luc")
	if d := natstest.Next[intents.Decision](t, decisions); d.Intent != id || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("the intent once approved: %+v", d)
	}
	run(0, `^deploy\.web = {"version":3}`, "get", "deploy.web")
	// The votes are in the intent's story, with who and why.
	run(0, `(?m) vote +lina +intent=`+id+` approve by lina: ok$`, "log", "--intent", id)

	// A denial needs a reason, and rejects the intent naming who and why.
	id = submit(`{"version":4}`)
	run(2, `--reason`, "case", "deny", id, "--agent", "luc")
	run(0, `^denied `+id+` as luc\nintent `+id+`: rejected \(arbiter_rejected\): denied by luc: not during the freeze\n$`,
		"case", "deny", id, "--agent", "luc", "--reason", "not during the freeze")
	if d := natstest.Next[intents.Decision](t, decisions); d.Intent != id || d.Reason != intents.ReasonArbiterRejected {
		t.Fatalf("the intent once denied: %+v", d)
	}
	run(0, `no open cases`, "case", "list")
	run(0, `^deploy\.web = {"version":3}`, "get", "deploy.web")
}

// A refused transition sent to review: case list shows it as kind review,
// and a reviewer's approval from the command line applies it.
func TestCaseReview(t *testing.T) {
	dir := t.TempDir()
	url, stop := serve(t, filepath.Join(dir, "data"))
	defer stop()
	rules := filepath.Join(dir, "rules.json")
	if err := os.WriteFile(rules, []byte(`{"rules":[{"pattern":"tasks.*.status","transitions":{"PENDING":["RUNNING"],"RUNNING":["DONE"]},
		"review":{"by":["lina"],"timeout":"10m"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(status int, out string, args ...string) {
		t.Helper()
		p := runBin(t, []string{"NATS_URL=" + url}, "", args...)
		if p.status != status || !regexp.MustCompile(out).MatchString(p.stdout+p.stderr) {
			t.Fatalf("coagent %s: %+v", strings.Join(args, " "), p)
		}
	}
	run(0, ``, "rules", "set", rules)
	run(0, `^applied`, "put", "tasks.t1.status", `"PENDING"`, "--agent", "w1")
	id := ulid.Make().String()
	skip := `{"id":"` + id + `","agent":"w1","kind":"apply","writes":[{"path":"tasks.t1.status","op":"set","value":"DONE"}]}`
	if out, _, _ := runCmd(t, skip, "submit", "--nats", url, "--timeout", "1s", "-"); !strings.Contains(out, "escalated") {
		t.Fatalf("an illegal transition under review: %q", out)
	}
	run(0, `(?m)^`+id+` +review +\S+ +w1 +apply +approval of tasks\.t1\.status: 0 of 1 by lina$`, "case", "list")
	run(0, `"refusal": "tasks.t1.status: \\"PENDING\\" → DONE is not a legal transition`, "case", "show", id)
	run(0, `^approved `+id+` as lina\nintent `+id+`: applied\n$`, "case", "approve", id, "--agent", "lina", "--rationale", "done offline")
	run(0, `^tasks\.t1\.status = "DONE"`, "get", "tasks.t1.status")
}

// An agent's question (meta.ask) is an open case of kind input: a person
// answers it from the command line, an answer the question's schema
// refuses changes nothing, and the answer is written where the agent said.
func TestCaseAnswer(t *testing.T) {
	url, stop := serve(t, filepath.Join(t.TempDir(), "data"))
	defer stop()
	run := func(status int, out string, args ...string) {
		t.Helper()
		p := runBin(t, []string{"NATS_URL=" + url}, "", args...)
		if p.status != status || !regexp.MustCompile(out).MatchString(p.stdout+p.stderr) {
			t.Fatalf("coagent %s: %+v", strings.Join(args, " "), p)
		}
	}
	id := ulid.Make().String()
	ask := `{"id":"` + id + `","agent":"w1","kind":"apply","writes":[{"path":"plan.budget","op":"set","value":null}],
		"meta":{"ask":{"question":"What is the budget?","schema":{"type":"number"}}}}`
	if out, _, _ := runCmd(t, ask, "submit", "--nats", url, "--timeout", "1s", "-"); !strings.Contains(out, "escalated") {
		t.Fatalf("the question: %q", out)
	}
	run(0, `(?m)^`+id+` +input +\S+ +w1 +apply +a question, the answer for plan\.budget$`, "case", "list")
	run(0, `"question": "What is the budget\?"`, "case", "show", id)
	run(2, `VALUE "lots": not JSON`, "case", "answer", id, "lots", "--agent", "ana")
	run(1, `does not satisfy the question's schema`, "case", "answer", id, "lots", "--string", "--agent", "ana")
	run(0, `^answered `+id+` as ana\nintent `+id+`: applied\n$`, "case", "answer", id, "12000", "--agent", "ana")
	run(0, `^plan\.budget = 12000`, "get", "plan.budget")
}
