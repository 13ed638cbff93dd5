package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/agents/mcp"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/oklog/ulid/v2"
)

// board is a NATS server with a coordinator, on which the tests connect
// agents and MCP sessions.
type board struct {
	t  *testing.T
	ns *server.Server
	// svc is the coordinator; seeds the agents' seed files, by agent,
	// when the board authenticates (newAuthBoard).
	svc   *coordinator.Service
	seeds map[string]string
}

// newAuthBoard is a board under authentication (coordinator.Options.Auth)
// with the board rules rules in force, for the agents names.
func newAuthBoard(t *testing.T, rules string, names ...string) *board {
	t.Helper()
	dir := t.TempDir()
	reg := &natsauth.Registry{Agents: map[string]natsauth.Agent{}}
	b := &board{t: t, seeds: map[string]string{}}
	for _, name := range names {
		seed, err := reg.Add(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		b.seeds[name] = filepath.Join(dir, name+".nk")
		if err := os.WriteFile(b.seeds[name], seed, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	self, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := self.PublicKey()
	b.ns = natstest.Run(t, func(o *server.Options) { o.Nkeys = reg.Users("", pub) })
	nc := natstest.Connect(t, b.ns, nats.Nkey(pub, self.Sign))
	b.svc = coordtest.StartOn(t, nc, filepath.Join(dir, "log"), coordinator.Options{Auth: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.svc.SetRules(ctx, []byte(rules), "test"); err != nil {
		t.Fatal(err)
	}
	return b
}

// connect connects to the board's NATS server as agent name.
func (b *board) connect(name string) *nats.Conn {
	b.t.Helper()
	if b.seeds == nil {
		return natstest.Connect(b.t, b.ns)
	}
	opts, err := agents.AuthOptions(name, b.seeds[name])
	if err != nil {
		b.t.Fatal(err)
	}
	return natstest.Connect(b.t, b.ns, opts...)
}

func newBoard(t *testing.T) *board {
	t.Helper()
	ns := natstest.Run(t)
	return &board{t: t, ns: ns, svc: coordtest.Start(t, ns, coordinator.Options{})}
}

// rules puts the board rules file in force.
func (b *board) rules(file string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.svc.SetRules(ctx, []byte(file), "test"); err != nil {
		b.t.Fatal(err)
	}
}

// agent connects an SDK client as name.
func (b *board) agent(name string) *agents.Client {
	b.t.Helper()
	c, err := agents.Connect(context.Background(), b.connect(name), name)
	if err != nil {
		b.t.Fatalf("connect %s: %v", name, err)
	}
	b.t.Cleanup(func() { c.Close() })
	return c
}

// session is an MCP client session with the server of one agent, over the
// in-memory transport.
type session struct {
	t       *testing.T
	cs      *sdk.ClientSession
	updates chan *sdk.ResourceUpdatedNotificationParams
	acks    chan string // the URIs the server acknowledged a subscription to
}

// subscribe subscribes to uri and waits until the server says it has:
// a change made before then may not be notified.
func (s *session) subscribe(uri string) {
	s.t.Helper()
	if err := s.cs.Subscribe(context.Background(), &sdk.SubscribeParams{URI: uri}); err != nil {
		s.t.Fatalf("subscribe %s: %v", uri, err)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case got := <-s.acks:
			if got == uri {
				return
			}
		case <-timeout:
			s.t.Fatalf("subscribe %s: no acknowledgement", uri)
		}
	}
}

// server starts the MCP server of agent name, on a connection and a
// client of its own; all of it ends with the test.
func (b *board) server(name string, opts mcp.Options) *mcp.Server {
	b.t.Helper()
	nc := b.connect(name)
	c, err := agents.Connect(context.Background(), nc, name)
	if err != nil {
		b.t.Fatalf("connect %s: %v", name, err)
	}
	b.t.Cleanup(func() { c.Close() })
	srv, err := mcp.New(c, nc, opts)
	if err != nil {
		b.t.Fatalf("mcp.New: %v", err)
	}
	b.t.Cleanup(func() { srv.Close() })
	return srv
}

// openHTTP is a host's session with name's MCP server over the streamable
// HTTP transport, the server behind an httptest server; all of it ends
// with the test.
func (b *board) openHTTP(name string, opts mcp.Options) *session {
	b.t.Helper()
	hs := httptest.NewServer(b.server(name, opts).HTTPHandler())
	b.t.Cleanup(hs.Close)
	client := sdk.NewClient(&sdk.Implementation{Name: name + "-host", Version: "v0"}, nil)
	cs, err := client.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { cs.Close() })
	return &session{t: b.t, cs: cs}
}

// open starts the MCP server of agent name and connects a client session
// to it; opts are the server's options.
func (b *board) open(name string, opts mcp.Options) *session {
	b.t.Helper()
	srv := b.server(name, opts)
	st, ct := sdk.NewInMemoryTransports()
	if _, err := srv.MCP().Connect(context.Background(), st, nil); err != nil {
		b.t.Fatalf("server connect: %v", err)
	}
	s := &session{t: b.t, updates: make(chan *sdk.ResourceUpdatedNotificationParams, 16), acks: make(chan string, 16)}
	client := sdk.NewClient(&sdk.Implementation{Name: "test-host", Version: "v0"}, &sdk.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *sdk.ResourceUpdatedNotificationRequest) {
			s.updates <- req.Params
		},
	})
	// The protocol's subscribe (subscriptions/listen) returns before the
	// server has subscribed; its acknowledgement says that it has.
	client.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if p, ok := req.GetParams().(*sdk.SubscriptionsAcknowledgedParams); ok {
				for _, uri := range p.Notifications.ResourceSubscriptions {
					s.acks <- uri
				}
			}
			return next(ctx, method, req)
		}
	})
	cs, err := client.Connect(context.Background(), ct, nil)
	if err != nil {
		b.t.Fatalf("client connect: %v", err)
	}
	b.t.Cleanup(func() { cs.Close() })
	s.cs = cs
	return s
}

// call calls tool with args and decodes its structured content into out;
// it returns the result.
func (s *session) call(tool string, args any, out any) *sdk.CallToolResult {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		s.t.Fatalf("%s: protocol error: %v", tool, err)
	}
	if out != nil && res.StructuredContent != nil {
		data, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(data, out); err != nil {
			s.t.Fatalf("%s: structured content %s: %v", tool, data, err)
		}
	}
	return res
}

// result calls a tool that returns a Result.
func (s *session) result(tool string, args any) *mcp.Result {
	s.t.Helper()
	var r mcp.Result
	res := s.call(tool, args, &r)
	if res.StructuredContent == nil {
		s.t.Fatalf("%s: no structured content: %s", tool, text(res))
	}
	// A host that looks only at isError must see a rejection as a failure.
	if res.IsError == r.OK {
		s.t.Fatalf("%s: isError %v with ok %v: %s", tool, res.IsError, r.OK, text(res))
	}
	return &r
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// ok fails the test unless r is a success.
func ok(t *testing.T, what string, r *mcp.Result) {
	t.Helper()
	if !r.OK {
		t.Fatalf("%s: %s (%s): %s", what, r.Outcome, r.Reason, r.Detail)
	}
}

// rejected fails the test unless r is a rejection for reason with a
// detail and advice.
func rejected(t *testing.T, what string, r *mcp.Result, reason intents.Reason) {
	t.Helper()
	if r.OK || r.Reason != string(reason) {
		t.Fatalf("%s: got ok=%v %s (%s) %q, want rejected %s", what, r.OK, r.Outcome, r.Reason, r.Detail, reason)
	}
	if r.Detail == "" || r.Next == "" {
		t.Fatalf("%s: rejected %s without detail or next: %+v", what, reason, r)
	}
}

func set(path string, v any) map[string]any {
	return map[string]any{"path": path, "op": "set", "value": v}
}

func TestToolsAndSchemas(t *testing.T) {
	b := newBoard(t)
	s := b.open("w1", mcp.Options{Arbiter: true})
	ctx := context.Background()
	tools := map[string]*sdk.Tool{}
	for tool, err := range s.cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		tools[tool.Name] = tool
	}
	want := []string{"read", "write", "claim", "claim_next", "release", "begin", "commit", "abort", "history", "next_case", "resolve"}
	for _, name := range want {
		tool := tools[name]
		if tool == nil {
			t.Fatalf("tool %s missing; have %v", name, tools)
		}
		if tool.Description == "" || tool.OutputSchema == nil {
			t.Errorf("tool %s: no description or no output schema", name)
		}
	}
	if len(tools) != len(want) {
		t.Errorf("tools %d, want %d", len(tools), len(want))
	}
	schema := func(name string) map[string]any {
		data, _ := json.Marshal(tools[name].InputSchema)
		var m map[string]any
		json.Unmarshal(data, &m)
		return m
	}
	w := schema("write")
	if req := fmt.Sprint(w["required"]); req != "[writes]" {
		t.Errorf("write requires %s, want [writes]", req)
	}
	props := w["properties"].(map[string]any)
	writes := props["writes"].(map[string]any)
	if writes["minItems"] != 1.0 {
		t.Errorf("write.writes minItems = %v", writes["minItems"])
	}
	item := writes["items"].(map[string]any)
	op := item["properties"].(map[string]any)["op"].(map[string]any)
	if fmt.Sprint(op["enum"]) != "[set merge append incr delete]" {
		t.Errorf("write.writes[].op enum = %v", op["enum"])
	}
	if fmt.Sprint(item["required"]) != "[path]" {
		t.Errorf("write.writes[] requires %v, want [path]", item["required"])
	}
	if oc := props["on_conflict"].(map[string]any); fmt.Sprint(oc["enum"]) != "[reject wait escalate]" {
		t.Errorf("write.on_conflict enum = %v", oc["enum"])
	}
	for name, req := range map[string]string{"claim": "[path]", "commit": "[txn writes]", "abort": "[txn]", "read": "[paths]",
		"begin": "[writes]", "resolve": "[case rationale]"} {
		if got := fmt.Sprint(schema(name)["required"]); got != req {
			t.Errorf("%s requires %s, want %s", name, got, req)
		}
	}
	// Without Arbiter the arbiter's tools are not offered.
	plain := b.open("w2", mcp.Options{})
	for tool, err := range plain.cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.Name == "next_case" || tool.Name == "resolve" {
			t.Errorf("tool %s offered without Options.Arbiter", tool.Name)
		}
	}
	// No schema gives a node more than one type (["null", "array"]),
	// which some hosts refuse.
	for name, tool := range tools {
		for what, sch := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			data, _ := json.Marshal(sch)
			var m any
			json.Unmarshal(data, &m)
			if where := typeList(m, ""); where != "" {
				t.Errorf("tool %s: %s schema has a list of types at %s", name, what, where)
			}
		}
	}
	// A replacement's values are any JSON, not arrays of bytes.
	rp := schema("resolve")["properties"].(map[string]any)["replacement"].(map[string]any)
	val := rp["properties"].(map[string]any)["writes"].(map[string]any)["items"].(map[string]any)["properties"].(map[string]any)["value"]
	if val != true || rp["required"] != nil {
		t.Errorf("resolve.replacement: value %v, required %v", val, rp["required"])
	}
	// A call that does not fit the schema is a tool error naming the
	// field and the value, with advice, not the go-sdk's bare
	// `validating "arguments"`.
	for _, c := range []struct {
		args any
		want []string
	}{
		{map[string]any{"writes": []any{map[string]any{"path": "a.b", "op": "replace"}}},
			[]string{`writes[0].op = "replace": want one of set, merge, append, incr, delete`}},
		{map[string]any{}, []string{"writes is missing"}},
		{map[string]any{"writes": []any{}}, []string{"writes is empty"}},
		{map[string]any{"writes": "a.b", "wait_ms": 1.5}, []string{`writes = "a.b": want an array`, "wait_ms = 1.5: want an integer"}},
		{map[string]any{"writes": []any{set("a.b", 1)}, "expect": []any{map[string]any{"path": "a.b", "version": -1}}, "force": true},
			[]string{"expect[0].version = -1: want at least 0", "force is not a field here"}},
	} {
		var r mcp.Result
		res := s.call("write", c.args, &r)
		if !res.IsError || r.Reason != "invalid" || r.Next == "" || strings.Contains(text(res), "validating") {
			t.Errorf("write %v: isError %v, %+v: %s", c.args, res.IsError, r, text(res))
		}
		for _, w := range c.want {
			if !strings.Contains(r.Detail, w) {
				t.Errorf("write %v: detail %q, want %q in it", c.args, r.Detail, w)
			}
		}
	}
	// A tool whose output is not a Result says it in its text alone.
	res := s.call("read", map[string]any{"paths": "tasks"}, nil)
	if !res.IsError || res.StructuredContent != nil || !strings.Contains(text(res), `paths = "tasks": want an array`) {
		t.Errorf("read with paths a string: %v %v %s", res.IsError, res.StructuredContent, text(res))
	}
}

// typeList is where in schema m a "type" is a list, or "".
func typeList(m any, at string) string {
	switch m := m.(type) {
	case map[string]any:
		if _, ok := m["type"].([]any); ok {
			return at + "/type"
		}
		for k, v := range m {
			if w := typeList(v, at+"/"+k); w != "" {
				return w
			}
		}
	case []any:
		for i, v := range m {
			if w := typeList(v, fmt.Sprintf("%s/%d", at, i)); w != "" {
				return w
			}
		}
	}
	return ""
}

func TestReadWrite(t *testing.T) {
	b := newBoard(t)
	s := b.open("w1", mcp.Options{})
	r := s.result("write", map[string]any{"action": "setup", "writes": []any{
		set("board.title", "Q3"),
		map[string]any{"path": "board.stats", "op": "merge", "value": map[string]any{"done": 0, "open": 2}},
		map[string]any{"path": "board.log", "op": "append", "value": "started"},
		map[string]any{"path": "board.count", "op": "incr"},
	}})
	ok(t, "write", r)
	if r.Outcome != "applied" || r.Rev == 0 || r.Versions["board.title"] != 1 || r.Intent == "" {
		t.Fatalf("write: %+v", r)
	}
	var rd struct {
		Rev    uint64
		Values map[string]struct {
			Exists  bool
			Value   any
			Version uint64
		}
	}
	s.call("read", map[string]any{"paths": []string{"board.title", "board.count", "board.stats.open", "board.none"}}, &rd)
	if rd.Rev < r.Rev || rd.Values["board.title"].Value != "Q3" || rd.Values["board.count"].Value != 1.0 ||
		rd.Values["board.stats.open"].Value != 2.0 || rd.Values["board.none"].Exists {
		t.Fatalf("read: %+v", rd)
	}
	ok(t, "delete", s.result("write", map[string]any{"writes": []any{map[string]any{"path": "board.log", "op": "delete"}}}))

	// Each rejection a write can surface.
	rejected(t, "bad path", s.result("write", map[string]any{"writes": []any{set("board..x", 1)}}), intents.ReasonInvalid)
	rejected(t, "set without value", s.result("write", map[string]any{"writes": []any{map[string]any{"path": "board.x"}}}), intents.ReasonInvalid)
	rejected(t, "bad expression", s.result("write", map[string]any{"writes": []any{set("board.x", 1)}, "pre": []string{"state.board.title ==="}}),
		intents.ReasonInvalid)
	r = s.result("write", map[string]any{"writes": []any{set("board.title", "Q4")}, "pre": []string{`state.board.title == "Q2"`}})
	rejected(t, "pre", r, intents.ReasonPreconditionFailed)
	if !strings.Contains(r.Detail, "Q3") {
		t.Errorf("pre: the detail does not show the value seen: %q", r.Detail)
	}
	rejected(t, "post", s.result("write", map[string]any{"writes": []any{set("board.stats.done", 5)},
		"post": []string{"state.board.stats.done <= state.board.stats.open"}}), intents.ReasonPostconditionFailed)
	r = s.result("write", map[string]any{"writes": []any{set("board.title", "Q4")}, "expect": []any{map[string]any{"path": "board.title", "version": 0}}})
	rejected(t, "expect", r, intents.ReasonStaleRead)
	if r.Versions["board.title"] != 1 || !r.Retryable {
		t.Errorf("stale read: versions %v retryable %v", r.Versions, r.Retryable)
	}
	ok(t, "expect current", s.result("write", map[string]any{"writes": []any{set("board.title", "Q4")},
		"expect": []any{map[string]any{"path": "board.title", "version": 1}}}))

	// Another agent's transaction holds board.title.
	other := b.agent("w2")
	tx, err := other.Propose(context.Background(), intents.Propose("hold").Write("board.title", intents.OpSet))
	if err != nil {
		t.Fatal(err)
	}
	r = s.result("write", map[string]any{"writes": []any{set("board.title", "Q5")}})
	rejected(t, "conflict", r, intents.ReasonConflict)
	if len(r.Conflicts) == 0 || r.Conflicts[0].WithAgent != "w2" || !strings.Contains(r.Next, "w2") {
		t.Errorf("conflict: %+v", r)
	}
	rejected(t, "wait", s.result("write", map[string]any{"writes": []any{set("board.title", "Q5")}, "on_conflict": "wait", "wait_ms": 200}),
		intents.ReasonWaitTimeout)
	// A write that waits is applied once the holder ends.
	done := make(chan *mcp.Result, 1)
	go func() {
		var r mcp.Result
		res, err := s.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write",
			Arguments: map[string]any{"writes": []any{set("board.title", "Q6")}, "on_conflict": "wait", "wait_ms": 20000}})
		if err == nil {
			data, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(data, &r)
		}
		done <- &r
	}()
	natstest.CheckFor(t, 10*time.Second, "the write waits on w2's transaction", func() error {
		var h mcp.HistoryOutput
		s.call("history", map[string]any{"type": "wait", "mine": true}, &h)
		if len(h.Events) < 2 { // the wait_timeout one, then this one
			return fmt.Errorf("%d wait events", len(h.Events))
		}
		return nil
	})
	if err := tx.Abort(context.Background()); err != nil {
		t.Fatal(err)
	}
	ok(t, "write after wait", <-done)
}

func TestClaimRace(t *testing.T) {
	b := newBoard(t)
	s1, s2 := b.open("alice", mcp.Options{}), b.open("bob", mcp.Options{})
	var wg sync.WaitGroup
	results := map[string]*mcp.Result{}
	var mu sync.Mutex
	start := make(chan struct{})
	for name, s := range map[string]*session{"alice": s1, "bob": s2} {
		wg.Go(func() {
			<-start
			var r mcp.Result
			res, err := s.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "claim", Arguments: map[string]any{"path": "tasks.t-1"}})
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			data, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(data, &r)
			mu.Lock()
			results[name] = &r
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	var winner, loser string
	for name, r := range results {
		if r.OK {
			if winner != "" {
				t.Fatalf("both won: %+v", results)
			}
			winner = name
		} else {
			loser = name
		}
	}
	if winner == "" || loser == "" {
		t.Fatalf("want one winner and one loser: %+v %+v", results["alice"], results["bob"])
	}
	lost := results[loser]
	rejected(t, "lost claim", lost, intents.ReasonPreconditionFailed)
	if lost.HeldBy != winner || !strings.Contains(lost.Next, winner) {
		t.Fatalf("lost claim names %q (%s), want %s", lost.HeldBy, lost.Next, winner)
	}
	sessions := map[string]*session{"alice": s1, "bob": s2}
	// Claiming again what is yours is fine; releasing what is not is not.
	ok(t, "claim again", sessions[winner].result("claim", map[string]any{"path": "tasks.t-1"}))
	r := sessions[loser].result("release", map[string]any{"path": "tasks.t-1"})
	rejected(t, "release of another's", r, intents.ReasonPreconditionFailed)
	if r.HeldBy != winner {
		t.Errorf("release names %q, want %s", r.HeldBy, winner)
	}
	ok(t, "release", sessions[winner].result("release", map[string]any{"path": "tasks.t-1"}))
	r = sessions[winner].result("release", map[string]any{"path": "tasks.t-1"})
	rejected(t, "release twice", r, intents.ReasonPreconditionFailed)
	if !strings.Contains(r.Next, "not held by anyone") {
		t.Errorf("release twice: %s", r.Next)
	}
	ok(t, "claim after release", sessions[loser].result("claim", map[string]any{"path": "tasks.t-1"}))
	res := s1.call("claim", map[string]any{"path": "tasks..x"}, nil)
	if !res.IsError || !strings.Contains(text(res), "tasks..x") {
		t.Errorf("claim of a bad path: %s", text(res))
	}
}

// leasedTasks are board rules under which a claim of a task holds a lease
// of a second: short, so that a test waits through several, and renewed
// every third of one, so that a renewal a loaded machine (-race) delays
// still lands before the lease ends.
const (
	claimLease  = time.Second
	leasedTasks = `{"rules":[{"pattern":"tasks.*","kind":"task","lease":"1s","reclaim_to":"PENDING"}]}`
)

// taskOf reads the task record at path as agent c.
func taskOf(t *testing.T, c *agents.Client, path string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.Read(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := st.Values[path].Decode(&rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestClaimLease: under a rule that gives claims a lease, a session's
// claim is renewed while the session lives, its writes to the task carry
// the fence, its release ends the lease, and the task comes back to the
// board (reclaimed) once the session ends.
func TestClaimLease(t *testing.T) {
	b := newBoard(t)
	b.rules(leasedTasks)
	lead := b.agent("lead")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := lead.Apply(ctx, intents.Apply("plan").Set("tasks.t1", map[string]any{"status": "PENDING"}).
		Set("tasks.t2", map[string]any{"status": "PENDING"})); err != nil {
		t.Fatal(err)
	}
	s := b.open("w1", mcp.Options{})
	r := s.result("claim", map[string]any{"path": "tasks.t1", "set": map[string]any{"status": "RUNNING"}})
	ok(t, "claim", r)
	if r.Txn == "" || r.Fence == 0 || r.LeaseExpires == nil || r.HeldBy != "w1" {
		t.Fatalf("a claim under a leased rule: %+v; want its lease's txn, fence and end", r)
	}
	claimed := *r.LeaseExpires
	// Renewed while the session lives: a renewal three lease lengths
	// after the claim's lease would have ended.
	natstest.CheckFor(t, 30*time.Second, "renewals of the claim's lease past three lengths", func() error {
		var h mcp.HistoryOutput
		s.call("history", map[string]any{"txn": r.Txn, "type": "renew", "limit": 500}, &h)
		if n := len(h.Events); n == 0 || h.Events[n-1].Time.Before(claimed.Add(3*claimLease)) {
			return fmt.Errorf("%d renewals", n)
		}
		return nil
	})
	if rec := taskOf(t, lead, "tasks.t1"); rec["owner"] != "w1" || rec["status"] != "RUNNING" {
		t.Fatalf("the task while the session lives: %v", rec)
	}
	// The session's writes to the task carry the fence.
	ok(t, "write to the claimed task", s.result("write", map[string]any{"writes": []any{set("tasks.t1.note", "half way")}}))

	// Release carries the fence, ends the lease and says which it was.
	r2 := s.result("claim", map[string]any{"path": "tasks.t2"})
	ok(t, "claim t2", r2)
	rel := s.result("release", map[string]any{"path": "tasks.t2", "set": map[string]any{"status": "DONE"}})
	ok(t, "release t2", rel)
	if rel.Txn != r2.Txn || rel.Fence != r2.Fence {
		t.Fatalf("release names lease %s fence %d, want %s fence %d", rel.Txn, rel.Fence, r2.Txn, r2.Fence)
	}
	if rec := taskOf(t, lead, "tasks.t2"); rec["owner"] != nil || rec["status"] != "DONE" {
		t.Fatalf("the task after release: %v", rec)
	}

	// The session ends: its claim is no longer renewed, and the task
	// comes back.
	if err := s.cs.Close(); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 30*time.Second, "the reclaim of tasks.t1", func() error {
		if rec := taskOf(t, lead, "tasks.t1"); rec["owner"] != nil || rec["status"] != "PENDING" {
			return fmt.Errorf("the task: %v", rec)
		}
		return nil
	})
	other := b.open("w2", mcp.Options{})
	ok(t, "claim after the reclaim", other.result("claim", map[string]any{"path": "tasks.t1"}))
}

func TestTransaction(t *testing.T) {
	b := newBoard(t)
	s := b.open("w1", mcp.Options{})
	ok(t, "setup", s.result("write", map[string]any{"writes": []any{set("doc.limit", 3)}}))
	r := s.result("begin", map[string]any{"action": "draft", "lease_ms": 600,
		"writes": []any{map[string]any{"path": "doc.text"}, map[string]any{"path": "doc.words", "op": "set"}},
		"reads":  []any{map[string]any{"path": "doc.limit", "version": 1}}})
	ok(t, "begin", r)
	txn := r.Txn
	if r.Outcome != "granted" || txn == "" || r.LeaseExpires == nil {
		t.Fatalf("begin: %+v", r)
	}
	// Another agent cannot write what the transaction holds, nor begin on it.
	other := b.open("w2", mcp.Options{})
	rejected(t, "other's write", other.result("write", map[string]any{"writes": []any{set("doc.text", "x")}}), intents.ReasonConflict)
	rejected(t, "other's begin", other.result("begin", map[string]any{"writes": []any{map[string]any{"path": "doc"}}}), intents.ReasonConflict)
	rejected(t, "other's commit", other.result("commit", map[string]any{"txn": txn, "writes": []any{set("doc.text", "x")}}), intents.ReasonInvalid)
	// The lease is renewed between calls, past its own length.
	natstest.CheckFor(t, 10*time.Second, "two renewals of the lease", func() error {
		var h mcp.HistoryOutput
		s.call("history", map[string]any{"txn": txn, "type": "renew"}, &h)
		if len(h.Events) < 2 {
			return fmt.Errorf("%d renewals", len(h.Events))
		}
		return nil
	})
	rejected(t, "out of scope", s.result("commit", map[string]any{"txn": txn, "writes": []any{set("doc.title", "x")}}), intents.ReasonOutOfScope)
	rejected(t, "post", s.result("commit", map[string]any{"txn": txn, "writes": []any{set("doc.words", 9)},
		"post": []string{"state.doc.words <= state.doc.limit"}}), intents.ReasonPostconditionFailed)
	rejected(t, "begin with values", s.result("begin", map[string]any{"writes": []any{set("doc.x", 1)}}), intents.ReasonInvalid)
	if res := s.call("begin", map[string]any{"writes": []any{map[string]any{"path": "doc.y"}}, "lease_ms": 1}, nil); !res.IsError ||
		!strings.Contains(text(res), "lease_ms") {
		t.Errorf("begin with lease_ms 1: %s", text(res))
	}
	r = s.result("commit", map[string]any{"txn": txn, "action": "draft", "writes": []any{set("doc.text", "hello"), set("doc.words", 1)},
		"post": []string{"state.doc.words <= state.doc.limit"}})
	ok(t, "commit", r)
	if r.Outcome != "committed" || r.Txn != txn || r.Versions["doc.text"] != 1 {
		t.Fatalf("commit: %+v", r)
	}
	rejected(t, "commit twice", s.result("commit", map[string]any{"txn": txn, "writes": []any{set("doc.text", "again")}}), intents.ReasonInvalid)
	// Abort.
	r = s.result("begin", map[string]any{"writes": []any{map[string]any{"path": "doc.text"}}})
	ok(t, "begin 2", r)
	ok(t, "abort", s.result("abort", map[string]any{"txn": r.Txn}))
	rejected(t, "abort twice", s.result("abort", map[string]any{"txn": r.Txn}), intents.ReasonInvalid)
	ok(t, "other's write after abort", other.result("write", map[string]any{"writes": []any{set("doc.text", "x")}}))
}

// TestSessionEndLetsLeaseExpire: a host that goes away leaves its
// transactions to expire at the coordinator, which logs the expiry.
func TestSessionEndLetsLeaseExpire(t *testing.T) {
	b := newBoard(t)
	s := b.open("w1", mcp.Options{})
	r := s.result("begin", map[string]any{"writes": []any{map[string]any{"path": "doc.text"}}, "lease_ms": 500})
	ok(t, "begin", r)
	observer := b.open("observer", mcp.Options{})
	if err := s.cs.Close(); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, "the expiry of "+r.Txn+" in the log", func() error {
		var h mcp.HistoryOutput
		observer.call("history", map[string]any{"txn": r.Txn, "type": "expire"}, &h)
		if len(h.Events) != 1 {
			return fmt.Errorf("%d expire events", len(h.Events))
		}
		return nil
	})
	// And the paths are free again.
	ok(t, "write after the expiry", observer.result("write", map[string]any{"writes": []any{set("doc.text", "free")}}))
}

func TestHistory(t *testing.T) {
	b := newBoard(t)
	s := b.open("w1", mcp.Options{})
	other := b.open("w2", mcp.Options{})
	ok(t, "w1", s.result("write", map[string]any{"action": "first", "writes": []any{set("h.a", 1)}}))
	ok(t, "w2", other.result("write", map[string]any{"action": "second", "writes": []any{set("h.b", 2)}}))
	var h mcp.HistoryOutput
	s.call("history", map[string]any{"mine": true}, &h)
	for _, ev := range h.Events {
		if ev.Agent != "w1" {
			t.Fatalf("mine: an event of %s: %+v", ev.Agent, ev)
		}
	}
	if !slices.ContainsFunc(h.Events, func(e mcp.HistoryEvent) bool { return e.Type == "decision" && strings.HasPrefix(e.What, "applied") }) {
		t.Fatalf("mine: no applied decision in %+v", h.Events)
	}
	s.call("history", map[string]any{"path": "h.b", "type": "change"}, &h)
	if len(h.Events) != 1 || h.Events[0].Agent != "w2" || h.Events[0].What != "set h.b = 2 (v1)" {
		t.Fatalf("path h.b: %+v", h.Events)
	}
	s.call("history", map[string]any{"limit": 2}, &h)
	if len(h.Events) != 2 || h.Next == 0 {
		t.Fatalf("limit 2: %d events, next %d", len(h.Events), h.Next)
	}
	res := s.call("history", map[string]any{"path": "h..b"}, nil)
	if !res.IsError {
		t.Errorf("history of a bad path: %s", text(res))
	}
}

func TestResources(t *testing.T) {
	b := newBoard(t)
	s := b.open("w1", mcp.Options{})
	other := b.open("w2", mcp.Options{})
	ok(t, "setup", other.result("write", map[string]any{"writes": []any{set("tasks.t1.status", "open")}}))
	ctx := context.Background()
	read := func() mcp.StateResource {
		res, err := s.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "coagent://state/tasks.t1"})
		if err != nil {
			t.Fatal(err)
		}
		var st mcp.StateResource
		if err := json.Unmarshal([]byte(res.Contents[0].Text), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := read(); !st.Exists || st.Version != 1 || fmt.Sprint(st.Value) != "map[status:open]" {
		t.Fatalf("resource: %+v", st)
	}
	if _, err := s.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "coagent://state/tasks..t1"}); err == nil {
		t.Fatal("reading a bad path: no error")
	}
	s.subscribe("coagent://state/tasks")
	ok(t, "outside", other.result("write", map[string]any{"writes": []any{set("other.x", 1)}}))
	r := other.result("write", map[string]any{"writes": []any{set("tasks.t1.status", "done")}})
	ok(t, "change", r)
	select {
	case u := <-s.updates:
		if u.URI != "coagent://state/tasks" || u.Meta["agent"] != "w2" || u.Meta["rev"] != float64(r.Rev) {
			t.Fatalf("update: %+v", u)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no resource update for a change under tasks")
	}
	if st := read(); st.Version != 2 {
		t.Fatalf("after the change: %+v", st)
	}
	if err := s.cs.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: "coagent://state/tasks"}); err != nil {
		t.Fatal(err)
	}
}

func TestPrompt(t *testing.T) {
	b := newBoard(t)
	s := b.open("w1", mcp.Options{})
	res, err := s.cs.GetPrompt(context.Background(), &sdk.GetPromptParams{Name: "shared_board"})
	if err != nil {
		t.Fatal(err)
	}
	if txt := res.Messages[0].Content.(*sdk.TextContent).Text; !strings.Contains(txt, "agent w1") || !strings.Contains(txt, "claim") {
		t.Fatalf("prompt: %s", txt)
	}
	if init := s.cs.InitializeResult(); !strings.Contains(init.Instructions, "w1") {
		t.Fatalf("instructions: %q", init.Instructions)
	}
}

func TestArbiter(t *testing.T) {
	b := newBoard(t)
	judge := b.open("judge", mcp.Options{Arbiter: true})
	holder := b.open("holder", mcp.Options{})
	asker := b.open("asker", mcp.Options{})
	r := holder.result("begin", map[string]any{"writes": []any{map[string]any{"path": "doc.intro"}}})
	ok(t, "begin", r)
	var empty mcp.NextCaseOutput
	judge.call("next_case", map[string]any{"wait_ms": 100}, &empty)
	if empty.Case != nil || empty.Next == "" {
		t.Fatalf("next_case with no case: %+v", empty)
	}
	escalated := make(chan *mcp.Result, 1)
	go func() {
		var r mcp.Result
		res, err := asker.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write",
			Arguments: map[string]any{"writes": []any{set("doc.intro", "mine")}, "on_conflict": "escalate"}})
		if err == nil {
			data, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(data, &r)
		}
		escalated <- &r
	}()
	var nc mcp.NextCaseOutput
	natstest.CheckFor(t, 20*time.Second, "a case", func() error {
		judge.call("next_case", map[string]any{"wait_ms": 2000}, &nc)
		if nc.Case == nil {
			return fmt.Errorf("no case")
		}
		return nil
	})
	c := nc.Case
	if len(c.Intents) != 2 || c.Holder == nil || c.Holder.Agent != "holder" {
		t.Fatalf("case: %+v", c)
	}
	var esc, prop string
	for _, in := range c.Intents {
		if in.Escalated {
			esc = in.ID
		} else {
			prop = in.ID
		}
	}
	var out mcp.ResolveOutput
	res := judge.call("resolve", map[string]any{"case": c.ID, "winners": []string{prop, "01J00000000000000000000000"}, "rationale": "x"}, &out)
	if out.OK || !res.IsError || out.Reason != "invalid" || !strings.Contains(out.Detail, "01J00000000000000000000000") || out.Next == "" {
		t.Fatalf("resolve naming an intent not in the case: isError %v, %+v", res.IsError, out)
	}
	judge.call("resolve", map[string]any{"case": "01J00000000000000000000000", "losers": []string{esc}, "rationale": "x"}, &out)
	if out.OK || out.Reason != "invalid" {
		t.Fatalf("resolve of a case not held: %+v", out)
	}
	judge.call("resolve", map[string]any{"case": c.ID, "winners": []string{prop}, "losers": []string{esc}, "rationale": "the holder was first"}, &out)
	if !out.OK {
		t.Fatalf("resolve: %+v", out)
	}
	lost := <-escalated
	rejected(t, "escalated write", lost, intents.ReasonArbiterRejected)
	if !strings.Contains(lost.Detail, "the holder was first") {
		t.Errorf("the loser is not told the rationale: %q", lost.Detail)
	}

	// The next case goes the other way: the escalated write wins, the
	// holder's transaction is preempted, and its commit is told so.
	go func() {
		var r mcp.Result
		res, err := asker.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write",
			Arguments: map[string]any{"writes": []any{set("doc.intro", "mine")}, "on_conflict": "escalate"}})
		if err == nil {
			data, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(data, &r)
		}
		escalated <- &r
	}()
	first := c.ID
	natstest.CheckFor(t, 20*time.Second, "a second case", func() error {
		nc = mcp.NextCaseOutput{}
		judge.call("next_case", map[string]any{"wait_ms": 2000}, &nc)
		if nc.Case == nil || nc.Case.ID == first {
			return fmt.Errorf("no new case")
		}
		return nil
	})
	var winner, preempted string
	for _, in := range nc.Case.Intents {
		if in.Escalated {
			winner = in.ID
		} else {
			preempted = in.ID
		}
	}
	judge.call("resolve", map[string]any{"case": nc.Case.ID, "winners": []string{winner}, "losers": []string{preempted},
		"rationale": "the asker's intro is needed now"}, &out)
	if !out.OK {
		t.Fatalf("second resolve: %+v", out)
	}
	ok(t, "escalated write that wins", <-escalated)
	natstest.CheckFor(t, 10*time.Second, "the holder's commit told of the preemption", func() error {
		r := holder.result("commit", map[string]any{"txn": r.Txn, "writes": []any{set("doc.intro", "late")}})
		if r.OK || r.Reason != string(intents.ReasonFenced) || r.Next == "" {
			return fmt.Errorf("commit: %+v", r)
		}
		return nil
	})

	// A third case is settled by a replacement given as a model writes
	// one: a value of any JSON, no id, agent or kind (filled in).
	r = holder.result("begin", map[string]any{"writes": []any{map[string]any{"path": "doc.intro"}}})
	ok(t, "begin again", r)
	go func() {
		var r mcp.Result
		res, err := asker.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write",
			Arguments: map[string]any{"writes": []any{set("doc.intro", "mine again")}, "on_conflict": "escalate"}})
		if err == nil {
			data, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(data, &r)
		}
		escalated <- &r
	}()
	second := nc.Case.ID
	natstest.CheckFor(t, 20*time.Second, "a third case", func() error {
		nc = mcp.NextCaseOutput{}
		judge.call("next_case", map[string]any{"wait_ms": 2000}, &nc)
		if nc.Case == nil || nc.Case.ID == first || nc.Case.ID == second {
			return fmt.Errorf("no new case")
		}
		return nil
	})
	res = judge.call("resolve", map[string]any{"case": nc.Case.ID, "rationale": "both intros, merged",
		"replacement": map[string]any{"writes": []any{set("doc.intro", map[string]any{"a": "mine again", "b": "holder's"})}}}, &out)
	if !out.OK || res.IsError {
		t.Fatalf("resolve with a replacement: %+v %s", out, text(res))
	}
	lost = <-escalated
	rejected(t, "escalated write superseded", lost, intents.ReasonArbiterRejected)
	var rd mcp.ReadOutput
	judge.call("read", map[string]any{"paths": []string{"doc.intro"}}, &rd)
	if got := fmt.Sprint(rd.Values["doc.intro"].Value); got != "map[a:mine again b:holder's]" {
		t.Fatalf("doc.intro after the replacement: %s", got)
	}
}

// TestAdvice: every rejection reason of SPEC §3 has its own advice.
func TestAdvice(t *testing.T) {
	seen := map[string]intents.Reason{}
	for _, reason := range intents.Reasons {
		r := mcp.Advice(reason)
		if r == mcp.Advice("no such reason") {
			t.Errorf("reason %s has no advice of its own", reason)
		}
		if prev, dup := seen[r]; dup {
			t.Errorf("reasons %s and %s have the same advice", prev, reason)
		}
		seen[r] = reason
	}
}

// TestHTTP: over streamable HTTP each client is a session of its own, and
// one that ends (the client closes it) lets its transaction expire.
func TestHTTP(t *testing.T) {
	b := newBoard(t)
	s := b.openHTTP("web", mcp.Options{})
	cs := s.cs
	r := s.result("begin", map[string]any{"writes": []any{map[string]any{"path": "web.page"}}, "lease_ms": 500})
	ok(t, "begin over http", r)
	observer := b.open("observer", mcp.Options{})
	rejected(t, "write while held", observer.result("write", map[string]any{"writes": []any{set("web.page", "x")}}), intents.ReasonConflict)
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, "the expiry of "+r.Txn, func() error {
		var h mcp.HistoryOutput
		observer.call("history", map[string]any{"txn": r.Txn, "type": "expire"}, &h)
		if len(h.Events) != 1 {
			return fmt.Errorf("%d expire events", len(h.Events))
		}
		return nil
	})
}

// TestStdioLineTooLong: a line longer than MaxLineLength is refused with
// a parse error and skipped whole; the session reads on.
func TestStdioLineTooLong(t *testing.T) {
	b := newBoard(t)
	rs := b.raw("w1", 200)
	rs.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	if r := rs.next(); !strings.Contains(r, `"id":1`) || !strings.Contains(r, "serverInfo") {
		t.Fatalf("initialize: %s", r)
	}
	rs.send(`{"jsonrpc":"2.0","id":2,"method":"ping","params":{"pad":"` + strings.Repeat("x", 100_000) + `"}}`)
	if r := rs.next(); !strings.Contains(r, `"code":-32700`) || !strings.Contains(r, `"id":null`) || !strings.Contains(r, "longer than 200 bytes") {
		t.Fatalf("a line too long: %s", r)
	}
	rs.send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if r := rs.next(); !strings.Contains(r, `"id":3`) || !strings.Contains(r, `"result"`) {
		t.Fatalf("ping after a line too long: %s", r)
	}
	// A line of exactly the bound is served.
	head, tail := `{"jsonrpc":"2.0","id":4,"method":"ping","params":{"_meta":{"pad":"`, `"}}}`
	rs.send(head + strings.Repeat("x", 200-len(head)-len(tail)) + tail)
	if r := rs.next(); !strings.Contains(r, `"id":4`) || !strings.Contains(r, `"result"`) {
		t.Fatalf("a ping of 200 bytes: %s", r)
	}
	rs.in.Close()
	if err := <-rs.done; err != nil {
		t.Fatalf("Run after the input closed: %v", err)
	}
}

// TestRedacted: what the board rules' readers keep from an agent, its MCP
// server keeps too, as state.get does: resources/read of a kept path says
// redacted (not a false "does not exist"), and neither history nor a
// resource notification shows a kept path's writer, revision or version.
func TestRedacted(t *testing.T) {
	b := newAuthBoard(t, `{"rules": [{"pattern": "secrets.**", "readers": ["judge"], "writers": ["judge"]}]}`, "alice", "judge")
	alice := b.open("alice", mcp.Options{})
	judge := b.open("judge", mcp.Options{})
	ctx := context.Background()
	for _, uri := range []string{"coagent://state/secrets", "coagent://state/tasks"} {
		alice.subscribe(uri)
	}
	secret := judge.result("write", map[string]any{"writes": []any{set("secrets.k", "s3cret")}})
	ok(t, "judge's secret", secret)
	// A commit of a kept path and one alice may read: alice hears of the
	// second only, naming only what she may read.
	both := judge.result("write", map[string]any{"writes": []any{set("secrets.j", 1), set("tasks.t1", "open")}})
	ok(t, "judge's mixed write", both)
	select {
	case u := <-alice.updates:
		if u.URI != "coagent://state/tasks" || u.Meta["rev"] != float64(both.Rev) || fmt.Sprint(u.Meta["paths"]) != "[tasks.t1]" {
			t.Fatalf("alice's first notification: %+v, want the one of tasks at rev %d", u, both.Rev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no notification of tasks.t1")
	}

	res, err := alice.cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "coagent://state/secrets.k"})
	if err != nil {
		t.Fatal(err)
	}
	txt := res.Contents[0].Text
	var st mcp.StateResource
	if err := json.Unmarshal([]byte(txt), &st); err != nil {
		t.Fatal(err)
	}
	if !st.Redacted || strings.Contains(txt, "exists") || strings.Contains(txt, "version") || strings.Contains(txt, "s3cret") {
		t.Fatalf("alice reads the resource secrets.k: %s, want redacted and nothing of it", txt)
	}
	var rd mcp.ReadOutput
	rr := alice.call("read", map[string]any{"paths": []string{"secrets.k"}}, &rd)
	if strings.Contains(text(rr), "does not exist") || !slices.Equal(rd.Values["secrets.k"].Redacted, []string{"secrets.k"}) {
		t.Fatalf("alice reads secrets.k: %s", text(rr))
	}
	st = mcp.StateResource{}
	if err := json.Unmarshal([]byte(mustRead(t, judge, "coagent://state/secrets.k")), &st); err != nil || st.Redacted || st.Value != "s3cret" || st.Version != 1 {
		t.Fatalf("judge reads the resource secrets.k: %+v", st)
	}

	var h mcp.HistoryOutput
	hres := alice.call("history", map[string]any{"type": "change"}, &h)
	for _, ev := range h.Events {
		if strings.Contains(ev.What, "secrets") || ev.Seq == secret.Rev {
			t.Fatalf("alice's history shows a kept path: %+v", ev)
		}
	}
	if strings.Contains(text(hres), "secrets") {
		t.Fatalf("alice's history: %s", text(hres))
	}
	if len(h.Events) != 1 || h.Events[0].Seq != both.Rev || h.Events[0].What != `set tasks.t1 = "open" (v1)` {
		t.Fatalf("alice's history of changes: %+v, want the one of tasks.t1", h.Events)
	}
	judge.call("history", map[string]any{"path": "secrets", "type": "change"}, &h)
	if len(h.Events) != 2 {
		t.Fatalf("judge's history of secrets: %+v", h.Events)
	}

}

// TestResourceErrorCodes: a subscription or a read of a URI that names no
// path is refused with invalid params (-32602), not the code 0 a plain
// error gets. Subscribe speaks protocol 2025-06-18, where
// resources/subscribe is a request answered at once.
func TestResourceErrorCodes(t *testing.T) {
	b := newBoard(t)
	rs := b.raw("w1", 0)
	rs.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	rs.next()
	rs.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i, c := range []struct{ method, uri string }{
		{"resources/subscribe", "coagent://state/tasks..x"},
		{"resources/subscribe", "file:///etc/passwd"},
		{"resources/read", "coagent://state/tasks..x"},
	} {
		rs.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"uri":%q}}`, 10+i, c.method, c.uri))
		var m struct {
			ID    int
			Error *jsonrpc.Error
		}
		if err := json.Unmarshal([]byte(rs.next()), &m); err != nil || m.ID != 10+i || m.Error == nil ||
			m.Error.Code != jsonrpc.CodeInvalidParams {
			t.Fatalf("%s %s: %+v (%v), want error %d", c.method, c.uri, m, err, jsonrpc.CodeInvalidParams)
		}
		if !strings.Contains(m.Error.Message, c.uri) {
			t.Errorf("%s %s: %q does not name it", c.method, c.uri, m.Error.Message)
		}
	}
	rs.send(`{"jsonrpc":"2.0","id":20,"method":"resources/subscribe","params":{"uri":"coagent://state/tasks"}}`)
	if r := rs.next(); !strings.Contains(r, `"id":20,"result"`) {
		t.Fatalf("subscribe to tasks: %s", r)
	}
}

// rawSession is a host speaking JSON-RPC lines to a server of this package
// over a StdioTransport, for what the go-sdk's client does not send.
type rawSession struct {
	t     *testing.T
	in    *io.PipeWriter
	lines *bufio.Scanner
	done  chan error
}

// raw starts the MCP server of agent name on a StdioTransport with
// MaxLineLength max (0: the default) and connects a raw host to it.
func (b *board) raw(name string, max int) *rawSession {
	b.t.Helper()
	nc := b.connect(name)
	c, err := agents.Connect(context.Background(), nc, name)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { c.Close() })
	srv, err := mcp.New(c, nc, mcp.Options{})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { srv.Close() })
	stdin, host := io.Pipe()
	replies, stdout := io.Pipe()
	rs := &rawSession{t: b.t, in: host, lines: bufio.NewScanner(replies), done: make(chan error, 1)}
	go func() {
		rs.done <- srv.Run(context.Background(), &mcp.StdioTransport{Reader: stdin, Writer: stdout, MaxLineLength: max})
		stdout.Close()
	}()
	b.t.Cleanup(func() { host.Close(); replies.Close() })
	return rs
}

func (rs *rawSession) send(line string) {
	rs.t.Helper()
	if _, err := io.WriteString(rs.in, line+"\n"); err != nil {
		rs.t.Fatal(err)
	}
}

// next is the next line the server writes.
func (rs *rawSession) next() string {
	rs.t.Helper()
	if !rs.lines.Scan() {
		rs.t.Fatalf("no reply: %v", rs.lines.Err())
	}
	return rs.lines.Text()
}

func mustRead(t *testing.T, s *session, uri string) string {
	t.Helper()
	res, err := s.cs.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	return res.Contents[0].Text
}

// TestSilentClientLetsLeaseExpire: an HTTP client that vanishes without
// ending its session stops its transactions' and claims' renewal once it
// has made no request for Options.Silence, and their leases run out, long
// before the idle timeout closes the session; a client that goes on
// making requests keeps its own renewed past the same bound.
func TestSilentClientLetsLeaseExpire(t *testing.T) {
	b := newBoard(t)
	b.rules(leasedTasks)
	// Leases of a second, renewed every third of one, so that a renewal
	// late by a loaded machine still lands; the silence is two of them.
	const silence = 2 * time.Second
	gone := b.openHTTP("web", mcp.Options{Silence: silence})
	held := gone.result("begin", map[string]any{"writes": []any{map[string]any{"path": "web.page"}}, "lease_ms": 1000})
	ok(t, "begin of the client that vanishes", held)
	heldTask := gone.result("claim", map[string]any{"path": "tasks.web"})
	ok(t, "claim of the client that vanishes", heldTask)
	quiet := time.Now()
	// From here on the HTTP client says nothing, and does not end its
	// session.

	busy := b.open("busy", mcp.Options{Silence: silence})
	mine := busy.result("begin", map[string]any{"writes": []any{map[string]any{"path": "busy.page"}}, "lease_ms": 1000})
	ok(t, "begin of the busy client", mine)
	ok(t, "claim of the busy client", busy.result("claim", map[string]any{"path": "tasks.busy"}))
	natstest.CheckFor(t, 10*time.Second, "the expiry of the silent client's "+held.Txn, func() error {
		var h mcp.HistoryOutput
		busy.call("history", map[string]any{"txn": held.Txn, "type": "expire"}, &h)
		if len(h.Events) != 1 {
			return fmt.Errorf("%d expire events", len(h.Events))
		}
		return nil
	})
	if waited := time.Since(quiet); waited < silence {
		t.Fatalf("the lease ran out %s after the client's last request, before the silence of %s", waited, silence)
	}
	ok(t, "write where the silent client held", busy.result("write", map[string]any{"writes": []any{set("web.page", "free")}}))
	natstest.CheckFor(t, 10*time.Second, "the reclaim of the silent client's task", func() error {
		var h mcp.HistoryOutput
		busy.call("history", map[string]any{"txn": heldTask.Txn, "type": "notice"}, &h)
		for _, ev := range h.Events {
			if strings.HasPrefix(ev.What, string(intents.NoticeReclaimed)+":") {
				return nil
			}
		}
		return fmt.Errorf("%d notices, none reclaimed", len(h.Events))
	})
	// The busy client's requests kept its own transaction, past the same
	// silence and many leases.
	var h mcp.HistoryOutput
	busy.call("history", map[string]any{"txn": mine.Txn, "type": "expire"}, &h)
	if len(h.Events) != 0 {
		t.Fatalf("the busy client's transaction expired: %+v", h.Events)
	}
	r := busy.result("commit", map[string]any{"txn": mine.Txn, "writes": []any{set("busy.page", "done")}})
	ok(t, "commit of the busy client", r)
	ok(t, "release of the busy client's task", busy.result("release", map[string]any{"path": "tasks.busy", "set": map[string]any{"status": "DONE"}}))
}

// claim_next gives two sessions the lane's two tasks, the higher priority
// first, and says when nothing is left.
func TestClaimNextTool(t *testing.T) {
	b := newBoard(t)
	b.rules(leasedTasks)
	lead := b.agent("lead")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := lead.Apply(ctx, intents.Apply("plan").Set("tasks.t1", map[string]any{"status": "PENDING"}).
		Set("tasks.t2", map[string]any{"status": "PENDING", "priority": 3})); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, agent := range []string{"w1", "w2"} {
		r := b.open(agent, mcp.Options{}).result("claim_next", map[string]any{"lane": "tasks", "set": map[string]any{"status": "RUNNING"}})
		ok(t, "claim_next "+agent, r)
		if r.Task == "" || r.Fence == 0 || r.HeldBy != agent {
			t.Fatalf("claim_next %s: %+v", agent, r)
		}
		got = append(got, r.Task)
	}
	if got[0] != "tasks.t2" || got[1] != "tasks.t1" {
		t.Fatalf("tasks given: %v; want tasks.t2 (priority 3), then tasks.t1", got)
	}
	if r := b.open("w3", mcp.Options{}).result("claim_next", map[string]any{"lane": "tasks"}); r.OK || r.Outcome != "none" || r.Next == "" {
		t.Fatalf("an empty lane: %+v", r)
	}
}

// An approver session lists the intents waiting for approval, with their
// diff, and votes on them: an outsider's vote and a denial without why
// are tool errors that record nothing; the quorum's approval applies the
// intent and the result says so.
func TestApproverTools(t *testing.T) {
	b := newBoard(t)
	b.rules(`{"rules":[{"pattern":"deploy.**","approve":{"by":["lina","luc"],"quorum":1,"timeout":"10m"}}]}`)
	dev := b.agent("dev")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in, err := intents.Apply("release").Set("deploy.web", 7).Build()
	if err != nil {
		t.Fatal(err)
	}
	in.ID = ulid.Make().String()
	final := make(chan *intents.Decision, 1)
	go func() {
		d, err := dev.Submit(ctx, in)
		if err != nil {
			t.Errorf("dev's release: %v", err)
		}
		final <- d
	}()
	lina := b.open("lina", mcp.Options{Approver: true})
	var list mcp.ApprovalsOutput
	natstest.CheckFor(t, 20*time.Second, "the approval case", func() error {
		lina.call("approvals", map[string]any{}, &list)
		if len(list.Cases) != 1 {
			return fmt.Errorf("approvals: %+v", list)
		}
		return nil
	})
	c := list.Cases[0]
	if c.ID != in.ID || c.Quorum != 1 || c.Path != "deploy.web" || !c.After["deploy.web"].Exists || c.State["deploy.web"].Exists {
		t.Fatalf("the case as approvals shows it: %+v", c)
	}
	var out mcp.VoteOutput
	if res := b.open("bob", mcp.Options{Approver: true}).call("approve", map[string]any{"case": in.ID}, &out); !res.IsError || out.OK || out.Reason != string(intents.ReasonUnauthorized) {
		t.Fatalf("bob's approval: %s", text(res))
	}
	if res := lina.call("deny", map[string]any{"case": in.ID}, &out); !res.IsError || out.OK {
		t.Fatalf("a denial without why: %s", text(res))
	}
	out = mcp.VoteOutput{}
	if res := lina.call("approve", map[string]any{"case": in.ID, "why": "as planned"}, &out); res.IsError || !out.OK || out.Decision == nil || out.Decision.Outcome != intents.OutcomeApplied {
		t.Fatalf("lina's approval: %s", text(res))
	}
	if d := <-final; d == nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("dev's decision: %+v", d)
	}
	// A question: the approver answers it; an answer the schema refuses
	// is a tool error.
	asked := make(chan json.RawMessage, 1)
	go func() {
		v, err := dev.Ask(ctx, "plan.budget", intents.Ask{Question: "What budget?", Schema: json.RawMessage(`{"type":"number"}`)})
		if err != nil {
			t.Errorf("Ask: %v", err)
		}
		asked <- v
	}()
	natstest.CheckFor(t, 20*time.Second, "the question", func() error {
		lina.call("approvals", map[string]any{}, &list)
		if len(list.Cases) != 1 || list.Cases[0].Kind != intents.CaseInput || list.Cases[0].Ask == nil {
			return fmt.Errorf("approvals: %+v", list)
		}
		return nil
	})
	q := list.Cases[0].ID
	if res := lina.call("answer", map[string]any{"case": q, "answer": "lots"}, &out); !res.IsError || out.OK {
		t.Fatalf("an answer the schema refuses: %s", text(res))
	}
	out = mcp.VoteOutput{}
	if res := lina.call("answer", map[string]any{"case": q, "answer": 12000}, &out); res.IsError || out.Decision == nil || out.Decision.Outcome != intents.OutcomeApplied {
		t.Fatalf("lina's answer: %s", text(res))
	}
	if v := <-asked; string(v) != "12000" {
		t.Fatalf("the asker got %s", v)
	}

	// Without Options.Approver the session has no such tool.
	w1 := b.open("w1", mcp.Options{})
	tools, err := w1.cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if tl.Name == "approve" || tl.Name == "approvals" {
			t.Fatalf("a session without Options.Approver has the tool %s", tl.Name)
		}
	}
}
