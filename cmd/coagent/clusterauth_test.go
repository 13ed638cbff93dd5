package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/oklog/ulid/v2"
)

// TestServeClusterAuth: three `coagent serve --cluster … --auth` nodes,
// each admitting the agents of its own registry, which the operator made
// on n1 and copied to n2 and n3 before they started. An agent connected
// to any node is decided by the active coordinator; a key no registry
// holds is refused by every node; status is the admin's and observers',
// not a plain agent's; a standby's own read subjects keep from an agent
// what the readers rules keep from it, as the active one's do; and after
// the active node is killed a standby takes over and the agent's next
// submit is decided.
func TestServeClusterAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-node cluster of coagent processes")
	}
	ports := natstest.FreePorts(t, 6)
	var routes []string
	for _, p := range ports[3:] {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	dir := t.TempDir()
	data := func(i int) string { return filepath.Join(dir, fmt.Sprintf("d%d", i+1)) }
	url := func(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", ports[i]) }
	all := strings.Join([]string{url(0), url(1), url(2)}, ",")

	// The operator registers everyone on n1, and copies the registry.
	for _, a := range [][]string{{"admin", "--role", "admin"}, {"alice"}, {"lead", "--role", "lead"}} {
		if p := runBin(t, nil, "", append([]string{"agents", "add", "--data", data(0)}, a...)...); p.status != 0 {
			t.Fatalf("agents add %v: %+v", a, p)
		}
	}
	reg, err := os.ReadFile(natsauth.RegistryPath(data(0)))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 3; i++ {
		if err := os.MkdirAll(data(i), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(natsauth.RegistryPath(data(i)), reg, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	seed := func(agent string) string { return natsauth.SeedPath(data(0), agent) }
	rulesFile := filepath.Join(dir, "rules.json")
	if err := os.WriteFile(rulesFile, []byte(`{"rules":[{"pattern":"secrets.**","readers":["role:lead"],"writers":["role:lead"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}

	var nodes []*node
	for i := range 3 {
		nodes = append(nodes, launchNode(t, url(i), "serve", "--data", data(i), "--auth", "--rules", rulesFile, "--http", "off",
			"--listen", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--cluster", fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			"--routes", strings.Join(routes, ","), "--name", fmt.Sprintf("n%d", i+1), "--lease-ttl", "2s"))
	}
	for i, n := range nodes {
		n.await(t)
		if !strings.Contains(n.line, "agents authenticated") {
			t.Errorf("node %d's start-up line: %q", i+1, n.line)
		}
		// A registry copied in keeps its admin: no node makes one of its own.
		if strings.Contains(n.stderr.String(), "registered the operator") {
			t.Errorf("node %d registered an operator of its own: %s", i+1, n.stderr.String())
		}
	}

	// status, as the admin: which node is active.
	status := func(nkey, urls string) (coordinator.ClusterStatus, proc) {
		p := runBin(t, nil, "", "status", "--nkey", nkey, "--nats", urls, "-o", "json", "--wait", "500ms")
		var st coordinator.ClusterStatus
		if p.status == 0 {
			if err := json.Unmarshal([]byte(p.stdout), &st); err != nil {
				t.Fatalf("status: %v: %s", err, p.stdout)
			}
		}
		return st, p
	}
	activeOf := func(urls string, want int) string {
		t.Helper()
		var active string
		natstest.CheckFor(t, 30*time.Second, "one active coordinator", func() error {
			st, p := status(seed("admin"), urls)
			if p.status != 0 {
				return fmt.Errorf("status: %+v", p)
			}
			if len(st.Active) != 1 || len(st.Members) != want {
				return fmt.Errorf("active %v of %d members", st.Active, len(st.Members))
			}
			active = st.Active[0]
			return nil
		})
		return active
	}
	active := activeOf(all, 3)
	idx := int(active[1] - '1') // n1 → 0

	// alice, connected to n3, is decided by the active coordinator.
	submit := func(agent, via, path, value string) proc {
		body := fmt.Sprintf(`{"id":%q,"agent":%q,"kind":"apply","writes":[{"path":%q,"op":"set","value":%s}]}`, ulid.Make().String(), agent, path, value)
		return runBin(t, nil, body, "submit", "--nkey", seed(agent), "--nats", via, "-")
	}
	if p := submit("alice", url(2), "report.title", `"Q3"`); p.status != 0 || !strings.HasPrefix(p.stdout, "applied ") {
		t.Fatalf("alice's submit through n3 (%s active): %+v", active, p)
	}
	if p := submit("lead", url(1), "secrets.plan", `"merge"`); p.status != 0 || !strings.HasPrefix(p.stdout, "applied ") {
		t.Fatalf("lead's submit through n2: %+v", p)
	}

	// A key that no registry holds, and no key at all, are refused by
	// every node.
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	strange, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	strangePath := filepath.Join(dir, "stranger.nk")
	if err := os.WriteFile(strangePath, strange, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		opt, err := nats.NkeyOptionFromSeed(strangePath)
		if err != nil {
			t.Fatal(err)
		}
		for what, opts := range map[string][]nats.Option{"an unregistered key": {opt}, "no key": nil} {
			if nc, err := nats.Connect(url(i), append(opts, nats.NoReconnect())...); err == nil {
				nc.Close()
				t.Errorf("n%d admitted %s", i+1, what)
			} else if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
				t.Errorf("n%d refused %s with %v", i+1, what, err)
			}
		}
	}

	// status is the admin's (above) and observers', not alice's: the
	// server refuses her the request, and says which role has it.
	if _, p := status(seed("alice"), url(2)); p.status != 1 ||
		!strings.Contains(p.stderr, "the server refused agent alice to publish") || !strings.Contains(p.stderr, "role observer") {
		t.Errorf("status as alice: %+v", p)
	}
	// So is a snapshot the admin's alone.
	if p := runBin(t, nil, "", "snapshot", "--nkey", seed("alice"), "--nats", url(0)); p.status != 1 ||
		!strings.Contains(p.stderr, "coagent.cluster.snapshot") || !strings.Contains(p.stderr, "role admin") {
		t.Errorf("snapshot as alice: %+v", p)
	}
	if p := runBin(t, nil, "", "snapshot", "--nkey", seed("admin"), "--nats", url(0)); p.status != 0 {
		t.Errorf("snapshot as the admin: %+v", p)
	}

	// A standby answers alice's reads on its own subjects as the active
	// one does: what the readers rules keep from her is redacted; lead,
	// whom they name, reads it.
	standby := fmt.Sprintf("n%d", (idx+1)%3+1)
	natstest.CheckFor(t, 10*time.Second, standby+" caught up", func() error {
		p := runBin(t, nil, "", "state", "secrets.plan", "--node", standby, "--nkey", seed("lead"), "--nats", url(2))
		if p.status != 0 || !strings.Contains(p.stdout, `secrets.plan = "merge"`) || !strings.Contains(p.stderr, "(standby)") {
			return fmt.Errorf("state --node %s as lead: %+v", standby, p)
		}
		return nil
	})
	p := runBin(t, nil, "", "state", "secrets.plan", "--node", standby, "--nkey", seed("alice"), "--nats", url(2))
	if p.status != 0 || !strings.Contains(p.stdout, "secrets.plan redacted") || strings.Contains(p.stdout, "merge") {
		t.Errorf("state --node %s as alice: %+v", standby, p)
	}
	p = runBin(t, nil, "", "log", "--node", standby, "--nkey", seed("alice"), "--nats", url(2), "-o", "json")
	if p.status != 0 || strings.Contains(p.stdout, "merge") || !strings.Contains(p.stdout, "report.title") {
		t.Errorf("log --node %s as alice: %+v", standby, p)
	}

	// The active node dies; a standby takes over, and alice's next submit
	// through a surviving node is decided.
	nodes[idx].kill(t)
	var rest []string
	for i := range 3 {
		if i != idx {
			rest = append(rest, url(i))
		}
	}
	next := activeOf(strings.Join(rest, ","), 2)
	if next == active {
		t.Fatalf("%s is still active after its kill", active)
	}
	if p := submit("alice", rest[len(rest)-1], "report.title", `"Q4"`); p.status != 0 || !strings.HasPrefix(p.stdout, "applied ") {
		t.Fatalf("alice's submit after %s's kill (%s active): %+v", active, next, p)
	}
	for i, n := range nodes {
		if i != idx {
			n.stop(t)
		}
	}
}
