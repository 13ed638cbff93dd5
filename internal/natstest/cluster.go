package natstest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Cluster is a JetStream cluster of in-process servers on loopback, as
// nats-server's own tests run one (jetstream_helpers_test.go): each node
// with its own store under the test's temporary directory, routes to
// every node, stopped when the test ends. A node can be stopped and
// started again on the same store and ports, as a machine that restarts.
//
// Its methods are not safe for concurrent use: the test's goroutine
// drives the cluster.
type Cluster struct {
	t testing.TB
	// Servers are the nodes, in order (node names n1, n2, …); a stopped
	// node's entry is its stopped server until Restart replaces it.
	Servers []*server.Server
	opts    []server.Options // each node's options, ports resolved
	stopped []bool
}

// clusterWait bounds how long RunCluster and Restart wait for the cluster
// to elect its JetStream meta leader and every running node to be current.
const clusterWait = 30 * time.Second

// RunCluster starts n nodes of a JetStream cluster named "coagent" and
// waits until the cluster has elected its meta leader with all n peers
// and every node is current; it fails the test otherwise. configure, if
// given, changes each node's options first.
func RunCluster(t testing.TB, n int, configure ...func(*server.Options)) *Cluster {
	t.Helper()
	// Routes name their peers' addresses, so every node's route port is
	// chosen before any starts; the client ports too, so that a node
	// restarts where its clients reconnect.
	ports := FreePorts(t, 2*n)
	var routes []*url.URL
	for i := range n {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[n+i])})
	}
	c := &Cluster{t: t, Servers: make([]*server.Server, n), stopped: make([]bool, n)}
	dir := t.TempDir()
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		o := server.Options{Host: "127.0.0.1", Port: ports[i], ServerName: name, JetStream: true,
			StoreDir: filepath.Join(dir, name, "jetstream"), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "coagent", Host: "127.0.0.1", Port: ports[n+i]},
			Routes:  routes}
		for _, f := range configure {
			f(&o)
		}
		c.opts = append(c.opts, o)
	}
	t.Cleanup(func() {
		for i, s := range c.Servers {
			if s != nil && !c.stopped[i] {
				s.Shutdown()
			}
		}
	})
	for i := range n {
		c.start(i)
	}
	c.WaitReady()
	return c
}

// FreePorts returns n loopback ports that were free a moment ago: each
// is listened on, and all are closed together, so no two are the same.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("a free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// start starts node i with its options.
func (c *Cluster) start(i int) {
	c.t.Helper()
	o := c.opts[i] // the server keeps and changes the options it is given
	s, err := server.NewServer(&o)
	if err != nil {
		c.t.Fatalf("node %s: %v", c.opts[i].ServerName, err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		c.t.Fatalf("node %s did not start", c.opts[i].ServerName)
	}
	c.Servers[i], c.stopped[i] = s, false
}

// URLs are the nodes' client URLs, comma-separated, as nats.Connect takes
// them: a client connected with all of them rides the loss of any node.
func (c *Cluster) URLs() string {
	var urls []string
	for _, o := range c.opts {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(urls, ",")
}

// Connect connects a client to node i alone, closed when the test ends.
func (c *Cluster) Connect(t testing.TB, i int) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", c.opts[i].Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Stop shuts node i down and waits until it has stopped.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
	c.stopped[i] = true
}

// Wipe deletes the JetStream store of the stopped node i: restarted, it
// is a node replaced by an empty one of the same name, whose streams'
// replicas catch up from their leaders.
func (c *Cluster) Wipe(i int) {
	c.t.Helper()
	if !c.stopped[i] {
		c.t.Fatalf("node %s is running", c.opts[i].ServerName)
	}
	if err := os.RemoveAll(c.opts[i].StoreDir); err != nil {
		c.t.Fatal(err)
	}
}

// Restart starts the stopped node i again on the same store and ports,
// and waits until the cluster is ready again.
func (c *Cluster) Restart(i int) *server.Server {
	c.t.Helper()
	if !c.stopped[i] {
		c.t.Fatalf("node %s is running", c.opts[i].ServerName)
	}
	c.start(i)
	c.WaitReady()
	return c.Servers[i]
}

// Leader is the index of the node that leads the JetStream meta group, or
// -1 while none does.
func (c *Cluster) Leader() int {
	for i, s := range c.Servers {
		if !c.stopped[i] && s.JetStreamIsLeader() {
			return i
		}
	}
	return -1
}

// StreamLeader is the index of the node that leads the Raft group of
// stream (in the default account), or -1 while none does.
func (c *Cluster) StreamLeader(stream string) int {
	for i, s := range c.Servers {
		if !c.stopped[i] && s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// WaitReady waits until a meta leader knows every node as a peer and
// every running node is current with it; it fails the test after 30s.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	CheckFor(c.t, clusterWait, "the JetStream cluster to be ready", func() error {
		l := c.Leader()
		if l < 0 {
			return errors.New("no meta leader")
		}
		if peers := c.Servers[l].JetStreamClusterPeers(); len(peers) != len(c.Servers) {
			return fmt.Errorf("the meta leader %s knows %d peers, want %d", c.opts[l].ServerName, len(peers), len(c.Servers))
		}
		for i, s := range c.Servers {
			if !c.stopped[i] && !s.JetStreamIsCurrent() {
				return fmt.Errorf("node %s is not current", c.opts[i].ServerName)
			}
		}
		return nil
	})
}

// CheckFor calls cond until it returns nil, failing the test with cond's
// last error if that takes longer than d. It polls every 20ms: the
// conditions it waits for (an election, a node catching up) signal
// nothing a test could wait on.
func CheckFor(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v (after %s)", what, err, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
