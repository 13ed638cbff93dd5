package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

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
		{[]string{"mcp", "--agent", "alice", "--silence", "0s"}, "--silence 0s"},
		{[]string{"mcp", "--agent", "alice", "--http-token", "x"}, "--http-token and --http-no-auth are of --http ADDR"},
		{[]string{"mcp", "--agent", "alice", "--silence", "11m"}, "--silence 11m0s: want a positive duration below the HTTP idle timeout"},
	} {
		_, errOut, err := runCmd(t, "", c.args...)
		if !errors.Is(err, errUsage) || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: %v, %q; want a usage error with %q", c.args, err, errOut, c.want)
		}
	}
}

// stdioHost is a host speaking the protocol to `coagent mcp` on its
// stdin and stdout.
type stdioHost struct {
	t      *testing.T
	in     *io.PipeWriter
	lines  *bufio.Scanner
	done   chan error
	errOut *lockedBuilder
}

// startMCPStdio runs `coagent mcp --agent NAME` against the NATS server at
// url, with a host on its stdin and stdout.
func startMCPStdio(t *testing.T, url, agent string) *stdioHost {
	t.Helper()
	stdin, host := io.Pipe()
	replies, stdout := io.Pipe()
	h := &stdioHost{t: t, in: host, lines: bufio.NewScanner(replies), done: make(chan error, 1), errOut: &lockedBuilder{}}
	h.lines.Buffer(nil, 1<<20)
	go func() {
		h.done <- run(context.Background(), []string{"mcp", "--agent", agent, "--nats", url}, stdin, stdout, h.errOut)
		stdout.Close()
	}()
	t.Cleanup(func() { host.Close(); replies.Close() })
	return h
}

func (h *stdioHost) send(msg string) {
	h.t.Helper()
	if _, err := io.WriteString(h.in, msg+"\n"); err != nil {
		h.t.Fatal(err)
	}
}

// rpcReply is one line the command writes.
type rpcReply struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// next is the next line the command writes that is not a notification.
func (h *stdioHost) next() rpcReply {
	h.t.Helper()
	for h.lines.Scan() {
		var m rpcReply
		if err := json.Unmarshal(h.lines.Bytes(), &m); err != nil {
			h.t.Fatalf("stdout line %q is not JSON-RPC: %v", h.lines.Text(), err)
		}
		if m.ID != nil {
			return m
		}
	}
	h.t.Fatalf("no more replies (%v); stderr:\n%s", h.lines.Err(), h.errOut.String())
	return rpcReply{}
}

// reply is the result of request id, skipping other lines.
func (h *stdioHost) reply(id int) json.RawMessage {
	h.t.Helper()
	for {
		m := h.next()
		if string(m.ID) == strconv.Itoa(id) {
			if m.Error != nil {
				h.t.Fatalf("request %d: error %d %s", id, m.Error.Code, m.Error.Message)
			}
			return m.Result
		}
	}
}

func (h *stdioHost) initialize() json.RawMessage {
	h.t.Helper()
	h.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	init := h.reply(1)
	h.send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
	return init
}

// TestMCPStdio speaks the protocol to `coagent mcp` on its stdin and
// stdout, as a host does: the handshake, then a claim; closing stdin ends
// the session and the command.
func TestMCPStdio(t *testing.T) {
	ns := natstest.Run(t)
	coordtest.Start(t, ns, coordinator.Options{})
	h := startMCPStdio(t, ns.ClientURL(), "alice")
	var init struct {
		ServerInfo struct{ Name, Version string } `json:"serverInfo"`
	}
	json.Unmarshal(h.initialize(), &init)
	if init.ServerInfo.Name != "coagent" || strings.Contains(init.ServerInfo.Version, "\n") {
		t.Errorf("serverInfo: %+v", init.ServerInfo)
	}
	h.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"claim","arguments":{"path":"tasks.t1"}}}`)
	var claim struct {
		StructuredContent struct {
			OK     bool   `json:"ok"`
			HeldBy string `json:"held_by"`
		} `json:"structuredContent"`
	}
	json.Unmarshal(h.reply(2), &claim)
	if !claim.StructuredContent.OK || claim.StructuredContent.HeldBy != "alice" {
		t.Fatalf("claim over stdio: %+v", claim)
	}
	h.in.Close()
	if err := <-h.done; err != nil {
		t.Fatalf("coagent mcp after stdin closed: %v\n%s", err, h.errOut.String())
	}
}

// TestMCPStdioMalformed: a line that is not one JSON-RPC message is
// answered with the JSON-RPC error, id null, and the session goes on: the
// next request is answered. Each line of the table ended the command with
// the go-sdk's own transport, and with it the renewal of the session's
// transactions.
func TestMCPStdioMalformed(t *testing.T) {
	ns := natstest.Run(t)
	coordtest.Start(t, ns, coordinator.Options{})
	h := startMCPStdio(t, ns.ClientURL(), "alice")
	h.initialize()
	deep := strings.Repeat("[", 10_001) + strings.Repeat("]", 10_001)
	for i, c := range []struct {
		name, line string
		code       int
	}{
		{"not JSON", `{not json`, -32700},
		{"empty batch", `[]`, -32600},
		{"batch", `[{"jsonrpc":"2.0","id":90,"method":"ping"},{"jsonrpc":"2.0","id":91,"method":"ping"}]`, -32600},
		{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, -32600},
		{"array id", `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, -32600},
		{"nesting deeper than 10,000", deep, -32700},
		{"deep params", `{"jsonrpc":"2.0","id":92,"method":"ping","params":{"x":` + deep + `}}`, -32700},
		{"not an object", `42`, -32600},
		{"no version", `{"method":"ping"}`, -32600},
		{"neither request nor response", `{"jsonrpc":"2.0"}`, -32600},
		{"trailing data", `{"jsonrpc":"2.0","id":94,"method":"ping"} {}`, -32700},
	} {
		h.send(c.line)
		m := h.next()
		if m.Error == nil || m.Error.Code != c.code || string(m.ID) != "null" {
			t.Fatalf("%s: got %+v (error %+v), want error %d with id null", c.name, m, m.Error, c.code)
		}
		id := 100 + i
		h.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"read","arguments":{"paths":["tasks"]}}}`, id))
		if res := h.reply(id); !strings.Contains(string(res), `"rev"`) {
			t.Fatalf("after %s: read %s", c.name, res)
		}
	}
	// A request with a bad version tag but an id it can be told by is
	// answered under that id.
	h.send(`{"jsonrpc":"1.0","id":"v1","method":"ping"}`)
	if m := h.next(); m.Error == nil || m.Error.Code != -32600 || string(m.ID) != `"v1"` {
		t.Fatalf("version 1.0: %+v", m)
	}
	h.in.Close()
	if err := <-h.done; err != nil {
		t.Fatalf("coagent mcp after stdin closed: %v\n%s", err, h.errOut.String())
	}
}

// TestMCPHTTPAuth: `coagent mcp --http` on an address that is not
// loopback is refused without a token, naming the address and the flags;
// with --http-token every request must carry the token; --http-no-auth
// serves it open, saying so.
func TestMCPHTTPAuth(t *testing.T) {
	ns := natstest.Run(t)
	coordtest.Start(t, ns, coordinator.Options{})
	var errOut bytes.Buffer
	// Served, it would run until the context ends, without an error.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, []string{"mcp", "--agent", "alice", "--nats", ns.ClientURL(), "--http", "0.0.0.0:0"},
		strings.NewReader(""), io.Discard, &errOut)
	for _, want := range []string{"--http 0.0.0.0:0", "not a loopback address", "--http-token", "$COAGENT_MCP_TOKEN", "--http-no-auth"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("--http 0.0.0.0:0 without a token: %v, want an error with %q", err, want)
		}
	}

	// serve starts `coagent mcp --http ADDR args…` and returns its URL and
	// its notes.
	serve := func(addr string, args ...string) (string, *lockedBuilder) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		notes := &lockedBuilder{}
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, append([]string{"mcp", "--agent", "alice", "--nats", ns.ClientURL(), "--http", addr}, args...),
				strings.NewReader(""), io.Discard, notes)
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("coagent mcp --http %s: %v\n%s", addr, err, notes.String())
			}
		})
		var url string
		natstest.CheckFor(t, 10*time.Second, "the listening line", func() error {
			_, rest, ok := strings.Cut(notes.String(), " on http://")
			if !ok {
				return fmt.Errorf("stderr: %q", notes.String())
			}
			hostport, _, _ := strings.Cut(rest, " ")
			_, port, err := net.SplitHostPort(hostport)
			if err != nil {
				return err
			}
			url = "http://127.0.0.1:" + port
			return nil
		})
		return url, notes
	}
	initialize := func(url, token string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	url, notes := serve("0.0.0.0:0", "--http-token", "s3cret")
	if !strings.Contains(notes.String(), "bearer token required") {
		t.Errorf("the listening line: %q", notes.String())
	}
	for token, want := range map[string]int{"": http.StatusUnauthorized, "wrong": http.StatusUnauthorized, "s3cret": http.StatusOK} {
		if got := initialize(url, token); got != want {
			t.Errorf("initialize with token %q: status %d, want %d", token, got, want)
		}
	}
	// From the environment, on loopback too.
	t.Setenv("COAGENT_MCP_TOKEN", "from-env")
	url, _ = serve("127.0.0.1:0")
	if got := initialize(url, ""); got != http.StatusUnauthorized {
		t.Errorf("initialize without the token of $COAGENT_MCP_TOKEN: status %d", got)
	}
	if got := initialize(url, "from-env"); got != http.StatusOK {
		t.Errorf("initialize with the token of $COAGENT_MCP_TOKEN: status %d", got)
	}
	t.Setenv("COAGENT_MCP_TOKEN", "")
	url, notes = serve("0.0.0.0:0", "--http-no-auth")
	if !strings.Contains(notes.String(), "warning: --http-no-auth: anyone who reaches") {
		t.Errorf("--http-no-auth says nothing of it: %q", notes.String())
	}
	if got := initialize(url, ""); got != http.StatusOK {
		t.Errorf("initialize with --http-no-auth: status %d", got)
	}
}
