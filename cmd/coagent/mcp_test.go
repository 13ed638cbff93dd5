package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
)

func TestMCPUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp"}, "missing --agent NAME"},
		{[]string{"mcp", "--agent", "a.b"}, `--agent "a.b"`},
		{[]string{"mcp", "--agent", "alice", "--nkey", "/x/bob.nk"}, "the seed file is agent bob's"},
		{[]string{"mcp", "--agent", "alice", "extra"}, "extra"},
	} {
		_, errOut, err := runCmd(t, "", c.args...)
		if !errors.Is(err, errUsage) || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: %v, %q; want a usage error with %q", c.args, err, errOut, c.want)
		}
	}
}

// TestMCPStdio speaks the protocol to `coagent mcp` on its stdin and
// stdout, as a host does: the handshake, then a claim; closing stdin ends
// the session and the command.
func TestMCPStdio(t *testing.T) {
	ns := natstest.Run(t)
	coordtest.Start(t, ns, coordinator.Options{})
	stdin, host := io.Pipe()
	replies, stdout := io.Pipe()
	done := make(chan error, 1)
	var errOut bytes.Buffer
	go func() {
		done <- run(context.Background(), []string{"mcp", "--agent", "alice", "--nats", ns.ClientURL()}, stdin, stdout, &errOut)
		stdout.Close()
	}()
	lines := bufio.NewScanner(replies)
	send := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(host, msg+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	reply := func(id int) json.RawMessage {
		t.Helper()
		for lines.Scan() {
			var m struct {
				ID     int             `json:"id"`
				Result json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
				t.Fatalf("stdout line %q is not JSON-RPC: %v", lines.Text(), err)
			}
			if m.ID == id {
				return m.Result
			}
		}
		t.Fatalf("no reply %d; stderr:\n%s", id, errOut.String())
		return nil
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	var init struct {
		ServerInfo struct{ Name, Version string } `json:"serverInfo"`
	}
	json.Unmarshal(reply(1), &init)
	if init.ServerInfo.Name != "coagent" || strings.Contains(init.ServerInfo.Version, "\n") {
		t.Errorf("serverInfo: %+v", init.ServerInfo)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"claim","arguments":{"path":"tasks.t1"}}}`)
	var claim struct {
		StructuredContent struct {
			OK     bool   `json:"ok"`
			HeldBy string `json:"held_by"`
		} `json:"structuredContent"`
	}
	json.Unmarshal(reply(2), &claim)
	if !claim.StructuredContent.OK || claim.StructuredContent.HeldBy != "alice" {
		t.Fatalf("claim over stdio: %+v", claim)
	}
	host.Close()
	if err := <-done; err != nil {
		t.Fatalf("coagent mcp after stdin closed: %v\n%s", err, errOut.String())
	}
}
