package cluster

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// bench.sh as a user runs it, briefly: three nodes, the bench against all
// three with the raw baseline at R3, the agents across the nodes, the
// lost-update check passed, and the nodes stopped at the end.
func TestBenchScript(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three coagent processes and a bench")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "coagent")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/coagent")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build coagent: %v\n%s", err, out)
	}
	ports := freeRun(t, 6)
	cmd := exec.Command("bash", "bench.sh")
	cmd.Env = append(cmd.Environ(), "COAGENT="+bin, "DIR="+filepath.Join(dir, "data"),
		fmt.Sprintf("BASE=%d", ports), fmt.Sprintf("ROUTES=%d", ports+3),
		"AGENTS=12", "DURATION=200ms")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench.sh: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	for _, want := range []string{
		"apply over api: 12 agents", "coagent updates", "raw JetStream publish (R3)", "raw request/reply",
		"agents connected across ", "check: each of 12 keys holds exactly the updates applied to it",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench.sh printed no %q:\nstdout:\n%s\nstderr:\n%s", want, out.String(), errOut.String())
		}
	}
	if !strings.Contains(errOut.String(), "node n3 of cluster coagent") {
		t.Errorf("bench.sh did not show the nodes' start lines:\n%s", errOut.String())
	}
}
