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
