package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/nats-io/nats.go"
)

// serve runs `coagent serve` in-process on a random port and returns the
// URL it announces; cancelling stop stops it, and its error comes on done.
func serve(t *testing.T, data string, extra ...string) (url string, stop func() error) {
	t.Helper()
	var line string
	return serveLine(t, data, &line, extra...)
}

// serveLine is serve, which also returns its start-up line in *line.
func serveLine(t *testing.T, data string, line *string, extra ...string) (url string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		args := append([]string{"serve", "--data", data, "--listen", "127.0.0.1:-1", "--http", "127.0.0.1:0"}, extra...)
		done <- run(ctx, args, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	first, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("serve said nothing: %v (%v)", err, <-done)
	}
	*line = first
	m := regexp.MustCompile(`serving on (nats://\S+) .*data in (\S+)`).FindStringSubmatch(first)
	if m == nil || !strings.HasSuffix(m[2], filepath.Base(data)) {
		cancel()
		t.Fatalf("start-up line %q", first)
	}
	go io.Copy(io.Discard, pr)
	return m[1], func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("serve did not stop")
		}
	}
}

func TestServeSubmitState(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	url, stop := serve(t, data)
	apply := `{"id":"01JD0000000000000000000A01","agent":"w1","kind":"apply","writes":[{"path":"report.title","op":"set","value":"Q3"}]}`
	out, _, err := runCmd(t, apply, "submit", "--nats", url, "-o", "json", "-")
	var d struct{ Outcome, Reason string }
	if err != nil || json.Unmarshal([]byte(out), &d) != nil || d.Outcome != "applied" {
		t.Fatalf("submit: %q, %v", out, err)
	}
	failing := `{"id":"01JD0000000000000000000A02","agent":"w1","kind":"apply","pre":["state.report.title == \"Q4\""],"writes":[{"path":"report.title","op":"set","value":"Q5"}]}`
	out, _, err = runCmd(t, failing, "submit", "--nats", url, "--json", "-")
	var exit exitError
	if !errors.As(err, &exit) || exit != 1 || json.Unmarshal([]byte(out), &d) != nil || d.Reason != "precondition_failed" {
		t.Fatalf("submit of a failing precondition: %q, %v", out, err)
	}
	out, _, err = runCmd(t, "", "state", "--nats", url, "report.title", "report.none")
	if err != nil || !strings.Contains(out, `report.title = "Q3" (version 1`) || !strings.Contains(out, "report.none absent") {
		t.Fatalf("state: %q, %v", out, err)
	}
	if _, _, err := runCmd(t, "", "state", "--nats", url, "bad path"); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Fatalf("state of a bad path: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve stopped with %v", err)
	}
	// The data survives: the stopped server's log replays to the same state,
	// and a new server carries on from it.
	out, _, err = runCmd(t, "", "verify", "--data", data)
	if err != nil {
		t.Fatalf("verify: %q %v", out, err)
	}
	url, stop = serve(t, data)
	defer stop()
	out, _, err = runCmd(t, "", "state", "--nats", url, "--json", "report.title")
	if err != nil || !strings.Contains(out, `"Q3"`) {
		t.Fatalf("state after restart: %q, %v", out, err)
	}
}

// TestServeAuthAndRules: agents registered with `coagent agents add` are the
// only ones the server admits, each under its roles in the rules; SIGHUP
// reloads the rules file.
func TestServeAuthAndRules(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, a := range [][]string{{"alice", "--role", "coder"}, {"bob"}, {"auditor", "--role", "observer"}} {
		if out, _, err := runCmd(t, "", append([]string{"agents", "add", a[0], "--data", data}, a[1:]...)...); err != nil {
			t.Fatalf("agents add %v: %q %v", a, out, err)
		}
	}
	if _, _, err := runCmd(t, "", "agents", "add", "alice", "--data", data); err == nil {
		t.Fatal("alice registered twice")
	}
	out, _, err := runCmd(t, "", "agents", "list", "--data", data)
	if err != nil || !strings.Contains(out, "alice") || !strings.Contains(out, "coder") || !strings.Contains(out, "bob") {
		t.Fatalf("agents list: %q %v", out, err)
	}
	rulesFile := filepath.Join(dir, "rules.json")
	writeFile(t, rulesFile, `{"rules":[{"pattern":"tasks.**","writers":["role:coder"]}]}`)
	url, stop := serve(t, data, "--auth", "--rules", rulesFile)
	defer stop()

	submit := func(agent, id, path string) (string, error) {
		in := `{"id":"` + id + `","agent":"` + agent + `","kind":"apply","writes":[{"path":"` + path + `","op":"set","value":1}]}`
		out, _, err := runCmd(t, in, "submit", "--nats", url, "--nkey", natsauth.SeedPath(data, agent), "-")
		return out, err
	}
	if out, err := submit("alice", "01JD0000000000000000000B01", "tasks.t1"); err != nil || !strings.HasPrefix(out, "applied ") {
		t.Fatalf("alice, a coder, on tasks: %q %v", out, err)
	}
	if out, _ := submit("bob", "01JD0000000000000000000B02", "tasks.t2"); !strings.HasPrefix(out, "rejected 01JD0000000000000000000B02 unauthorized") {
		t.Fatalf("bob, no coder, on tasks: %q", out)
	}
	if _, _, err := runCmd(t, "", "state", "--nats", url, "tasks.t1"); err == nil || !strings.Contains(err.Error(), "uthorization") {
		t.Fatalf("a client without a key: %v", err)
	}

	// SIGHUP: the new file lets anyone write tasks, and carol, registered
	// while the server runs, is let in. An observer may read the whole
	// feed, so it sees the rules event of the reload, which follows the
	// reload of the agents.
	if out, _, err := runCmd(t, "", "agents", "add", "carol", "--data", data); err != nil {
		t.Fatalf("agents add carol: %q %v", out, err)
	}
	if _, err := submit("carol", "01JD0000000000000000000B04", "notes.n1"); err == nil || !strings.Contains(err.Error(), "uthorization") {
		t.Fatalf("carol before the reload: %v", err)
	}
	writeFile(t, rulesFile, `{"rules":[]}`)
	opts, err := agents.AuthOptions("auditor", natsauth.SeedPath(data, "auditor"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	reloads, err := nc.SubscribeSync(intents.Subjects{}.Events(intents.EventRules))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if _, err := reloads.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no rules event after SIGHUP: %v", err)
	}
	if out, err := submit("bob", "01JD0000000000000000000B03", "tasks.t3"); err != nil || !strings.HasPrefix(out, "applied ") {
		t.Fatalf("bob after the reload: %q %v", out, err)
	}
	if out, err := submit("carol", "01JD0000000000000000000B05", "tasks.t5"); err != nil || !strings.HasPrefix(out, "applied ") {
		t.Fatalf("carol after the reload: %q %v", out, err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRulesCommand(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	writeFile(t, good, `{"rules":[{"pattern":"tasks.*.status","transitions":{"A":["B"]}}]}`)
	writeFile(t, bad, `{"rules":[{"pattern":"tasks..status"}]}`)
	if out, _, err := runCmd(t, "", "rules", "check", good); err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("check good: %q %v", out, err)
	}
	if _, _, err := runCmd(t, "", "rules", "check", bad); err == nil || !strings.Contains(err.Error(), "rules[0].pattern") {
		t.Fatalf("check bad: %v", err)
	}
	url, stop := serve(t, filepath.Join(dir, "data"))
	defer stop()
	if out, errOut, err := runCmd(t, "", "rules", "--nats", url, "get"); err != nil || out != "" || !strings.Contains(errOut, "no rules") {
		t.Fatalf("get before: %q %q %v", out, errOut, err)
	}
	if _, _, err := runCmd(t, "", "rules", "--nats", url, "set", bad); err == nil || !strings.Contains(err.Error(), "rules[0].pattern") {
		t.Fatalf("set bad: %v", err)
	}
	if out, _, err := runCmd(t, "", "rules", "--nats", url, "set", good); err != nil || !strings.Contains(out, "in force") {
		t.Fatalf("set good: %q %v", out, err)
	}
	// The summary on stdout, where the rules came from on stderr; -o json
	// is the file itself.
	out, errOut, err := runCmd(t, "", "rules", "--nats", url, "get")
	if err != nil || !strings.Contains(errOut, "from "+good) || !regexp.MustCompile(`(?m)^tasks\.\*\.status +- .*transitions A→B$`).MatchString(out) {
		t.Fatalf("get after: %q %q %v", out, errOut, err)
	}
	out, _, err = runCmd(t, "", "rules", "get", "--nats", url, "-o", "json")
	var file struct{ Rules []struct{ Pattern string } }
	if err != nil || json.Unmarshal([]byte(out), &file) != nil || len(file.Rules) != 1 || file.Rules[0].Pattern != "tasks.*.status" {
		t.Fatalf("get -o json: %q %v", out, err)
	}
	in := `{"id":"01JD0000000000000000000C01","agent":"w1","kind":"apply","writes":[{"path":"tasks.t1.status","op":"set","value":"C"}]}`
	if out, _, _ := runCmd(t, in, "submit", "--nats", url, "-"); !strings.Contains(out, "illegal_transition") {
		t.Fatalf("a write the rules refuse: %q", out)
	}
}
