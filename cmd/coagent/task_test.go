package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestTask: under a task rule with a lease, `task claim` prints the
// claim's lease and fence; another agent's claim loses; done without the
// fence is fenced, with it completes the task; renew and release carry
// the fence of the claim they name.
func TestTask(t *testing.T) {
	dir := t.TempDir()
	url, stop := serve(t, filepath.Join(dir, "data"))
	defer stop()
	rules := filepath.Join(dir, "rules.json")
	if err := os.WriteFile(rules, []byte(`{"rules":[{"pattern":"tasks.*","kind":"task","lease":"1m","reclaim_to":"PENDING","operators":["lead"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if p := runBin(t, nil, "", "rules", "set", rules, "--nats", url); p.status != 0 {
		t.Fatalf("rules set: %+v", p)
	}
	run := func(status int, out string, args ...string) []string {
		t.Helper()
		p := runBin(t, []string{"NATS_URL=" + url}, "", append([]string{"task"}, args...)...)
		m := regexp.MustCompile(out).FindStringSubmatch(p.stdout)
		if p.status != status || m == nil {
			t.Fatalf("coagent task %s: %+v", strings.Join(args, " "), p)
		}
		return m
	}
	m := run(0, `^applied \S+ rev \d+ .* txn (\S+) fence (\d+) lease until `, "claim", "tasks.t1", "--agent", "w1")
	lease, fence := m[1], m[2]
	run(1, `^rejected \S+ precondition_failed`, "claim", "tasks.t1", "--agent", "w2")
	run(0, `^renewed \S+ txn `+lease+` fence `+fence+` lease until `, "renew", lease, "--fence", fence, "--agent", "w1")
	run(1, `^rejected \S+ fenced`, "done", "tasks.t1", "--fence", "99", "--agent", "w1")
	run(0, `^applied `, "done", "tasks.t1", "--fence", fence, "--agent", "w1")
	if p := runBin(t, nil, "", "get", "tasks.t1", "--nats", url); p.status != 0 || !strings.HasPrefix(p.stdout, `tasks.t1 = {"status":"DONE"}`) {
		t.Fatalf("get after done: %+v", p)
	}
	m = run(0, `fence (\d+) `, "claim", "tasks.t2", "--agent", "w2", "--status", "")
	run(0, `^applied `, "release", "tasks.t2", "--fence", m[1], "--agent", "w2", "--status", "PENDING")
	if p := runBin(t, nil, "", "task", "done", "tasks.t2", "--nats", url); p.status != 2 || !strings.Contains(p.stderr, "--fence: missing") {
		t.Fatalf("done without --fence: %+v", p)
	}

	// An operator gives w1's task to w2, then cancels it; w1 may not.
	m = run(0, `fence (\d+) `, "claim", "tasks.t3", "--agent", "w1")
	run(1, `^rejected \S+ unauthorized`, "reassign", "tasks.t3", "--to", "w2", "--why", "w1 is stuck", "--agent", "w1b")
	run(0, `^applied `, "reassign", "tasks.t3", "--to", "w2", "--why", "w1 is stuck", "--agent", "lead")
	run(1, `^rejected \S+ precondition_failed .*owner = "w2"`, "done", "tasks.t3", "--fence", m[1], "--agent", "w1")
	run(0, `^applied `, "cancel", "tasks.t3", "--why", "not needed", "--agent", "lead")
	if p := runBin(t, nil, "", "get", "tasks.t3", "--nats", url); p.status != 0 || !strings.HasPrefix(p.stdout, `tasks.t3 = {"status":"CANCELLED"}`) {
		t.Fatalf("get after cancel: %+v", p)
	}
	if p := runBin(t, nil, "", "log", "--nats", url, "--type", "intent", "--agent", "lead", "-o", "json"); p.status != 0 || !strings.Contains(p.stdout, `"why":"w1 is stuck"`) {
		t.Fatalf("the log keeps why: %+v", p)
	}
	if p := runBin(t, nil, "", "task", "cancel", "tasks.t3", "--nats", url); p.status != 2 || !strings.Contains(p.stderr, "--why: missing") {
		t.Fatalf("cancel without --why: %+v", p)
	}
	// next claims the lane's claimable task of the highest priority: t4,
	// then t2 (released PENDING above), then there is none.
	if p := runBin(t, nil, "", "put", "tasks.t4", `{"status":"PENDING","priority":5}`, "--nats", url); p.status != 0 {
		t.Fatalf("put tasks.t4: %+v", p)
	}
	for _, want := range []string{"tasks.t4", "tasks.t2"} {
		p := runBin(t, []string{"NATS_URL=" + url}, "", "task", "next", "tasks", "--agent", "w5")
		if p.status != 0 || !strings.Contains(p.stderr, "task "+want+"\n") || !regexp.MustCompile(`^applied \S+ .* fence \d+ `).MatchString(p.stdout) {
			t.Fatalf("task next, want %s: %+v", want, p)
		}
	}
	if p := runBin(t, []string{"NATS_URL=" + url}, "", "task", "next", "tasks", "--agent", "w5"); p.status != 1 || !strings.Contains(p.stderr, "nothing_claimable") {
		t.Fatalf("task next on a lane with nothing claimable: %+v", p)
	}
	if p := runBin(t, []string{"NATS_URL=" + url}, "", "task", "next", "tasks", "--agent", "w5", "--wait", "200ms"); p.status != 1 || !strings.Contains(p.stderr, "nothing_claimable") {
		t.Fatalf("task next --wait on a lane with nothing claimable: %+v", p)
	}
}
