package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPutGetDelIncr: the one-write shorthands, each one intent: put takes
// JSON or else a string, --expect-version is a compare-and-swap, incr adds,
// del deletes, get reads as state does; the agent is cli unless given.
func TestPutGetDelIncr(t *testing.T) {
	url, stop := serve(t, filepath.Join(t.TempDir(), "data"))
	defer stop()
	for _, c := range []struct {
		args   []string
		status int
		out    string // a regexp of stdout
	}{
		{[]string{"put", "doc.n", "42"}, 0, `^applied \S+ rev \d+ \(doc\.n v1\)\n$`},
		{[]string{"put", "doc.s", "hello world"}, 0, `^applied `},
		{[]string{"put", "doc.q", "42", "--string"}, 0, `^applied `},
		{[]string{"put", "doc.o", `{"a":[1,2]}`}, 0, `^applied `},
		{[]string{"get", "doc.n", "doc.s", "doc.q", "doc.o"}, 0, `^doc\.n = 42 \(version 1, mod_rev \d+\)\ndoc\.s = "hello world" \(version 1, mod_rev \d+\)\n` +
			`doc\.q = "42" \(version 1, mod_rev \d+\)\ndoc\.o = \{"a":\[1,2\]\} \(version 1, mod_rev \d+\)\nrev \d+\n$`},
		{[]string{"put", "doc.n", "43", "--expect-version", "2"}, 1, `^rejected \S+ stale_read`},
		{[]string{"put", "doc.n", "43", "--expect-version", "1"}, 0, `^applied \S+ rev \d+ \(doc\.n v2\)\n$`},
		{[]string{"put", "doc.new", "1", "--expect-version", "0"}, 0, `^applied `},
		{[]string{"put", "doc.new", "2", "--expect-version", "0"}, 1, `^rejected \S+ stale_read`},
		{[]string{"incr", "count.c"}, 0, `^applied `},
		{[]string{"incr", "count.c", "5"}, 0, `^applied `},
		{[]string{"incr", "--agent", "w1", "count.c", "--", "-2.5"}, 0, `^applied `},
		{[]string{"get", "count.c"}, 0, `^count\.c = 3\.5 \(version 3, mod_rev \d+\)\n`},
		{[]string{"del", "doc.n", "--expect-version", "1"}, 1, `^rejected \S+ stale_read`},
		{[]string{"del", "doc.n"}, 0, `^applied `},
		{[]string{"get", "doc.n"}, 0, `^doc\.n absent \(version 3\)\n`},
	} {
		p := runBin(t, []string{"NATS_URL=" + url}, "", c.args...)
		if p.status != c.status || !regexp.MustCompile(c.out).MatchString(p.stdout) {
			t.Errorf("coagent %s: %+v", strings.Join(c.args, " "), p)
		}
	}
	if p := runBin(t, nil, "", "log", "--nats", url, "--agent", "w1", "--type", "change"); p.status != 0 || strings.Count(p.stdout, "\n") != 1 || !strings.Contains(p.stdout, "incr count.c=-2.5") {
		t.Errorf("log --agent w1: %+v", p)
	}
	if p := runBin(t, nil, "", "log", "--nats", url, "--agent", "cli", "--type", "change"); p.status != 0 || strings.Count(p.stdout, "\n") != 9 {
		t.Errorf("log --agent cli: %+v", p)
	}
	for _, c := range []struct {
		args []string
		line string
	}{
		{[]string{"put", "doc.n"}, "missing PATH and VALUE"},
		{[]string{"incr", "doc.n", "two"}, `N "two": not a number`},
		{[]string{"del", "a..b"}, `PATH "a..b": segment ""`},
	} {
		if p := runBin(t, nil, "", append(c.args, "--nats", url)...); p.status != 2 || !strings.HasPrefix(p.stderr, "coagent "+c.args[0]+": "+c.line) && !strings.HasPrefix(p.stderr, "coagent: "+c.line) {
			t.Errorf("coagent %s: %+v", strings.Join(c.args, " "), p)
		}
	}
}

// TestTxnCommitAbortRenew: after a propose, txn commit, abort and renew
// send the intent with the fence and agent txn list shows; commit's values
// come from flags or a file; each exits 0 for its own outcome.
func TestTxnCommitAbortRenew(t *testing.T) {
	url, stop := serve(t, filepath.Join(t.TempDir(), "data"))
	defer stop()
	env := []string{"NATS_URL=" + url}
	propose := func(writes string) string {
		t.Helper()
		p := runBin(t, env, `{"agent":"w1","kind":"propose","lease_ms":60000,"writes":`+writes+`}`, "submit", "-")
		m := regexp.MustCompile(`^granted \S+ txn (\S+) fence \d+`).FindStringSubmatch(p.stdout)
		if p.status != 0 || m == nil {
			t.Fatalf("propose: %+v", p)
		}
		return m[1]
	}
	txn := propose(`[{"path":"doc.title","op":"set"},{"path":"doc.old","op":"delete"},{"path":"doc.n","op":"incr"},{"path":"doc.body","op":"set"}]`)
	if p := runBin(t, env, "", "txn", "renew", txn, "--lease", "2m"); p.status != 0 || !regexp.MustCompile(`^renewed \S+ txn `+txn+` fence \d+ lease until `).MatchString(p.stdout) {
		t.Fatalf("txn renew: %+v", p)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "w.json"), `{"doc.body":{"text":"hi"}}`)
	if p := runBin(t, env, "", "txn", "commit", txn, "--set", "doc.title=Q3 report", "--delete", "doc.old", "--incr", "doc.n=2", "--writes", filepath.Join(dir, "w.json")); p.status != 0 ||
		!strings.HasPrefix(p.stdout, "committed ") {
		t.Fatalf("txn commit: %+v", p)
	}
	p := runBin(t, env, "", "get", "doc.title", "doc.n", "doc.body")
	if !regexp.MustCompile(`^doc\.title = "Q3 report" \(version 1, mod_rev \d+\)\ndoc\.n = 2 \(version 1, mod_rev \d+\)\ndoc\.body = \{"text":"hi"\} `).MatchString(p.stdout) {
		t.Fatalf("the state after txn commit: %+v", p)
	}
	if p := runBin(t, env, "", "txn", "commit", txn); p.status != 1 || !strings.Contains(p.stderr, "txn "+txn+": no such transaction in flight") {
		t.Fatalf("txn commit of a committed transaction: %+v", p)
	}

	txn = propose(`[{"path":"doc.title","op":"set"}]`)
	// The writes from stdin, as an array; a fence given that is not the grant's is refused.
	if p := runBin(t, env, `[{"path":"doc.title","op":"set","value":"x"}]`, "txn", "commit", txn, "--writes", "-", "--fence", "999"); p.status != 1 || !strings.HasPrefix(p.stdout, "rejected ") {
		t.Fatalf("txn commit --fence 999: %+v", p)
	}
	if p := runBin(t, env, "", "txn", "abort", txn); p.status != 0 || !strings.HasPrefix(p.stdout, "aborted ") {
		t.Fatalf("txn abort: %+v", p)
	}
	if p := runBin(t, env, "", "txn", "list"); p.stderr != "no transactions in flight\n" {
		t.Fatalf("txn list after the abort: %+v", p)
	}
	for _, c := range []struct {
		args []string
		line string
	}{
		{[]string{"txn", "commit"}, "missing TXN"},
		{[]string{"txn", "commit", "T", "--set", "doc.title"}, `--set "doc.title": want PATH=VALUE`},
		{[]string{"txn", "commit", "T", "--incr", "doc.n=two"}, `--incr "doc.n=two": want PATH=N, N a number`},
	} {
		if p := runBin(t, env, "", c.args...); p.status != 2 || !strings.Contains(p.stderr, c.line) {
			t.Errorf("coagent %s: %+v", strings.Join(c.args, " "), p)
		}
	}
}
