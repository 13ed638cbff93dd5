package main

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/internal/natsauth"
)

// TestServeRegistersOperator: the first `serve --auth` registers the
// operator admin, writes its key, and the key runs `rules set` on the live
// coordinator; a second start registers nobody.
func TestServeRegistersOperator(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	url, stop := serve(t, data, "--auth")
	reg, err := natsauth.Load(natsauth.RegistryPath(data))
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := reg.Agents["admin"]; !ok || !slices.Contains(a.Roles, natsauth.RoleAdmin) {
		t.Fatalf("registry after the first start: %+v", reg.Agents)
	}
	seed := natsauth.SeedPath(data, "admin")
	if st, err := os.Stat(seed); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the operator's key: %v %v", st, err)
	}
	rulesFile := filepath.Join(dir, "board.json")
	writeFile(t, rulesFile, `{"rules":[{"pattern":"tasks.**","writers":["role:coder"]}]}`)
	p := runBin(t, nil, "", "rules", "set", "--nats", url, "--nkey", seed, rulesFile)
	if p.status != 0 {
		t.Fatalf("rules set as the operator: %+v", p)
	}
	p = runBin(t, nil, "", "rules", "get", "--nats", url, "--nkey", seed, "-o", "json")
	if p.status != 0 || !strings.Contains(p.stdout, "tasks.**") {
		t.Fatalf("rules get as the operator: %+v", p)
	}
	p = runBin(t, nil, "", "dlq", "list", "--nats", url, "--nkey", seed)
	if p.status != 0 || !strings.Contains(p.stderr, "no dead letters") {
		t.Fatalf("dlq list as the operator: %+v", p)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	_, stop = serve(t, data, "--auth")
	defer stop()
	again, err := natsauth.Load(natsauth.RegistryPath(data))
	if err != nil || len(again.Agents) != 1 {
		t.Fatalf("registry after the second start: %+v %v", again, err)
	}
}

// TestServePortInUse: serve on a taken address fails at once, saying so
// and what to do, and leaves the data directory as it found it: none made
// when there was none, and in one that was there only what was there
// (the store, log and registry of an earlier start), what this start made
// removed.
func TestServePortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	data := filepath.Join(t.TempDir(), "data")
	p := runBin(t, nil, "", "serve", "--data", data, "--listen", l.Addr().String())
	if p.status != 1 || !strings.Contains(p.stderr, l.Addr().String()+" is in use") || !strings.Contains(p.stderr, "--listen") {
		t.Fatalf("serve on a taken address: %+v", p)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed start left %s behind: %v", data, err)
	}

	// A directory with the log of an earlier start, and a file of the operator's.
	_, stop := serve(t, data)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(data, "jetstream")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(data, "notes.txt"), "mine")
	list := func() []string {
		entries, err := os.ReadDir(data)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	was := list()
	for _, args := range [][]string{{"--listen", l.Addr().String()}, {"--listen", "127.0.0.1:-1", "--http", l.Addr().String()}, {"--listen", l.Addr().String(), "--auth"}} {
		p := runBin(t, nil, "", append([]string{"serve", "--data", data}, args...)...)
		if p.status != 1 || !strings.Contains(p.stderr, "in use") {
			t.Fatalf("serve %v on a taken address: %+v", args, p)
		}
		if now := list(); !slices.Equal(now, was) {
			t.Fatalf("serve %v failed and left %v in the data directory, which held %v", args, now, was)
		}
	}
}

// TestDataDirHeldByServe: the commands that open a data directory say
// that a running coordinator holds it, and how to ask it instead.
func TestDataDirHeldByServe(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	_, stop := serve(t, data)
	defer stop()
	for _, cmd := range [][]string{{"verify"}, {"replay"}, {"compact", "--before", "1"}} {
		p := runBin(t, nil, "", append(cmd, "--data", data)...)
		if p.status != 1 || !strings.Contains(p.stderr, "a running coordinator holds "+data) || !strings.Contains(p.stderr, "coagent state") {
			t.Errorf("%v on a held directory: %+v", cmd, p)
		}
	}
	p := runBin(t, nil, "", "serve", "--data", data, "--listen", "127.0.0.1:-1")
	if p.status != 1 || !strings.Contains(p.stderr, "another coagent serve runs on "+data) {
		t.Errorf("a second serve: %+v", p)
	}
}

// TestRefusedPermissionSaysWhichRole: under --auth, an agent without the
// role admin is refused rules set and dlq list at once, told the
// permission and the role that has it, not left to time out.
func TestRefusedPermissionSaysWhichRole(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if p := runBin(t, nil, "", "agents", "add", "bob", "--data", data); p.status != 0 {
		t.Fatalf("agents add bob: %+v", p)
	}
	url, stop := serve(t, data, "--auth")
	defer stop()
	rulesFile := filepath.Join(dir, "board.json")
	writeFile(t, rulesFile, `{"rules":[]}`)
	bob := natsauth.SeedPath(data, "bob")
	for _, cmd := range [][]string{{"rules", "set", rulesFile}, {"dlq", "list"}} {
		start := time.Now()
		p := runBin(t, nil, "", append(cmd, "--nats", url, "--nkey", bob)...)
		if p.status != 1 || !strings.Contains(p.stderr, "the server refused agent bob to publish") ||
			!strings.Contains(p.stderr, "the role admin") {
			t.Errorf("%v as bob: %+v", cmd, p)
		}
		// The request's own timeout is 10 s and the stream's 30 s; a
		// refusal that waited for either did not come at once.
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v as bob took %v", cmd, d)
		}
	}
}

// TestServeChecksRulesFirst: a rules file that does not compile stops
// serve before it makes a data directory.
func TestServeChecksRulesFirst(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	bad := filepath.Join(dir, "bad.json")
	writeFile(t, bad, `{"rules":[{"pattern":"tasks..x"}]}`)
	for _, file := range []string{bad, filepath.Join(dir, "missing.json")} {
		p := runBin(t, nil, "", "serve", "--data", data, "--listen", "127.0.0.1:-1", "--rules", file)
		if p.status != 1 || !strings.Contains(p.stderr, "--rules") {
			t.Errorf("serve --rules %s: %+v", file, p)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Fatalf("serve --rules %s made %s: %v", file, data, err)
		}
	}
}

// TestEnsureOperatorOnANode: a node of a cluster that registers the
// operator says that the other nodes need its registry; one alone does
// not; a registry with an admin, copied in, is kept as it is.
func TestEnsureOperatorOnANode(t *testing.T) {
	for _, node := range []string{"", "n1"} {
		data := t.TempDir()
		reg := &natsauth.Registry{Agents: map[string]natsauth.Agent{}}
		var stderr strings.Builder
		if err := ensureOperator(data, node, reg, &stderr); err != nil {
			t.Fatal(err)
		}
		note := "node n1 of a cluster: copy " + natsauth.RegistryPath(data) + " to every other node's data directory before it starts"
		if _, ok := reg.Agents[natsauth.OperatorName]; !ok || strings.Contains(stderr.String(), note) != (node != "") {
			t.Errorf("node %q: agents %v, stderr %q", node, reg.Agents, stderr.String())
		}
		// The registry as a node started with it copied in finds it.
		copied, err := natsauth.Load(natsauth.RegistryPath(data))
		if err != nil {
			t.Fatal(err)
		}
		stderr.Reset()
		if err := ensureOperator(t.TempDir(), node, copied, &stderr); err != nil || stderr.Len() != 0 ||
			copied.Agents[natsauth.OperatorName].Nkey != reg.Agents[natsauth.OperatorName].Nkey {
			t.Errorf("node %q, a copied registry: %v, stderr %q, agents %v", node, err, stderr.String(), copied.Agents)
		}
	}
}
