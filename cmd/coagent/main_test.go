package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func runCmd(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	bad := filepath.Join(dir, "bad.json")
	writeFile(t, good, `{"id":"01JD0000000000000000000000","agent":"w1","kind":"apply",
		"reads":[{"path":"report.title"}],"pre":["state.report.status == \"draft\" && has(\"tasks.t1\")"],
		"writes":[{"path":"report.sections.intro","op":"set","value":"x"}]}`)
	writeFile(t, bad, `{"id":"01JD0000000000000000000000","agent":"w1","kind":"apply",
		"writes":[{"path":"report.count","op":"incr","value":"two"}]}`)

	out, _, err := runCmd(t, "", "check", good)
	if err != nil || !strings.Contains(out, "ok; reads [report.status report.title tasks.t1]") {
		t.Fatalf("check good: %q, %v", out, err)
	}
	out, _, err = runCmd(t, "", "check", "--json", good, bad)
	var exit exitError
	if !errors.As(err, &exit) || exit != 1 {
		t.Fatalf("check with a bad file: err %v, want exit status 1", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var second struct {
		OK    bool
		Error string
	}
	if len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &second) != nil || second.OK ||
		!strings.Contains(second.Error, "writes[0].value") {
		t.Fatalf("check --json: %q", out)
	}
	// A condition that does not compile is caught offline too.
	out, _, _ = runCmd(t, `{"id":"01JD0000000000000000000000","agent":"w1","kind":"apply","pre":["state.a +"],
		"writes":[{"path":"a.b","op":"delete"}]}`, "check", "-")
	if !strings.Contains(out, "pre[0]") {
		t.Fatalf("check -: %q", out)
	}
}

// TestCheckAsSubmit: check fills in the id and agent as submit does, so
// the README's intent checks; and it lists every problem of an intent, a
// line each, not the first alone.
func TestCheckAsSubmit(t *testing.T) {
	readme := `{"kind":"apply","writes":[{"path":"report.title","op":"set","value":"Q3"}]}`
	out, _, err := runCmd(t, readme, "check", "-")
	if err != nil || out != "-: ok; reads []; it names no agent: submit --agent A (or --nkey) gives it one\n" {
		t.Fatalf("check - of the README's intent: %q, %v", out, err)
	}
	if out, _, err := runCmd(t, readme, "check", "--agent", "w1", "-"); err != nil || out != "-: ok; reads []\n" {
		t.Fatalf("check --agent w1 -: %q, %v", out, err)
	}
	if out, _, err := runCmd(t, `{"agent":"w1","kind":"apply","writes":[{"path":"a","op":"delete"}]}`, "check", "--agent", "w2", "-"); err == nil ||
		out != "-: the intent's agent is w1, but --agent says w2\n" {
		t.Fatalf("check --agent w2 of w1's intent: %q, %v", out, err)
	}
	bad := `{"agent":"w1","kind":"apply","writes":[{"path":"a..b","op":"set","value":1},{"path":"c","op":"incr","value":"x"}],"pre":["state.a +"],"wait_ms":-5}`
	out, _, err = runCmd(t, bad, "check", "-")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var exit exitError
	if !errors.As(err, &exit) || exit != 1 || len(lines) != 4 || !strings.HasPrefix(lines[0], "-: intent field writes[0].path = ") ||
		!strings.HasPrefix(lines[1], "-: intent field writes[1].value = ") || !strings.HasPrefix(lines[2], "-: intent field wait_ms = -5") ||
		!strings.Contains(lines[3], "pre[0]") {
		t.Fatalf("check - of an intent with four problems: %q, %v", out, err)
	}
	out, _, _ = runCmd(t, bad, "check", "-o", "json", "-")
	var got struct {
		OK     bool
		Error  string
		Errors []string
	}
	if json.Unmarshal([]byte(out), &got) != nil || got.OK || len(got.Errors) != 4 || got.Error != got.Errors[0] {
		t.Fatalf("check -o json: %q", out)
	}
}

func TestSchema(t *testing.T) {
	out, _, err := runCmd(t, "", "schema")
	if err != nil || !strings.Contains(out, "intent.json") || !strings.Contains(out, "decision.json") {
		t.Fatalf("schema: %q, %v", out, err)
	}
	out, _, err = runCmd(t, "", "schema", "intent.json")
	var doc map[string]any
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil || doc["title"] != "Intent" {
		t.Fatalf("schema intent.json: %.80q, %v", out, err)
	}
	if _, _, err := runCmd(t, "", "schema", "nope.json"); err == nil {
		t.Fatal("schema of an unknown name succeeded")
	}
	if _, _, err := runCmd(t, "", "frobnicate"); !errors.Is(err, errUsage) {
		t.Fatalf("unknown command: %v", err)
	}
}
