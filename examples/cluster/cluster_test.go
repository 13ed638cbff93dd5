// Package cluster holds the script that starts a loopback cluster of three
// coagent serve nodes (run.sh); its test runs the script as a user would.
package cluster

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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

func TestRunScript(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three coagent processes")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "coagent")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/coagent")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build coagent: %v\n%s", err, out)
	}
	ports := freeRun(t, 6)
	cmd := exec.Command("bash", "run.sh")
	cmd.Env = append(cmd.Environ(), "COAGENT="+bin, "DIR="+filepath.Join(dir, "data"),
		fmt.Sprintf("BASE=%d", ports), fmt.Sprintf("ROUTES=%d", ports+3))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("run.sh: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	for _, want := range []string{
		"node n1 of cluster coagent", "streams with 3 replicas",
		"no coordinator on this node",
		"applied ", `report.title = "Q3" (version 1, mod_rev 2)`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("run.sh printed no %q:\n%s", want, out.String())
		}
	}
}
