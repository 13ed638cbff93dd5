// Package mcp_test runs the independent MCP client of this directory
// (race.mjs, the TypeScript MCP SDK) against `coagent mcp` and a real
// coordinator: the proof that a host other than the Go SDK's gets what
// docs/mcp.md promises.
package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/coagent/coagent/internal/nodetest"
)

// requireNode returns the node binary, or skips the test when node or the
// packages of package-lock.json (npm ci) are missing — unless
// COAGENT_JS_REQUIRED=1, as in CI, where a missing one is a failure.
func requireNode(t *testing.T) string {
	t.Helper()
	return nodetest.Require(t, "examples/mcp", "@modelcontextprotocol/sdk", "the MCP client")
}

// line is one step race.mjs prints.
type line struct {
	Agent  string          `json:"agent"`
	Tool   string          `json:"tool"`
	Result json.RawMessage `json:"result"`
}

func TestRace(t *testing.T) {
	node := requireNode(t)
	bin := filepath.Join(t.TempDir(), "coagent")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/coagent").CombinedOutput(); err != nil {
		t.Fatalf("build coagent: %v\n%s", err, out)
	}
	ns := natstest.Run(t)
	coordtest.Start(t, ns, coordinator.Options{})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "race.mjs")
	cmd.Env = append(os.Environ(), "COAGENT="+bin, "NATS_URL="+ns.ClientURL())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("race.mjs stdout:\n%s", stdout.String())
	if stderr.Len() > 0 {
		t.Logf("race.mjs stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("node race.mjs: %v", err)
	}
	var claims, notified int
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var s line
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		switch s.Tool {
		case "claim":
			claims++
		case "notifications/resources/updated":
			notified++
		}
	}
	if claims != 2 || notified != 1 {
		t.Fatalf("%d claims and %d notifications in the transcript, want 2 and 1", claims, notified)
	}

	// The coordinator's own record: one owner, written once.
	c, err := agents.Connect(ctx, natstest.Connect(t, ns), "checker")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Read(ctx, "tasks.t1.owner", "tasks.t1.result")
	if err != nil {
		t.Fatal(err)
	}
	var owner, result string
	st.Values["tasks.t1.owner"].Decode(&owner)
	st.Values["tasks.t1.result"].Decode(&result)
	if v := st.Values["tasks.t1.owner"].Version; v != 1 || result != "done by "+owner {
		t.Fatalf("tasks.t1: owner %q (version %d), result %q", owner, v, result)
	}
}
