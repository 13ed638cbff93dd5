package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// node is one `coagent serve --cluster` process.
type node struct {
	cmd    *exec.Cmd
	url    string
	args   []string
	line   string      // its start-up line
	lines  chan string // its stdout's lines, the start-up line first
	stderr *lockedBuilder
	done   chan error // its exit status, once
	waited bool       // the status was received
}

// lockedBuilder is a strings.Builder a process's output is copied into
// while the test reads it.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startNode starts `coagent serve` with args and waits for its start-up
// line; the process is killed when the test ends if it still runs.
func startNode(t *testing.T, url string, args ...string) *node {
	t.Helper()
	n := launchNode(t, url, args...)
	n.await(t)
	return n
}

// launchNode starts `coagent serve` with args and returns at once: a node
// of a cluster prints its start-up line only once the others are up.
func launchNode(t *testing.T, url string, args ...string) *node {
	t.Helper()
	cmd := exec.Command(coagentBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NATS_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	n := &node{cmd: cmd, url: url, args: args, done: make(chan error, 1), lines: make(chan string, 1024), stderr: &lockedBuilder{}}
	cmd.Stderr = n.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// One goroutine reads the process's stdout to its end, then waits
	// for it: Wait must come after the last read of the pipe.
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case n.lines <- sc.Text() + "\n":
			default: // nobody reads that far
			}
		}
		io.Copy(io.Discard, out)
		close(n.lines)
		n.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if !n.waited {
			cmd.Process.Signal(syscall.SIGCONT) // a paused one cannot die
			cmd.Process.Kill()
			<-n.done
		}
	})
	return n
}

// await waits for n's start-up line.
func (n *node) await(t *testing.T) {
	t.Helper()
	select {
	case n.line = <-n.lines:
	case <-time.After(time.Minute):
		n.cmd.Process.Kill()
		n.line = "no start-up line in a minute"
	}
	if !strings.HasPrefix(n.line, "coagent: ") {
		err := <-n.done
		n.waited = true
		t.Fatalf("coagent %s: %q (exit %v); stderr:\n%s", strings.Join(n.args, " "), n.line, err, n.stderr.String())
	}
}

// awaitLine waits for a line of n's stdout that contains want.
func (n *node) awaitLine(t *testing.T, want string, d time.Duration) string {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case l, ok := <-n.lines:
			if !ok {
				t.Fatalf("%s exited without printing %q; stderr:\n%s", n.url, want, n.stderr.String())
			}
			if strings.Contains(l, want) {
				return l
			}
		case <-deadline:
			t.Fatalf("%s printed no %q in %s; stderr:\n%s", n.url, want, d, n.stderr.String())
		}
	}
}

// kill sends SIGKILL and waits for the process to end.
func (n *node) kill(t *testing.T) {
	t.Helper()
	n.cmd.Process.Signal(syscall.SIGCONT)
	if err := n.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-n.done
	n.waited = true
}

// stop sends SIGTERM and waits for the process to exit.
func (n *node) stop(t *testing.T) {
	t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n.done:
		n.waited = true
		if err != nil {
			t.Errorf("%s: exit %v", n.url, err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop", n.url)
	}
}

// TestServeCluster: three `coagent serve --cluster` processes make one
// JetStream cluster and its three coordinators; one becomes the active
// one, the streams have 3 replicas, and any node answers for it. A
// coordinator alone (no --name) on the same cluster is refused.
func TestServeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-node cluster of coagent processes")
	}
	ports := natstest.FreePorts(t, 6)
	var routes []string
	for _, p := range ports[3:] {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	dir := t.TempDir()
	nodeArgs := func(i int) []string {
		return []string{"serve", "--data", filepath.Join(dir, fmt.Sprintf("d%d", i+1)),
			"--listen", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--cluster", fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			"--routes", strings.Join(routes, ","), "--name", fmt.Sprintf("n%d", i+1)}
	}
	url := func(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", ports[i]) }
	// Each node says it serves once the cluster can hold its streams,
	// which takes the others: they start together.
	// The third node syncs every two minutes, not each write: its line
	// warns what a power loss takes then.
	var nodes []*node
	for i := range 3 {
		args := nodeArgs(i)
		if i == 2 {
			args = append(args, "--sync", "2m")
		}
		nodes = append(nodes, launchNode(t, url(i), args...))
	}
	for i, n := range nodes {
		n.await(t)
		durable := "this node syncs each write to disk before it acknowledges it (--sync always, the default"
		if i == 2 {
			durable = "warning: this node syncs to disk every 2m0s (--sync): a power loss of a quorum at once can lose the decisions answered meanwhile"
		}
		if !strings.Contains(n.line, "serving on "+url(i)) || !strings.Contains(n.line, fmt.Sprintf("node n%d of cluster coagent", i+1)) ||
			!strings.Contains(n.line, "streams with 3 replicas") || !strings.Contains(n.line, fmt.Sprintf("coordinator n%d of the cluster", i+1)) ||
			!strings.Contains(n.line, durable) {
			t.Errorf("node %d's start-up line: %q", i+1, n.line)
		}
	}
	// One of them becomes the active coordinator, and says so.
	active := make(chan int, 3)
	for i, n := range nodes {
		go func() {
			for l := range n.lines {
				if strings.Contains(l, "is the active coordinator") {
					active <- i
				}
			}
		}()
	}
	select {
	case <-active:
	case <-time.After(30 * time.Second):
		t.Fatal("no node became the active coordinator in 30s")
	}
	// A cluster without a coordinator: --coordinator=false.
	if p := runBin(t, nil, "", "serve", "--coordinator=false", "--name", "x", "--data", t.TempDir()); p.status != 2 {
		t.Errorf("--coordinator=false without --cluster: %+v", p)
	}

	// Any node answers for the coordinator: a submit through one, a read
	// through another.
	apply := `{"id":"01JD0000000000000000000C01","agent":"w1","kind":"apply","writes":[{"path":"report.title","op":"set","value":"Q3"}]}`
	if p := runBin(t, nil, apply, "submit", "--nats", url(1), "-"); p.status != 0 || !strings.HasPrefix(p.stdout, "applied ") {
		t.Fatalf("submit through n2: %+v", p)
	}
	if p := runBin(t, nil, "", "state", "--nats", url(2), "report.title"); p.status != 0 || !strings.Contains(p.stdout, `report.title = "Q3" (version 1`) {
		t.Fatalf("state through n3: %+v", p)
	}
	// Its streams are on all three nodes.
	nc, err := nats.Connect(url(2))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{intents.StreamIntents, intents.StreamDecisions, intents.StreamEvents, intents.StreamArbiter, intents.StreamDLQ, intents.StreamLog} {
		name := intents.Subjects{}.Stream(k)
		st, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if info := st.CachedInfo(); info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("stream %s: %d replicas, cluster %+v", name, info.Config.Replicas, info.Cluster)
		}
	}
	// A coordinator alone (no --name) on the cluster is refused: here one
	// that would use a node as an existing server.
	p := runBin(t, nil, "", "serve", "--data", filepath.Join(dir, "d4"), "--nats", url(2))
	// It is told first that its streams would have 1 replica there.
	if p.status != 1 || !strings.Contains(p.stderr, "another coordinator already serves on "+url(2)) ||
		!strings.Contains(p.stderr, "the server is in cluster coagent; streams this coordinator makes have 1 replica unless given --replicas 3") {
		t.Errorf("a second coordinator: %+v", p)
	}
	for _, n := range nodes {
		n.stop(t)
	}
}

// TestServeClusterUsage: every cluster flag is checked before the data
// directory is made, and a bad one is a usage error naming it.
func TestServeClusterUsage(t *testing.T) {
	data := filepath.Join(t.TempDir(), "d")
	node := []string{"--cluster", "127.0.0.1:1", "--routes", "nats://127.0.0.1:1", "--name", "n1"}
	for _, c := range []struct {
		args []string
		line string
	}{
		{[]string{"--routes", "nats://h:1"}, "--routes needs --cluster HOST:PORT: it configures this node's part of a cluster"},
		{[]string{"--name", "n1"}, "--name needs --cluster HOST:PORT: it configures this node's part of a cluster"},
		{[]string{"--cluster-name", "x"}, "--cluster-name needs --cluster HOST:PORT: it configures this node's part of a cluster"},
		{[]string{"--cluster", "127.0.0.1:1"}, "--cluster needs --routes nats://HOST:PORT,…: the route addresses of the cluster's nodes (this node's own may be among them)"},
		{[]string{"--cluster", "127.0.0.1:1", "--routes", "nats://h:1"}, "--cluster needs --name: this node's name, unique in the cluster (n1, n2, …)"},
		{[]string{"--cluster", "h", "--routes", "nats://h:1", "--name", "n1"}, `--cluster: listen address "h": address h: missing port in address`},
		{[]string{"--cluster", "h:1", "--routes", "nats://h:1,h:2", "--name", "n1"}, `--routes: route "h:2": want nats://HOST:PORT`},
		{[]string{"--cluster", "h:1", "--routes", "nats://h:1", "--name", "n.1"}, `--name "n.1": '.' is not allowed in a name: want letters, digits, '-' or '_'`},
		{append([]string{"--cluster-name", "a b"}, node...), `--cluster-name "a b": want letters, digits, '-' or '_'`},
		{append([]string{"--nats", "nats://h:1"}, node...), "--cluster and --nats nats://h:1 exclude each other: --cluster makes the embedded server a cluster node, --nats uses a server that is not embedded"},
		{[]string{"--auth", "--nats", "nats://h:1", "--name", "n1"}, "--auth with --nats and --name is not supported yet; run the cluster's nodes with coagent serve --cluster … --auth (docs/cluster.md)"},
		{append([]string{"--rules", "r.json", "--coordinator=false"}, node...), "--rules r.json needs --coordinator: this node runs no coordinator to put them in force"},
		{append([]string{"--cluster-tls-cert", "c.pem"}, node...), "route TLS needs all three of --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca"},
		{[]string{"--cluster-tls-ca", "ca.pem"}, "--cluster-tls-ca needs --cluster HOST:PORT: it configures this node's part of a cluster"},
		{[]string{"--lease-ttl", "2s"}, "--lease-ttl needs --name: only a coordinator of a cluster holds a lease"},
		{append([]string{"--lease-ttl", "500ms"}, node...), "--lease-ttl 500ms: want at least 1s"},
		{[]string{"--snapshot-every", "500"}, "--snapshot-every needs --name: only a coordinator of a cluster snapshots the replicated log (a coordinator alone compacts with coagent compact)"},
		{append([]string{"--snapshot-every", "500", "--coordinator=false"}, node...), "--snapshot-every needs --name: only a coordinator of a cluster snapshots the replicated log (a coordinator alone compacts with coagent compact)"},
		{[]string{"--nats", "nats://h:1", "--name", "n.1"}, `--name "n.1": want letters, digits, '-' or '_'`},
		{[]string{"--replicas", "0"}, "--replicas 0: want 1 to 5"},
		{[]string{"--replicas", "6"}, "--replicas 6: want 1 to 5"},
		{[]string{"--replicas", "3"}, "--replicas 3 needs a cluster: a server alone stores each stream once (--cluster, or --nats of a cluster)"},
		{[]string{"--coordinator=false"}, "--coordinator=false without --cluster leaves nothing to serve"},
	} {
		p := runBin(t, nil, "", append([]string{"serve", "--data", data}, c.args...)...)
		want := "coagent: " + c.line + "\nrun 'coagent serve --help' for usage\n"
		if p.status != 2 || p.stdout != "" || p.stderr != want {
			t.Errorf("serve %s: exit %d, stdout %q, stderr\n%s\nwant exit 2 and\n%s", strings.Join(c.args, " "), p.status, p.stdout, p.stderr, want)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("a refused serve made its data directory: %v", err)
	}
}
