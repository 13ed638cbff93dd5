package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// TestTxnList: the transactions in flight, filtered by agent and path,
// as a table or the API's JSON; none is said on stderr.
func TestTxnList(t *testing.T) {
	url, stop := serve(t, filepath.Join(t.TempDir(), "data"))
	defer stop()
	if p := runBin(t, nil, "", "txn", "list", "--nats", url); p.status != 0 || p.stdout != "" || p.stderr != "no transactions in flight\n" {
		t.Fatalf("txn list of none: %+v", p)
	}
	if p := runBin(t, nil, "", "txn", "list", "--nats", url, "-o", "json"); p.status != 0 || p.stdout != `{"txns":[]}`+"\n" || p.stderr != "no transactions in flight\n" {
		t.Fatalf("txn list -o json of none: %+v", p)
	}
	submitOK(t, url, set(ulid.Make().String(), "w1", "materials.m1", "notes"))
	txn := ulid.Make().String()
	submitOK(t, url, `{"id":"`+txn+`","agent":"w1","kind":"propose","lease_ms":600000,"reads":[{"path":"materials.m1"}],"writes":[{"path":"doc.title","op":"set","value":"Q3"}]}`)

	row := regexp.MustCompile(`^TXN +AGENT +FENCE +LEASE EXPIRES +WRITES +READS\n\S+ +w1 +\d+ +\S+ +set doc\.title +materials\.m1(@v1)?\n$`)
	for _, args := range [][]string{{}, {"--agent", "w1"}, {"--path", "doc"}, {"--path", "materials.m1.x"}} {
		if p := runBin(t, nil, "", append([]string{"txn", "list", "--nats", url}, args...)...); p.status != 0 || !row.MatchString(p.stdout) || p.stderr != "" {
			t.Errorf("txn list %v: %+v", args, p)
		}
	}
	for _, args := range [][]string{{"--agent", "w2"}, {"--path", "notes"}} {
		if p := runBin(t, nil, "", append([]string{"txn", "--nats", url, "list"}, args...)...); p.status != 0 || p.stdout != "" || p.stderr != "no transactions in flight\n" {
			t.Errorf("txn list %v: %+v", args, p)
		}
	}
	p := runBin(t, nil, "", "txn", "list", "--nats", url, "--json")
	var got struct {
		Txns []struct {
			Txn, Agent string
			Fence      uint64
			Writes     []intents.Write
		}
	}
	if p.status != 0 || json.Unmarshal([]byte(p.stdout), &got) != nil || len(got.Txns) != 1 || got.Txns[0].Agent != "w1" ||
		got.Txns[0].Fence == 0 || len(got.Txns[0].Writes) != 1 || got.Txns[0].Writes[0].Path != "doc.title" {
		t.Fatalf("txn list --json: %+v", p)
	}
	if p := runBin(t, nil, "", "txn", "list", "--nats", url, "--path", "bad path"); p.status != 2 || !strings.HasPrefix(p.stderr, `coagent: --path "bad path": segment "bad path"`) {
		t.Fatalf("txn list --path 'bad path': %+v", p)
	}
}

// TestStatePrefix: every leaf under a path with its version and mod_rev,
// read at one revision; nothing under an absent one.
func TestStatePrefix(t *testing.T) {
	url, stop := serve(t, filepath.Join(t.TempDir(), "data"))
	defer stop()
	submitOK(t, url, set(ulid.Make().String(), "w1", "report", map[string]any{"title": "Q2", "sections": map[string]any{"s1": map[string]any{"text": "a"}, "s2": map[string]any{}}, "tags": []int{1, 2}}))
	submitOK(t, url, set(ulid.Make().String(), "w1", "report.title", "Q3"))
	submitOK(t, url, set(ulid.Make().String(), "w1", "reports", 1)) // a sibling whose name begins alike
	p := runBin(t, nil, "", "state", "--prefix", "report", "--nats", url)
	want := regexp.MustCompile(`^report\.sections\.s1\.text = "a" \(version 1, mod_rev 2\)\n` +
		`report\.sections\.s2 = \{\} \(version 1, mod_rev 2\)\n` +
		`report\.tags = \[1,2\] \(version 1, mod_rev 2\)\n` +
		`report\.title = "Q3" \(version 2, mod_rev (\d+)\)\n` +
		`rev (\d+)\n$`)
	if m := want.FindStringSubmatch(p.stdout); p.status != 0 || p.stderr != "" || m == nil || m[1] == "2" {
		t.Fatalf("state --prefix report: %+v", p)
	}
	p = runBin(t, nil, "", "state", "--nats", url, "--prefix", "report.sections", "-o", "json")
	var got stateAnswer
	if p.status != 0 || json.Unmarshal([]byte(p.stdout), &got) != nil || len(got.Values) != 2 ||
		string(got.Values["report.sections.s1.text"].Value) != `"a"` || got.Values["report.sections.s1.text"].Version != 1 || got.Rev == 0 {
		t.Fatalf("state --prefix report.sections -o json: %+v", p)
	}
	if p := runBin(t, nil, "", "state", "--prefix", "report.title", "--nats", url); p.status != 0 || !strings.HasPrefix(p.stdout, `report.title = "Q3" (version 2, `) {
		t.Fatalf("state --prefix of a leaf: %+v", p)
	}
	if p := runBin(t, nil, "", "state", "--prefix", "none", "--nats", url); p.status != 0 || p.stdout != "" || !regexp.MustCompile(`^nothing under none \(rev \d+\)\n$`).MatchString(p.stderr) {
		t.Fatalf("state --prefix of nothing: %+v", p)
	}
	if p := runBin(t, nil, "", "state", "--prefix", "report", "report.title"); p.status != 2 || !strings.HasPrefix(p.stderr, "coagent: --prefix \"report\" lists a subtree: give it or PATHs, not both\n") {
		t.Fatalf("state --prefix with a PATH: %+v", p)
	}
}

// TestStateWholeTree: state with no PATH, and state --prefix "", list
// every leaf of the tree, as etcdctl's get "" --prefix; a board the
// readers rules keep from the reader is left out and named on stderr.
func TestStateWholeTree(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, a := range [][]string{{"alice"}, {"lead", "--role", "lead"}} {
		if p := runBin(t, nil, "", append([]string{"agents", "add", "--data", data}, a...)...); p.status != 0 {
			t.Fatalf("agents add %v: %+v", a, p)
		}
	}
	rules := filepath.Join(dir, "rules.json")
	writeFile(t, rules, `{"rules":[{"pattern":"secrets.**","readers":["role:lead"],"writers":["role:lead"]}]}`)
	url, stop := serve(t, data, "--auth", "--rules", rules)
	defer stop()
	seed := func(agent string) string { return natsauth.SeedPath(data, agent) }
	state := func(agent string, args ...string) proc {
		return runBin(t, nil, "", append([]string{"state", "--nats", url, "--nkey", seed(agent)}, args...)...)
	}
	if p := state("alice"); p.status != 0 || p.stdout != "" || !regexp.MustCompile(`^the state is empty \(rev \d+\)\n$`).MatchString(p.stderr) {
		t.Fatalf("state of an empty tree: %+v", p)
	}
	for _, w := range []struct{ agent, path, value string }{{"alice", "report.title", "Q3"}, {"alice", "notes", "n"}, {"lead", "secrets.plan", "merge"}} {
		if p := runBin(t, nil, set(ulid.Make().String(), w.agent, w.path, w.value), "submit", "-", "--nats", url, "--nkey", seed(w.agent)); p.status != 0 {
			t.Fatalf("submit %v: %+v", w, p)
		}
	}
	all := regexp.MustCompile(`^notes = "n" \(version 1, mod_rev \d+\)\n` +
		`report\.title = "Q3" \(version 1, mod_rev \d+\)\n` +
		`secrets\.plan = "merge" \(version 1, mod_rev \d+\)\n` +
		`rev \d+\n$`)
	for _, args := range [][]string{{}, {"--prefix", ""}, {"--prefix="}} {
		if p := state("lead", args...); p.status != 0 || !all.MatchString(p.stdout) || p.stderr != "" {
			t.Errorf("state %q as lead: %+v", args, p)
		}
	}
	p := state("alice")
	if p.status != 0 || strings.Contains(p.stdout, "secrets") || !strings.Contains(p.stdout, `report.title = "Q3"`) ||
		p.stderr != "kept from you by the readers rules: secrets\n" {
		t.Errorf("state as alice: %+v", p)
	}
	p = state("lead", "-o", "json")
	var got stateAnswer
	if p.status != 0 || json.Unmarshal([]byte(p.stdout), &got) != nil || len(got.Values) != 3 || string(got.Values["secrets.plan"].Value) != `"merge"` {
		t.Errorf("state -o json as lead: %+v", p)
	}
	if p := state("lead", "--prefix", "", "notes"); p.status != 2 || !strings.HasPrefix(p.stderr, `coagent: --prefix "" lists a subtree: give it or PATHs, not both`) {
		t.Errorf("state --prefix \"\" with a PATH: %+v", p)
	}
}

// TestWatch: watch prints each change under its path as it is committed,
// and none elsewhere, until SIGINT; --from reads from the log.
func TestWatch(t *testing.T) {
	url, stop := serve(t, filepath.Join(t.TempDir(), "data"))
	defer stop()
	submitOK(t, url, set(ulid.Make().String(), "w1", "report.title", "Q1"))
	w := startBin(t, "watch", "report", "--nats", url)
	if l := line(t, w.stderr, "watch's start"); !regexp.MustCompile(`^watching report after rev 2; interrupt to stop$`).MatchString(l) {
		t.Fatalf("watch stderr: %q", l)
	}
	submitOK(t, url, set(ulid.Make().String(), "w1", "report.title", "Q3"))
	submitOK(t, url, set(ulid.Make().String(), "w1", "notes.n1", "elsewhere"))
	submitOK(t, url, `{"id":"`+ulid.Make().String()+`","agent":"w2","kind":"apply","writes":[{"path":"report.count","op":"incr","value":2},{"path":"report.title","op":"delete"}]}`)
	if l := line(t, w.stdout, "the first change"); !regexp.MustCompile(`^rev \d+ report\.title = "Q3" \(v2\)$`).MatchString(l) {
		t.Fatalf("the first change: %q", l)
	}
	if l := line(t, w.stdout, "the second change"); !regexp.MustCompile(`^rev \d+ report\.count \+= 2 \(v1\), report\.title deleted \(v3\)$`).MatchString(l) {
		t.Fatalf("the second change: %q", l)
	}
	if status, rest := w.interrupt(t); status != 0 || len(rest) != 0 {
		t.Fatalf("watch after SIGINT: exit %d, stdout %q", status, rest)
	}

	w = startBin(t, "watch", "report.title", "--from", "1", "--nats", url, "-o", "json")
	for _, want := range []string{`"Q1"`, `"Q3"`, ""} {
		var ch watchLine
		l := line(t, w.stdout, "a change of report.title")
		if err := json.Unmarshal([]byte(l), &ch); err != nil || len(ch.Writes) != 1 || ch.Writes[0].Path != "report.title" || string(ch.Writes[0].Value) != want || ch.Agent == "" {
			t.Fatalf("watch -o json: %q, want the value %s", l, want)
		}
	}
	if status, _ := w.interrupt(t); status != 0 {
		t.Fatalf("watch -o json after SIGINT: exit %d", status)
	}
}

// TestLogLive: log asks a running server, a page after another, and
// --follow goes on with what is logged next.
func TestLogLive(t *testing.T) {
	url, stop := serve(t, filepath.Join(t.TempDir(), "data"))
	defer stop()
	for i := range 3 {
		submitOK(t, url, set(ulid.Make().String(), "w1", fmt.Sprintf("notes.n%d", i), i))
	}
	p := runBin(t, nil, "", "log", "--nats", url, "--type", "change", "--limit", "2")
	lines := strings.Split(strings.TrimSuffix(p.stdout, "\n"), "\n")
	if p.status != 0 || len(lines) != 2 || !strings.Contains(lines[0], "set notes.n0=0") || !regexp.MustCompile(`^more: --from \d+\n$`).MatchString(p.stderr) {
		t.Fatalf("log --type change --limit 2: %+v", p)
	}
	from := strings.TrimSuffix(strings.TrimPrefix(p.stderr, "more: --from "), "\n")
	p = runBin(t, []string{"NATS_URL=" + url}, "", "log", "--type", "change", "--from", from, "-o", "json")
	var ev intents.Event
	if p.status != 0 || p.stderr != "" || json.Unmarshal([]byte(p.stdout), &ev) != nil || ev.Change == nil || ev.Change.Writes[0].Path != "notes.n2" {
		t.Fatalf("log --from %s -o json: %+v", from, p)
	}
	// More than a page of the API: the pages follow each other.
	if p := runBin(t, nil, "", "log", "--nats", url, "--limit", "1000000"); p.status != 0 || strings.Count(p.stdout, "\n") < 9 || p.stderr != "" {
		t.Fatalf("log --limit 1000000: %+v", p)
	}

	f := startBin(t, "log", "--follow", "--nats", url, "--type", "change", "--path", "notes")
	for i := range 3 {
		if l := line(t, f.stdout, "a logged change"); !strings.Contains(l, fmt.Sprintf("set notes.n%d=%d", i, i)) {
			t.Fatalf("log --follow, change %d: %q", i, l)
		}
	}
	submitOK(t, url, set(ulid.Make().String(), "w1", "report.title", "elsewhere"))
	submitOK(t, url, set(ulid.Make().String(), "w1", "notes.n3", 3))
	if l := line(t, f.stdout, "the new change"); !strings.Contains(l, "set notes.n3=3") {
		t.Fatalf("log --follow, the new change: %q", l)
	}
	if status, rest := f.interrupt(t); status != 0 || len(rest) != 0 {
		t.Fatalf("log --follow after SIGINT: exit %d, stdout %q", status, rest)
	}
}

// TestLogFollowPathDecisions: log --follow --path P prints the decisions
// of the intents that touch P, interim and final, in log order among the
// path's events, and nothing of the intents elsewhere.
func TestLogFollowPathDecisions(t *testing.T) {
	url, stop := serve(t, filepath.Join(t.TempDir(), "data"))
	defer stop()
	first := ulid.Make().String()
	submitOK(t, url, set(first, "w1", "notes.n1", 1))
	f := startBin(t, "log", "--follow", "--nats", url, "--path", "notes", "-o", "json")
	// next reads events until the decision of intent id with outcome; every
	// event read is of an intent of want, in seq order.
	seq := uint64(0)
	next := func(id string, outcome intents.Outcome, want ...string) {
		t.Helper()
		for {
			var ev intents.Event
			l := line(t, f.stdout, "the decision of "+id)
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("log --follow -o json: %q: %v", l, err)
			}
			if ev.Seq <= seq || !slices.Contains(want, ev.Intent) {
				t.Fatalf("log --follow --path notes, after seq %d: %q", seq, l)
			}
			seq = ev.Seq
			if ev.Type == intents.EventDecision && ev.Intent == id && ev.Decision.Outcome == outcome {
				return
			}
		}
	}
	next(first, intents.OutcomeApplied, first)

	// A holder's grant, a waiter queued behind it, the holder's abort:
	// the waiter's queued and then applied decisions both come.
	elsewhere := ulid.Make().String()
	submitOK(t, url, set(elsewhere, "w1", "report.title", "x"))
	holder := ulid.Make().String()
	p := runBin(t, nil, `{"id":"`+holder+`","agent":"h","kind":"propose","lease_ms":60000,"writes":[{"path":"notes.n2","op":"set"}]}`, "submit", "-", "--nats", url, "-o", "json")
	var grant intents.Decision
	if p.status != 0 || json.Unmarshal([]byte(p.stdout), &grant) != nil {
		t.Fatalf("propose: %+v", p)
	}
	next(holder, intents.OutcomeGranted, holder)
	waiter := ulid.Make().String()
	runBin(t, nil, `{"id":"`+waiter+`","agent":"w","kind":"apply","on_conflict":"wait","wait_ms":60000,"writes":[{"path":"notes.n2","op":"set","value":2}]}`,
		"submit", "-", "--nats", url, "--timeout", "2s")
	next(waiter, intents.OutcomeQueued, waiter)
	abort := ulid.Make().String()
	if p := runBin(t, nil, fmt.Sprintf(`{"id":%q,"agent":"h","kind":"abort","txn":%q,"fence":%d}`, abort, grant.Txn, grant.Fence), "submit", "-", "--nats", url); !strings.HasPrefix(p.stdout, "aborted ") {
		t.Fatalf("abort: %+v", p)
	}
	next(waiter, intents.OutcomeApplied, waiter, holder, abort)
	if status, _ := f.interrupt(t); status != 0 {
		t.Fatalf("log --follow after SIGINT: exit %d", status)
	}
}

// TestAuthHintsAndRemove: a client the server refuses is told which flag
// to give; an agent removed is dropped at SIGHUP.
func TestAuthHintsAndRemove(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, a := range []string{"alice", "bob"} {
		if p := runBin(t, nil, "", "agents", "add", a, "--data", data); p.status != 0 {
			t.Fatalf("agents add %s: %+v", a, p)
		}
	}
	url, stop := serve(t, data, "--auth")
	defer stop()

	p := runBin(t, nil, "", "state", "x", "--nats", url)
	if want := "coagent: the NATS server at " + url + " refused the connection: Authorization Violation\n" +
		"the server runs with --auth: connect with --nkey DATA/agents/NAME.nk (coagent agents add NAME)\n"; p.status != 1 || p.stdout != "" || p.stderr != want {
		t.Fatalf("state without --nkey: %+v, want stderr %q", p, want)
	}
	if p := runBin(t, nil, "", "state", "x", "--nats", url, "--nkey", natsauth.SeedPath(data, "bob")); p.status != 0 {
		t.Fatalf("bob's state: %+v", p)
	}

	// Alice is connected when she is removed.
	aliceSeed := filepath.Join(dir, "alice.nk")
	seed, err := os.ReadFile(natsauth.SeedPath(data, "alice"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, aliceSeed, string(seed))
	opts, err := agents.AuthOptions("alice", aliceSeed)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	nc, err := nats.Connect(url, append(opts, nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	p = runBin(t, nil, "", "agents", "remove", "alice", "--data", data)
	if p.status != 0 || p.stdout != "agent alice removed; its nkey seed "+natsauth.SeedPath(data, "alice")+" deleted\n" ||
		p.stderr != "a running coagent serve --auth drops it after SIGHUP: its connections are closed, new ones refused\n" {
		t.Fatalf("agents remove alice: %+v", p)
	}
	if _, err := os.Stat(natsauth.SeedPath(data, "alice")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("alice's seed stays: %v", err)
	}
	if p := runBin(t, nil, "", "agents", "list", "--data", data); p.status != 0 || strings.Contains(p.stdout, "alice") || !strings.Contains(p.stdout, "bob") {
		t.Fatalf("agents list after the removal: %+v", p)
	}
	if p := runBin(t, nil, "", "agents", "remove", "alice", "--data", data); p.status != 1 ||
		p.stderr != "coagent: no agent alice in "+natsauth.RegistryPath(data)+" ('coagent agents list --data "+data+"' lists them)\n" {
		t.Fatalf("agents remove alice again: %+v", p)
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("alice's connection stays open after SIGHUP")
	}
	p = runBin(t, nil, "", "state", "x", "--nats", url, "--nkey", aliceSeed)
	if want := "coagent: the NATS server at " + url + " refused --nkey " + aliceSeed + " (agent alice): Authorization Violation\n"; p.status != 1 || !strings.HasPrefix(p.stderr, want) {
		t.Fatalf("alice after SIGHUP: %+v, want stderr %q…", p, want)
	}
	if p := runBin(t, nil, "", "state", "x", "--nats", url, "--nkey", natsauth.SeedPath(data, "bob")); p.status != 0 {
		t.Fatalf("bob after SIGHUP: %+v", p)
	}
}
