package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coagent/coagent/internal/httpd"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// serveHTTP runs serve (--http 127.0.0.1:0) and returns the NATS URL and
// the HTTP listener's, as the start-up line names them.
func serveHTTP(t *testing.T, data string, extra ...string) (natsURL, httpURL string, stop func() error) {
	t.Helper()
	var line string
	natsURL, stop = serveLine(t, data, &line, extra...)
	m := regexp.MustCompile(`; http on (http://127\.0\.0\.1:\d+);`).FindStringSubmatch(line)
	if m == nil || strings.HasSuffix(m[1], ":0") {
		stop()
		t.Fatalf("start-up line without the bound HTTP address: %q", line)
	}
	return natsURL, m[1], stop
}

// get fetches url with the header Authorization: Bearer token (none if
// token is "") and returns the status and body.
func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestServeHTTP: the listener named in the start-up line answers /healthz
// and /readyz, and /metrics in the text format, with the coordinator's
// metrics and the process's, moved by a submit; "/" is the console, which
// reads the coordinator; --http off runs none.
func TestServeHTTP(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	url, base, stop := serveHTTP(t, data)
	defer stop()
	if code, body := get(t, base+"/healthz", ""); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz", ""); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	if code, body := get(t, base+"/", ""); code != 200 || !strings.Contains(body, "CoAgent console") {
		t.Fatalf("/, the console: %d %.200q", code, body)
	}
	apply := `{"id":"01JD0000000000000000000H01","agent":"w1","kind":"apply","writes":[{"path":"report.title","op":"set","value":"Q3"}]}`
	if out, _, err := runCmd(t, apply, "submit", "--nats", url, "-"); err != nil {
		t.Fatalf("submit: %q %v", out, err)
	}
	if code, body := get(t, base+"/api/value?path=report.title", ""); code != 200 || !strings.Contains(body, `"Q3"`) {
		t.Fatalf("the console's value of report.title: %d %s", code, body)
	}
	code, body := get(t, base+"/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "coagent_active", "coagent_txns_in_flight", "coagent_log_last_seq"} {
		if fams[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}
	applied := 0.0
	for _, m := range fams["coagent_decisions_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["outcome"] == "applied" && labels["path"] == "api" {
			applied = m.Counter.GetValue()
		}
	}
	if applied != 1 {
		t.Errorf("coagent_decisions_total{path=api,outcome=applied} = %v after one apply", applied)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("the HTTP listener answers after serve stopped")
	}

	var line string
	_, stop = serveLine(t, data, &line, "--http", "off")
	defer stop()
	if strings.Contains(line, "http on") {
		t.Fatalf("--http off, and the start-up line names a listener: %q", line)
	}
}

// TestServeHTTPAuth: under --auth only /healthz answers without a token;
// the observer's token (agents add --role observer prints it) and the one
// of --http-token open the rest, as a header, a query (which sets a
// cookie) or that cookie; a wrong one does not.
func TestServeHTTPAuth(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	out, _, err := runCmd(t, "", "agents", "add", "watcher", "--role", "observer", "--data", data)
	m := regexp.MustCompile(`HTTP token \(shown only now\): (coagent_[0-9a-f]{64})\n`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("agents add --role observer: %q %v", out, err)
	}
	token := m[1]
	if out, _, err := runCmd(t, "", "agents", "add", "plain", "--data", data); err != nil || strings.Contains(out, "token") {
		t.Fatalf("agents add without observer: %q %v", out, err)
	}
	url, base, stop := serveHTTP(t, data, "--auth", "--http-token", "s3cret-flag-token")
	defer stop()
	if code, _ := get(t, base+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz without a token: %d", code)
	}
	for _, path := range []string{"/metrics", "/readyz", "/", "/console"} {
		if code, _ := get(t, base+path, ""); code != 401 {
			t.Errorf("%s without a token: %d, want 401", path, code)
		}
		if code, _ := get(t, base+path, "coagent_"+strings.Repeat("0", 64)); code != 401 {
			t.Errorf("%s with a wrong token: %d, want 401", path, code)
		}
	}
	for _, tok := range []string{token, "s3cret-flag-token"} {
		if code, body := get(t, base+"/metrics", tok); code != 200 || !strings.Contains(body, "coagent_decisions_total") {
			t.Errorf("/metrics with a token: %d", code)
		}
		if code, _ := get(t, base+"/readyz", tok); code != 200 {
			t.Errorf("/readyz with a token: %d", code)
		}
	}
	// The console reads as an observer: another agent's intent is found,
	// which the coordinator keeps from anyone else.
	apply := `{"id":"01JD0000000000000000000H02","agent":"plain","kind":"apply","writes":[{"path":"report.title","op":"set","value":"Q4"}]}`
	if out, _, err := runCmd(t, apply, "submit", "--nats", url, "--nkey", filepath.Join(data, "agents", "plain.nk"), "-"); err != nil {
		t.Fatalf("submit as plain: %q %v", out, err)
	}
	if code, body := get(t, base+"/api/story?q=01JD0000000000000000000H02", token); code != 200 || !strings.Contains(body, `"applied"`) {
		t.Errorf("the console's story of plain's intent: %d %s", code, body)
	}
	// A browser: ?token= once, then the cookie.
	resp, err := http.Get(base + "/metrics?token=" + token)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == httpd.TokenCookie {
			cookie = c
		}
	}
	if resp.StatusCode != 200 || cookie == nil || !cookie.HttpOnly {
		t.Fatalf("?token=: %d, cookie %v", resp.StatusCode, cookie)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/readyz", nil)
	req.AddCookie(&http.Cookie{Name: httpd.TokenCookie, Value: cookie.Value})
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with the cookie: %d", resp.StatusCode)
	}
}

// TestListenHTTPTaken: an address given with --http that is taken is an
// error naming it; the default address taken is a note, and no listener.
func TestListenHTTPTaken(t *testing.T) {
	h, err := listenHTTP("127.0.0.1:0", true, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	h.Start()
	defer h.Close(t.Context())
	addr := strings.TrimPrefix(h.URL(), "http://")
	if _, err := listenHTTP(addr, true, nil, io.Discard); err == nil || !strings.Contains(err.Error(), "--http "+addr) {
		t.Fatalf("--http %s taken: %v", addr, err)
	}
	var note strings.Builder
	if h2, err := listenHTTP(addr, false, nil, &note); h2 != nil || err != nil || !strings.Contains(note.String(), "in use") {
		t.Fatalf("the default address taken: %v %v %q", h2, err, note.String())
	}
}

// TestServeHTTPRebinding: the loopback listener answers only requests
// naming a loopback host, so that a page whose name was rebound to
// 127.0.0.1 reads nothing through the browser; a state-changing request
// from another origin's page is refused.
func TestServeHTTPRebinding(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	_, base, stop := serveHTTP(t, data)
	defer stop()
	port := base[strings.LastIndex(base, ":"):]
	do := func(method, host, origin string) (int, string) {
		req, err := http.NewRequest(method, base+"/api/overview", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
			req.Header.Set("Sec-Fetch-Site", "cross-site")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, host := range []string{"attacker.example", "attacker.example" + port, "10.0.0.1" + port} {
		if code, body := do(http.MethodGet, host, ""); code != http.StatusForbidden || !strings.Contains(body, fmt.Sprintf("Host %q", host)) {
			t.Errorf("GET with Host %s: %d %q, want 403 naming the host", host, code, body)
		}
	}
	for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "[::1]" + port} {
		if code, body := do(http.MethodGet, host, ""); code != http.StatusOK {
			t.Errorf("GET with Host %s: %d %q", host, code, body)
		}
	}
	if code, body := do(http.MethodPost, "127.0.0.1"+port, "http://attacker.example"); code != http.StatusForbidden || !strings.Contains(body, "attacker.example") {
		t.Errorf("POST from another origin: %d %q, want 403", code, body)
	}
}

// TestServeHTTPNotLoopback: --http on an address other than loopback
// without --auth is refused, naming the address and --http-insecure,
// before the data directory is made; with --http-insecure it serves, and
// says what it means.
func TestServeHTTPNotLoopback(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	for _, addr := range []string{"0.0.0.0:0", ":0", "example.com:7070"} {
		// Bounded, so that a serve that starts is a failure, not a hang.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := run(ctx, []string{"serve", "--data", data, "--listen", "127.0.0.1:-1", "--http", addr}, strings.NewReader(""), io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "--http "+addr) || !strings.Contains(err.Error(), "--http-insecure") {
			t.Errorf("serve --http %s without --auth: %v", addr, err)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("a refused serve made its data directory: %v", err)
	}
	var line string
	_, stop := serveLine(t, data, &line, "--http", "0.0.0.0:0", "--http-insecure")
	defer stop()
	if !regexp.MustCompile(`http on http://(0\.0\.0\.0|\[::\]):\d+;`).MatchString(line) {
		t.Fatalf("serve --http 0.0.0.0:0 --http-insecure: %q", line)
	}
}

// TestServeHTTPRegistryChange: at SIGHUP, removing an observer ends the
// event stream its token opened (the stream of the observer the console
// reads as stays open); removing the observer the console reads as moves
// the console to the next one: another agent's story is still found, and
// the state still folds.
func TestServeHTTPRegistryChange(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	tokens := map[string]string{"op": "op-token"}
	for _, name := range []string{"aobs", "zobs"} {
		out, _, err := runCmd(t, "", "agents", "add", name, "--role", "observer", "--data", data)
		m := regexp.MustCompile(`HTTP token \(shown only now\): (coagent_[0-9a-f]{64})\n`).FindStringSubmatch(out)
		if err != nil || m == nil {
			t.Fatalf("agents add %s --role observer: %q %v", name, out, err)
		}
		tokens[name] = m[1]
	}
	for _, name := range []string{"lead", "plain"} {
		if out, _, err := runCmd(t, "", "agents", "add", name, "--data", data); err != nil {
			t.Fatalf("agents add %s: %q %v", name, out, err)
		}
	}
	rulesFile := filepath.Join(dir, "rules.json")
	writeFile(t, rulesFile, `{"rules": [{"pattern": "secrets.**", "readers": ["lead"], "writers": ["lead"]}]}`)
	url, base, stop := serveHTTP(t, data, "--auth", "--rules", rulesFile, "--http-token", tokens["op"])
	defer stop()
	submit := func(agent, intent string) {
		t.Helper()
		if out, _, err := runCmd(t, intent, "submit", "--nats", url, "--nkey", filepath.Join(data, "agents", agent+".nk"), "-"); err != nil {
			t.Fatalf("submit as %s: %q %v", agent, out, err)
		}
	}
	submit("lead", `{"id":"01JD0000000000000000000R01","agent":"lead","kind":"apply","writes":[{"path":"secrets.k","op":"set","value":"hush"}]}`)
	submit("plain", `{"id":"01JD0000000000000000000R02","agent":"plain","kind":"apply","writes":[{"path":"report.title","op":"set","value":"Q4"}]}`)

	open := func(name string) *bufio.Reader {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/api/events", nil)
		req.Header.Set("Authorization", "Bearer "+tokens[name])
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s's event stream: %v %v", name, resp, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return bufio.NewReader(resp.Body)
	}
	// reload removes agent and sends SIGHUP, and returns once the
	// reload is done: the rules, with the registry's roles merged, are
	// the last thing it puts in force.
	reload := func(agent string) {
		t.Helper()
		var before struct{ Rules struct{ Hash string } }
		if code, body := get(t, base+"/api/overview", tokens["op"]); code != 200 || json.Unmarshal([]byte(body), &before) != nil {
			t.Fatalf("overview: %d %s", code, body)
		}
		if out, _, err := runCmd(t, "", "agents", "remove", agent, "--data", data); err != nil {
			t.Fatalf("agents remove %s: %q %v", agent, out, err)
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		natstest.CheckFor(t, 10*time.Second, "the rules reloaded", func() error {
			var now struct{ Rules struct{ Hash string } }
			_, body := get(t, base+"/api/overview", tokens["op"])
			if json.Unmarshal([]byte(body), &now) != nil || now.Rules.Hash == before.Rules.Hash {
				return fmt.Errorf("overview: %s", body)
			}
			return nil
		})
	}
	nextEvent := func(r *bufio.Reader) (string, error) {
		for {
			line, err := r.ReadString('\n')
			if err != nil || strings.HasPrefix(line, "event: event") {
				return line, err
			}
		}
	}

	// The console reads as aobs, the first observer by name.
	reader, other := open("aobs"), open("zobs")
	reload("zobs")
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, other); ended <- err }()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("zobs's stream, revoked: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("zobs's stream is still open after its token was revoked")
	}
	// The reload's rules event came after the revocation: the stream of
	// a token still valid carries it.
	if line, err := nextEvent(reader); err != nil {
		t.Fatalf("aobs's stream after zobs was removed: %q %v", line, err)
	}
	if code, _ := get(t, base+"/api/overview", tokens["zobs"]); code != 401 {
		t.Fatalf("zobs's token after the reload: %d", code)
	}

	reload("aobs")
	if code, body := get(t, base+"/api/state", tokens["op"]); code != 200 || !strings.Contains(body, `"report.title"`) {
		t.Errorf("the state after the console's reader was removed: %d %s", code, body)
	}
	if code, body := get(t, base+"/api/story?q=01JD0000000000000000000R02", tokens["op"]); code != 200 || !strings.Contains(body, `"applied"`) {
		t.Errorf("plain's story after the console's reader was removed: %d %s", code, body)
	}
}

// TestConsoleOwnConnection: the console's event streams subscribe on a
// connection of its own, never on serve's, so that a stalled browser
// never holds up the connection the coordinator decides on.
func TestConsoleOwnConnection(t *testing.T) {
	srv, err := natsauth.StartServer(natsauth.ServerConfig{Listen: "127.0.0.1:-1", Store: filepath.Join(t.TempDir(), "js")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	serveConn, err := srv.Connect(nats.Name("coagent serve"))
	if err != nil {
		t.Fatal(err)
	}
	defer serveConn.Close()
	link, err := newConsoleLink(&serveFlags{}, srv, nil, nil, &consoleActors{srv: srv}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	hs := httptest.NewServer(link.Console())
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/api/events")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("an event stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	cz, err := srv.NATS().Connz(&server.ConnzOptions{Subscriptions: true})
	if err != nil {
		t.Fatal(err)
	}
	var on []string
	for _, c := range cz.Conns {
		if slices.Contains(c.Subs, "coagent.events.>") {
			on = append(on, c.Name)
		}
	}
	if !slices.Equal(on, []string{"coagent console"}) {
		t.Fatalf("the event feed's subscription is on the connections %q, want only the console's own", on)
	}
}

// TestServeNotifyFlags: --notify needs its secret, one long enough, and an
// http(s) URL; each is refused before the data directory is made.
func TestServeNotifyFlags(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	short, long := filepath.Join(dir, "short"), filepath.Join(dir, "long")
	if err := os.WriteFile(short, []byte("tiny\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(long, []byte("a secret of enough bytes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--notify", "http://127.0.0.1:9/hook"}, "--notify and --notify-secret-file go together"},
		{[]string{"--notify-secret-file", long}, "--notify and --notify-secret-file go together"},
		{[]string{"--notify", "http://127.0.0.1:9/hook", "--notify-secret-file", short}, "want a secret of at least 16"},
		{[]string{"--notify", "ftp://example.com/hook", "--notify-secret-file", long}, "want an http or https URL"},
		{[]string{"--notify", "http://127.0.0.1:9/hook", "--notify-secret-file", filepath.Join(dir, "none")}, "--notify-secret-file"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := run(ctx, append([]string{"serve", "--data", data, "--listen", "127.0.0.1:-1", "--http", "off"}, tc.args...), strings.NewReader(""), io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve %v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("a refused serve made its data directory: %v", err)
	}
}

// Under --auth a person acts in the console as the agent whose HTTP token
// they gave (agents add --http): lina's approval through the console is
// recorded as hers and applies the intent; an observer's token acts not
// at all.
func TestConsoleActsAsTheToken(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	token := func(args ...string) string {
		t.Helper()
		out, _, err := runCmd(t, "", append([]string{"agents", "add", "--data", data}, args...)...)
		m := regexp.MustCompile(`HTTP token \(shown only now\): (coagent_[0-9a-f]{64})\n`).FindStringSubmatch(out)
		if err != nil || m == nil {
			t.Fatalf("agents add %v: %q %v", args, out, err)
		}
		return m[1]
	}
	lina := token("lina", "--role", "lead", "--http")
	watcher := token("watcher", "--role", "observer")
	if out, _, err := runCmd(t, "", "agents", "add", "dev", "--data", data); err != nil {
		t.Fatalf("agents add dev: %q %v", out, err)
	}
	url, base, stop := serveHTTP(t, data, "--auth")
	defer stop()
	rulesFile := filepath.Join(dir, "rules.json")
	writeFile(t, rulesFile, `{"rules":[{"pattern":"deploy.**","approve":{"by":["role:lead"],"timeout":"10m"}}]}`)
	if p := runBin(t, nil, "", "rules", "set", "--nats", url, "--nkey", natsauth.SeedPath(data, "admin"), rulesFile); p.status != 0 {
		t.Fatalf("rules set: %+v", p)
	}
	const id = "01JD0000000000000000000H09"
	gated := `{"id":"` + id + `","agent":"dev","kind":"apply","writes":[{"path":"deploy.web","op":"set","value":3}]}`
	if out, _, err := runCmd(t, gated, "submit", "--nats", url, "--nkey", natsauth.SeedPath(data, "dev"), "--timeout", "1s", "-"); !strings.Contains(out+fmt.Sprint(err), "escalated") {
		t.Fatalf("submit as dev: %q %v", out, err)
	}
	vote := func(tok string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/api/vote", strings.NewReader(`{"case":"`+id+`","verdict":"approve","rationale":"ok"}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, me := get(t, base+"/api/me", lina); code != 200 || !strings.Contains(me, `"agent":"lina"`) || !strings.Contains(me, `"read_only":false`) {
		t.Fatalf("/api/me with lina's token: %d %s", code, me)
	}
	if code, body := vote(watcher); code != http.StatusForbidden || !strings.Contains(body, "agent watcher is an observer") {
		t.Fatalf("a vote with the observer's token: %d %s", code, body)
	}
	natstest.CheckFor(t, 10*time.Second, "lina's approval", func() error {
		if code, body := vote(lina); code != 200 || !strings.Contains(body, `"agent":"lina"`) || !strings.Contains(body, `"outcome":"applied"`) {
			return fmt.Errorf("a vote with lina's token: %d %s", code, body)
		}
		return nil
	})
}
