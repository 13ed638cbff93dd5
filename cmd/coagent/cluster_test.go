package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// node is one `coagent serve --cluster` process.
type node struct {
	cmd    *exec.Cmd
	url    string
	line   string     // its start-up line
	done   chan error // its exit status, once
	waited bool       // the status was received
}

// startNode starts `coagent serve` with args and waits for its start-up
// line; the process is killed when the test ends if it still runs.
func startNode(t *testing.T, url string, args ...string) *node {
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
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &node{cmd: cmd, url: url, done: make(chan error, 1)}
	// One goroutine reads the process's stdout to its end (the start-up
	// line, then whatever follows), then waits for it: Wait must come
	// after the last read of the pipe.
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		l, _ := r.ReadString('\n')
		lines <- l
		io.Copy(io.Discard, r)
		n.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if !n.waited {
			cmd.Process.Kill()
			<-n.done
		}
	})
	select {
	case n.line = <-lines:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		n.line = "no start-up line in a minute"
	}
	if !strings.HasPrefix(n.line, "coagent: ") {
		// Its stderr is complete, and safe to read, once it has exited.
		err := <-n.done
		n.waited = true
		t.Fatalf("coagent %s: %q (exit %v); stderr:\n%s", strings.Join(args, " "), n.line, err, stderr.String())
	}
	return n
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

// freePorts are n loopback ports free a moment ago, all different.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// TestServeCluster: three `coagent serve --cluster` processes make one
// JetStream cluster; the one started with --coordinator runs the
// coordinator and makes its streams with 3 replicas, and any node answers
// for it. A second coordinator on the same cluster is refused.
func TestServeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-node cluster of coagent processes")
	}
	ports := freePorts(t, 6)
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
	// The pure server nodes first: the coordinator's node says it serves
	// only once the cluster can hold its streams, which takes the others.
	var nodes []*node
	for i := 1; i < 3; i++ {
		n := startNode(t, url(i), nodeArgs(i)...)
		if !strings.Contains(n.line, "serving NATS on "+url(i)) || !strings.Contains(n.line, fmt.Sprintf("node n%d of cluster coagent", i+1)) ||
			!strings.Contains(n.line, "no coordinator on this node") {
			t.Errorf("node %d's start-up line: %q", i+1, n.line)
		}
		nodes = append(nodes, n)
	}
	coord := startNode(t, url(0), append(nodeArgs(0), "--coordinator")...)
	if !strings.Contains(coord.line, "serving on "+url(0)) || !strings.Contains(coord.line, "node n1 of cluster coagent") ||
		!strings.Contains(coord.line, "streams with 3 replicas") {
		t.Errorf("the coordinator's start-up line: %q", coord.line)
	}
	nodes = append(nodes, coord)

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
	for _, k := range []string{intents.StreamIntents, intents.StreamDecisions, intents.StreamEvents, intents.StreamArbiter, intents.StreamDLQ} {
		name := intents.Subjects{}.Stream(k)
		st, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if info := st.CachedInfo(); info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("stream %s: %d replicas, cluster %+v", name, info.Config.Replicas, info.Cluster)
		}
	}
	// A second coordinator on the cluster is refused: here one that would
	// use a node as an existing server.
	p := runBin(t, nil, "", "serve", "--data", filepath.Join(dir, "d4"), "--nats", url(2))
	// It is told first that its streams would have 1 replica there.
	if p.status != 1 || !strings.Contains(p.stderr, "another coordinator already serves on "+url(2)) ||
		!strings.Contains(p.stderr, "the server is in cluster coagent; streams this coordinator makes have 1 replica unless given --replicas 3") {
		t.Errorf("a second coordinator: %+v", p)
	}
	// The coordinator first, while the cluster it writes to is whole.
	for i := len(nodes) - 1; i >= 0; i-- {
		nodes[i].stop(t)
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
		{append([]string{"--auth"}, node...), "--auth with --cluster is not supported yet: every node would need the same agents and the coordinator's key; run the cluster on a private network without --auth, or use --nats with a cluster whose operator sets the identities (docs/auth.md)"},
		{append([]string{"--rules", "r.json"}, node...), "--rules r.json needs --coordinator: this node runs no coordinator to put them in force"},
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
