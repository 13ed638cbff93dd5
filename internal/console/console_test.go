package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/console"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/oklog/ulid/v2"
)

// world is a coordinator on a real NATS server, three agents and the
// console's handler behind an HTTP server.
type world struct {
	t          *testing.T
	ns         *server.Server
	svc        *coordinator.Service
	console    *console.Console
	srv        *httptest.Server
	w1, w2, w3 *agents.Client
}

// newWorld starts the world; configure, if given, changes the console's
// Config.
func newWorld(t *testing.T, configure ...func(*console.Config)) *world {
	t.Helper()
	ns := natstest.Run(t)
	w := &world{t: t, ns: ns, svc: coordtest.Start(t, ns, coordinator.Options{})}
	cfg := console.Config{NATS: natstest.Connect(t, ns)}
	for _, c := range configure {
		c(&cfg)
	}
	h, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.console = h
	w.srv = httptest.NewServer(h)
	t.Cleanup(w.srv.Close)
	for _, c := range []struct {
		name string
		into **agents.Client
	}{{"w1", &w.w1}, {"w2", &w.w2}, {"w3", &w.w3}} {
		cl, err := agents.Connect(context.Background(), natstest.Connect(t, ns), c.name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		*c.into = cl
	}
	return w
}

func (w *world) apply(c *agents.Client, b *intents.Builder) *intents.Decision {
	w.t.Helper()
	d, err := c.Apply(context.Background(), b)
	if err != nil {
		w.t.Fatalf("%s applies: %v", c.Name(), err)
	}
	return d
}

// get answers a console endpoint: its status and decoded body.
func (w *world) get(path string, into any) int {
	w.t.Helper()
	res, err := http.Get(w.srv.URL + path)
	if err != nil {
		w.t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(into); err != nil && res.Header.Get("Content-Type") == "application/json" {
		w.t.Fatalf("GET %s: %v", path, err)
	}
	return res.StatusCode
}

func TestConfigValidate(t *testing.T) {
	_, err := console.New(console.Config{Prefix: "a..b", Timeout: -time.Second})
	if !errors.Is(err, console.ErrConfig) {
		t.Fatalf("New with a bad config: %v", err)
	}
	for _, want := range []string{"NATS is nil", `Prefix "a..b"`, "Timeout -1s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
}

// The state the console folds from log.query at a revision is the one
// coagent replay rebuilds from the log at that revision, node for node.
func TestStateAtRevisionIsReplay(t *testing.T) {
	w := newWorld(t)
	var revs []uint64
	for i, v := range []any{"Draft", "Final", nil} {
		b := intents.Apply("title").Set("report.title", v)
		if v == nil {
			b = intents.Apply("drop").Delete("report.title").Merge("report.meta", map[string]any{"by": "w1", "n": i})
		}
		revs = append(revs, w.apply(w.w1, b).Rev)
	}
	w.apply(w.w2, intents.Apply("count").Incr("stats.runs", 2))
	for _, rev := range append(revs, 0) {
		var got struct {
			Rev   uint64       `json:"rev"`
			Nodes []state.Node `json:"nodes"`
		}
		path := "/api/state"
		if rev != 0 {
			path += "?rev=" + jsonNumber(rev)
		}
		if code := w.get(path, &got); code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
		eng, err := replay.Run(w.svc.Core().Log(), replay.Options{Seq: got.Rev})
		if err != nil {
			t.Fatal(err)
		}
		if want := eng.State().Export(); !reflect.DeepEqual(got.Nodes, want) {
			t.Errorf("the state at rev %d (asked %d):\n got %+v\nwant %+v", got.Rev, rev, got.Nodes, want)
		}
		if rev != 0 && got.Rev != rev {
			t.Errorf("asked rev %d, answered rev %d", rev, got.Rev)
		}
	}
}

func jsonNumber(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// Bad input is answered 400 with a sentence naming the parameter.
func TestBadRequests(t *testing.T) {
	w := newWorld(t)
	for path, want := range map[string]string{
		"/api/state?rev=abc":     `rev "abc"`,
		"/api/state?rev=99":      "rev 99: the state is at rev",
		"/api/value?path=a..b":   `path "a..b"`,
		"/api/story?q=nope":      `q "nope"`,
		"/api/story":             "q: give an intent id",
		"/api/events?type=bogus": `type "bogus"`,
		"/api/events?agent=a.b":  `agent "a.b"`,
	} {
		res, err := http.Get(w.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil {
			body = []byte(e.Error)
		}
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d %q, want 400 saying %q", path, res.StatusCode, body, want)
		}
	}
	// A long parameter is refused without being echoed whole.
	long := strings.Repeat("x", 5000)
	for _, path := range []string{"/api/story?q=" + long, "/api/value?path=" + long, "/api/events?agent=" + long, "/api/state?rev=" + long} {
		res, err := http.Get(w.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || len(body) > 400 {
			t.Errorf("GET %.30s…: %d, %d bytes of answer, want 400 and at most 400 bytes", path, res.StatusCode, len(body))
		}
	}
	// The page's files, never a directory's listing.
	for path, want := range map[string]int{"/": 200, "/js/app.js": 200, "/js/": 404} {
		res, err := http.Get(w.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, res.StatusCode, want)
		}
	}
	var nf map[string]string
	if code := w.get("/api/story?q=01J00000000000000000000000", &nf); code != http.StatusNotFound || !strings.Contains(nf["error"], "no decision recorded") {
		t.Errorf("the story of an unknown intent: %d %v", code, nf)
	}
}

// A waiter stays listed while it waits and is gone once decided; the
// wait-for graph has its edge to the holder's agent meanwhile.
func TestWaitersFollowTheLog(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	txn, err := w.w1.Propose(ctx, intents.Propose("hold").Write("report.intro", intents.OpSet).Lease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	txn.StopRenewing()
	in, err := intents.Apply("wait").Set("report.intro", "w3's").OnConflict(intents.OnConflictWait).Wait(time.Minute).Build()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var final *intents.Decision
	in.ID = ulid.Make().String()
	go func() {
		defer wg.Done()
		final, _ = w.w3.Submit(ctx, in)
	}()
	type view struct {
		Waiters []struct {
			Intent string `json:"intent"`
			Agent  string `json:"agent"`
		} `json:"waiters"`
		Graph struct {
			Edges []struct{ From, To, Txn string } `json:"edges"`
		} `json:"graph"`
	}
	natstest.CheckFor(t, 10*time.Second, "the waiter listed", func() error {
		var v view
		w.get("/api/waiters", &v)
		if len(v.Waiters) != 1 || v.Waiters[0].Intent != in.ID || len(v.Graph.Edges) != 1 ||
			v.Graph.Edges[0].From != "w3" || v.Graph.Edges[0].To != "w1" || v.Graph.Edges[0].Txn != txn.ID() {
			return errors.New(jsonString(v))
		}
		return nil
	})
	if _, err := txn.Commit(ctx, intents.Apply("hold").Set("report.intro", "w1's")); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if final == nil || final.Outcome != intents.OutcomeApplied {
		t.Fatalf("the waiter's final decision: %+v", final)
	}
	var v view
	w.get("/api/waiters", &v)
	if len(v.Waiters) != 0 || len(v.Graph.Edges) != 0 {
		t.Fatalf("decided, the waiter is still listed: %s", jsonString(v))
	}
}

func jsonString(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestPickReader: the console reads as an observer, else as the operator
// (admin), who may read everything as well; as nobody in particular when
// neither is registered.
func TestPickReader(t *testing.T) {
	for _, c := range []struct {
		roles map[string][]string
		want  string
	}{
		{map[string][]string{"admin": {"admin"}, "zed": {"observer"}, "bob": {"observer"}, "al": nil}, "bob"},
		{map[string][]string{"admin": {"admin"}, "al": {"coder"}}, "admin"},
		{map[string][]string{"al": {"coder"}}, ""},
	} {
		got, ok := console.PickReader(c.roles)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("PickReader(%v) = %q %v, want %q", c.roles, got, ok, c.want)
		}
	}
}

// POST /api/whatif: the report of coagent whatif over the coordinator's
// log, read through log.query; a rules file that does not compile or a
// body that is not the request's shape is a 400 naming what is wrong.
func TestWhatIfEndpoint(t *testing.T) {
	w := newWorld(t)
	w.apply(w.w1, intents.Apply("draft").Set("docs.intro", "by w1"))
	second := w.apply(w.w2, intents.Apply("draft").Set("docs.outro", "by w2")).Intent
	post := func(body string, into any) int {
		t.Helper()
		res, err := http.Post(w.srv.URL+"/api/whatif", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if err := json.NewDecoder(res.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
		return res.StatusCode
	}
	var got struct {
		Report struct {
			Mode    string `json:"mode"`
			Changed int    `json:"changed"`
			Top     []struct {
				Intent string `json:"intent"`
				Rule   string `json:"rule"`
			} `json:"top"`
		} `json:"report"`
		Error string `json:"error"`
	}
	if code := post(`{"rules":{"rules":[{"pattern":"docs.**","writers":["w1"]}]}}`, &got); code != http.StatusOK ||
		got.Report.Mode != "isolated" || got.Report.Changed != 1 || got.Report.Top[0].Intent != second || got.Report.Top[0].Rule != "rules[0] (docs.**)" {
		t.Fatalf("whatif: %d %+v", code, got)
	}
	if code := post(`{"rules":{"rules":[{"pattern":"docs.**","writers":["w1"]}]},"cascade":true}`, &got); code != http.StatusOK || got.Report.Mode != "cascade" || got.Report.Changed != 1 {
		t.Fatalf("whatif --cascade: %d %+v", code, got)
	}
	for body, want := range map[string]string{
		`{"rules":{"rules":[{"pattern":"docs.**","on_conflict":"later"}]}}`: "on_conflict",
		`{"rules":"not a file"}`:         "rules: give the rules file",
		`{"rules":{},"top":5000}`:        "top = 5000",
		`{"rules":{},"everything":true}`: "unknown field",
	} {
		var e struct{ Error string }
		if code := post(body, &e); code != http.StatusBadRequest || !strings.Contains(e.Error, want) {
			t.Errorf("%s: %d %q, want 400 saying %q", body, code, e.Error, want)
		}
	}
}

// The console says which shard it reads, and which boards another shard
// decides; the value of one of those is read from its shard.
func TestConsoleShards(t *testing.T) {
	w := newWorld(t)
	w.apply(w.w1, intents.Apply("title").Set("report.title", "Q3"))
	s2 := coordtest.Start(t, w.ns, coordinator.Options{Prefix: intents.Subjects{}.Shard("s2").Prefix, Shard: "s2"})
	ctx := context.Background()
	rel, err := w.svc.Handoff(ctx, &intents.Handoff{Kind: intents.HandoffRelease, Board: "report", Shard: "s2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Handoff(ctx, &intents.Handoff{Kind: intents.HandoffAdopt, Board: "report", Shard: intents.DefaultShard,
		Seq: rel.Seq, Nodes: rel.Handoff.Nodes}); err != nil {
		t.Fatal(err)
	}
	var o struct {
		Shard  string            `json:"shard"`
		Owners map[string]string `json:"owners"`
	}
	if w.get("/api/overview", &o); o.Shard != intents.DefaultShard || o.Owners["report"] != "s2" {
		t.Fatalf("overview: %+v", o)
	}
	type node struct {
		Path  string          `json:"path"`
		Kind  string          `json:"kind"`
		Value json.RawMessage `json:"value"`
	}
	var st struct {
		Shard intents.ShardInfo `json:"shard"`
		Nodes []node            `json:"nodes"`
	}
	find := func(nodes []node, path string) node {
		for _, n := range nodes {
			if n.Path == path {
				return n
			}
		}
		return node{}
	}
	// The default shard's tree has the board deleted from its release on;
	// s2's console has it as the release carried it.
	if w.get("/api/state", &st); st.Shard.Owners["report"] != "s2" || find(st.Nodes, "report.title").Kind != "absent" {
		t.Fatalf("state: %+v", st)
	}
	h, err := console.New(console.Config{NATS: natstest.Connect(t, w.ns), Prefix: intents.Subjects{}.Shard("s2").Prefix})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := http.Get(srv.URL + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var s2st struct {
		Shard intents.ShardInfo `json:"shard"`
		Nodes []node            `json:"nodes"`
	}
	if err := json.NewDecoder(res.Body).Decode(&s2st); err != nil {
		t.Fatal(err)
	}
	if n := find(s2st.Nodes, "report.title"); s2st.Shard.Shard != "s2" || n.Kind != "leaf" || string(n.Value) != `"Q3"` {
		t.Fatalf("s2's state: %+v", s2st)
	}
	var v struct {
		Entry struct {
			Exists bool            `json:"exists"`
			Value  json.RawMessage `json:"value"`
		} `json:"entry"`
	}
	if w.get("/api/value?path=report.title", &v); !v.Entry.Exists || string(v.Entry.Value) != `"Q3"` {
		t.Fatalf("report.title through the console: %+v", v)
	}
}
