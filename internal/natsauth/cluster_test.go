package natsauth

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
)

// Check names every bad field with its value, all at once.
func TestClusterCheck(t *testing.T) {
	if err := (&Cluster{Node: "n1", Listen: "127.0.0.1:6222", Routes: []string{"nats://127.0.0.1:6222", "nats-route://h:6223"}}).Check(); err != nil {
		t.Fatalf("a good cluster: %v", err)
	}
	err := (&Cluster{Name: "a b", Listen: "127.0.0.1", Routes: []string{"http://h:1", "nats://h", "nats://u:p@h:1", "nats://h:99999"}}).Check()
	if err == nil {
		t.Fatal("a bad cluster passed")
	}
	for _, w := range []string{
		"the node name is missing",
		`cluster name "a b": ' ' is not allowed`,
		`listen address "127.0.0.1": address 127.0.0.1: missing port`,
		`route "http://h:1": want nats://HOST:PORT`,
		`route "nats://h": want nats://HOST:PORT, with a host and a port`,
		`route "nats://u:p@h:1": want nats://HOST:PORT, without credentials`,
		`route "nats://h:99999": port "99999"`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not say %q:\n%v", w, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 7 {
		t.Errorf("%d problems reported, want 7:\n%v", n, err)
	}
	if err := (&Cluster{Node: "n.1", Listen: ":1", Routes: []string{"nats://h:1"}}).Check(); err == nil || !strings.Contains(err.Error(), `node name "n.1"`) {
		t.Errorf("a node name with a dot: %v", err)
	}
	if err := (&Cluster{Node: "n1", Listen: ":1"}).Check(); err == nil || !strings.Contains(err.Error(), "no routes") {
		t.Errorf("a cluster without routes: %v", err)
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "localhost:1": true, "[::1]:1": true, "0.0.0.0:1": false, ":1": false, "10.0.0.1:1": false} {
		if Loopback(addr) != want {
			t.Errorf("Loopback(%q) = %v", addr, !want)
		}
	}
}

// Three servers started with a Cluster, each given the same routes (its
// own among them), form one JetStream cluster and elect a meta leader.
func TestStartServerCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	var ports []int
	var ls []net.Listener
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	dir := t.TempDir()
	var srvs []*Server
	for i, p := range ports {
		name := fmt.Sprintf("n%d", i+1)
		srv, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", Store: filepath.Join(dir, name),
			Cluster: &Cluster{Node: name, Listen: fmt.Sprintf("127.0.0.1:%d", p), Routes: routes}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		srvs = append(srvs, srv)
		if i == 0 {
			// Alone, a node of three elects no leader.
			if err := srv.ClusterReady(1); err == nil || !strings.Contains(err.Error(), "no leader yet") {
				t.Errorf("one node of three is ready: %v", err)
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		leaders, peers := 0, 0
		for _, s := range srvs {
			if s.NATS().JetStreamIsLeader() {
				leaders++
				peers = len(s.NATS().JetStreamClusterPeers())
			}
		}
		if leaders == 1 && peers == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no meta leader with 3 peers: %d leaders, %d peers", leaders, peers)
		}
		time.Sleep(20 * time.Millisecond) // an election signals nothing to wait on
	}
	// Every node sees the three online, sooner or later, and not a fourth.
	for time.Now().Before(deadline) {
		ready := 0
		for _, s := range srvs {
			if s.ClusterReady(3) == nil {
				ready++
			}
		}
		if ready == len(srvs) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, s := range srvs {
		if err := s.ClusterReady(3); err != nil {
			t.Errorf("node %d: %v", i, err)
		}
		if err := s.ClusterReady(4); err == nil || !strings.Contains(err.Error(), "has 3 nodes online") {
			t.Errorf("node %d ready for 4 replicas: %v", i, err)
		}
	}
	for i, s := range srvs {
		if !s.NATS().JetStreamIsClustered() || s.NATS().Name() != fmt.Sprintf("n%d", i+1) || s.NATS().ClusterName() != DefaultCluster {
			t.Errorf("node %d: clustered %v, name %q, cluster %q", i, s.NATS().JetStreamIsClustered(), s.NATS().Name(), s.NATS().ClusterName())
		}
	}

	// A fourth server on a taken route port says which address is taken.
	_, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", Store: filepath.Join(dir, "n4"),
		Cluster: &Cluster{Node: "n4", Listen: fmt.Sprintf("127.0.0.1:%d", ports[0]), Routes: routes}})
	var inUse *AddrInUseError
	if !errors.As(err, &inUse) || inUse.Addr != fmt.Sprintf("127.0.0.1:%d", ports[0]) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("a taken route port: %v", err)
	}
}

// Nodes whose routes use mutual TLS with certificates of one CA form a
// cluster; a server whose certificate another CA signed cannot join it,
// while a good one started at the same moment does.
func TestStartServerClusterTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	good, other := natstest.NewCerts(t), natstest.NewCerts(t)
	ports := natstest.FreePorts(t, 4)
	var routes []string
	for _, p := range ports[:2] {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	dir := t.TempDir()
	start := func(i int, ca *natstest.Certs) *Server {
		name := fmt.Sprintf("n%d", i+1)
		cert, key := ca.Issue(t, name)
		srv, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", Store: filepath.Join(dir, name),
			Cluster: &Cluster{Node: name, Listen: fmt.Sprintf("127.0.0.1:%d", ports[i]), Routes: routes,
				TLS: &RouteTLS{Cert: cert, Key: key, CA: ca.CA}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		return srv
	}
	n1, n2 := start(0, good), start(1, good)
	joiner, intruder := start(2, good), start(3, other)
	// The nodes each one has routes to, by name.
	peers := func(s *Server) string {
		rz, err := s.NATS().Routez(&server.RoutezOptions{})
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, r := range rz.Routes {
			names[r.RemoteName] = true
		}
		return fmt.Sprint(slices.Sorted(maps.Keys(names)))
	}
	natstest.CheckFor(t, 30*time.Second, "the routes of the good nodes", func() error {
		if peers(joiner) != "[n1 n2]" || peers(n1) != "[n2 n3]" || peers(n2) != "[n1 n3]" {
			return fmt.Errorf("n1 to %s, n2 to %s, the joiner to %s", peers(n1), peers(n2), peers(joiner))
		}
		return nil
	})
	if p := peers(intruder); p != "[]" {
		t.Fatalf("a node with another CA's certificate has routes to %s, want none", p)
	}
	// A certificate that does not load is an error naming the files.
	_, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", Store: filepath.Join(dir, "bad"),
		Cluster: &Cluster{Node: "bad", Listen: "127.0.0.1:-1", Routes: routes, TLS: &RouteTLS{Cert: "/nonexistent.pem", Key: "k", CA: good.CA}}})
	if err == nil || !strings.Contains(err.Error(), "route TLS (cert /nonexistent.pem") {
		t.Fatalf("a missing certificate: %v", err)
	}
}
