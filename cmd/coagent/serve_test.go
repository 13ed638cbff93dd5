package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// serve runs `coagent serve` in-process on a random port and returns the
// URL it announces; cancelling stop stops it, and its error comes on done.
func serve(t *testing.T, data string, extra ...string) (url string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		args := append([]string{"serve", "--data", data, "--listen", "127.0.0.1:-1"}, extra...)
		done <- run(ctx, args, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("serve said nothing: %v (%v)", err, <-done)
	}
	m := regexp.MustCompile(`serving on (nats://\S+) .*data in (\S+)`).FindStringSubmatch(line)
	if m == nil || !strings.HasSuffix(m[2], filepath.Base(data)) {
		cancel()
		t.Fatalf("start-up line %q", line)
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
	out, _, err := runCmd(t, apply, "submit", "--nats", url, "-")
	var d struct{ Outcome, Reason string }
	if err != nil || json.Unmarshal([]byte(out), &d) != nil || d.Outcome != "applied" {
		t.Fatalf("submit: %q, %v", out, err)
	}
	failing := `{"id":"01JD0000000000000000000A02","agent":"w1","kind":"apply","pre":["state.report.title == \"Q4\""],"writes":[{"path":"report.title","op":"set","value":"Q5"}]}`
	out, _, err = runCmd(t, failing, "submit", "--nats", url, "-")
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
