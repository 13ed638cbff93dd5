// Package cluster holds the script that starts a loopback cluster of three
// coagent serve nodes (run.sh); its test runs the script as a user would.
package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeRun finds n consecutive free loopback ports, for the script's
// consecutive client and route ports.
func freeRun(t *testing.T, n int) int {
	t.Helper()
	for base := 20000 + 37*(int(uint16(t.Name()[0]))%100); base < 60000; base += 97 {
		var ls []net.Listener
		ok := true
		for i := range n {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no run of free ports")
	return 0
}

// run.sh as a user runs it: three nodes, each a coordinator member; a
// write through one node read through another; the active node killed, a
// standby taking over, a submit sent during the failover decided by the
// new active coordinator; the killed node restarted on its data directory
// rejoining as a standby. The script waits on the nodes' lines, each with
// a deadline; the test bounds the whole and stops the script (SIGTERM, on
// which it stops its nodes) if it runs over.
func TestRunScript(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three coagent processes and kills one")
	}
	dir := t.TempDir()
	ports := freeRun(t, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "run.sh")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	// As the README runs it: no COAGENT, and no coagent on PATH; the
	// script builds its own.
	var path []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "coagent")); err != nil {
			path = append(path, d)
		}
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COAGENT=") && !strings.HasPrefix(kv, "PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	data := filepath.Join(dir, "data")
	cmd.Env = append(cmd.Env, "PATH="+strings.Join(path, string(filepath.ListSeparator)), "DIR="+data,
		fmt.Sprintf("BASE=%d", ports), fmt.Sprintf("ROUTES=%d", ports+3), fmt.Sprintf("HTTP=%d", ports+6))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("run.sh: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	got := out.String()
	if !strings.Contains(errOut.String(), "run.sh: building coagent from ") {
		t.Errorf("run.sh did not say it built coagent: stderr %q", errOut.String())
	}
	// Each node has its own HTTP listener: none says its address is in use.
	if strings.Contains(got, "no HTTP listener") {
		t.Errorf("a node of run.sh has no HTTP listener:\n%s", got)
	}
	for _, want := range []string{
		"node n1 of cluster coagent", "node n2 of cluster coagent", "node n3 of cluster coagent",
		"streams with 3 replicas", "a standby until it holds the leadership",
		`report.title = "Q3" (version 1, mod_rev 2)`,
		"no coordinator answers (a failover may be under way); sending the same intent again",
		`report.title = "Q4" (version 2, `,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("run.sh printed no %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\napplied "); n != 2 {
		t.Errorf("run.sh printed %d applied decisions, want 2:\n%s", n, got)
	}
	if n := strings.Count(got, "NODE  ROLE     EVENTS  LOG  LAG"); n != 3 {
		t.Errorf("run.sh printed %d status tables, want 3:\n%s", n, got)
	}
	// The node killed is the one the status before the kill shows
	// active; another takes over, and the killed one, restarted, is a
	// standby in the last table.
	m := regexp.MustCompile(`(?m)^\$ kill -9 \d+    # (n\d), the active coordinator\n^coagent: (n\d) is the active coordinator\n(n\d) took over \d+\.\d{3}s after (n\d) was killed\n`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("run.sh did not show the active node killed and another taking over:\n%s", got)
	}
	killed, next := m[1], m[2]
	if next == killed || m[3] != next || m[4] != killed {
		t.Errorf("killed %s, took over %s (said %s after %s): want another node taking over:\n%s", killed, next, m[3], m[4], got)
	}
	before, _, _ := strings.Cut(got, "$ kill -9 ")
	i := strings.LastIndex(before, "NODE  ROLE")
	if i < 0 {
		t.Fatalf("run.sh printed no status before the kill:\n%s", got)
	}
	if table := before[i:]; !regexp.MustCompile(`(?m)^` + killed + ` +active `).MatchString(table) {
		t.Errorf("the status before the kill does not show %s active:\n%s", killed, table)
	}
	_, last, ok := strings.Cut(got, "# "+killed+" again, on its data directory")
	if !ok {
		t.Fatalf("run.sh did not restart %s:\n%s", killed, got)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^` + killed + ` +standby +\d+ +\d+ +0 groups`),
		regexp.MustCompile(`(?m)^` + next + ` +active `),
	} {
		if !want.MatchString(last) {
			t.Errorf("the last status has no row matching %s:\n%s", want, last)
		}
	}
	if strings.Contains(last, "is the active coordinator") {
		t.Errorf("the restarted %s became active; want it a standby:\n%s", killed, last)
	}
}
