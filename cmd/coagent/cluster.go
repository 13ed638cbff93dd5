package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/cluster"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// clusterFlags are the flags of `coagent serve` that make its embedded
// server a node of a JetStream cluster (SPEC §10), and its coordinator a
// member of the cluster's: with --cluster every node runs a coordinator
// by default, one active (the holder of the leadership key), the others
// standbys following the replicated log, and --coordinator=false keeps a
// node a pure NATS server, as a cluster of five servers with three
// coordinators would have. With --nats, --name makes the coordinator a
// member of the coordinators of that cluster.
type clusterFlags struct {
	listen, name, cluster  string
	routes                 []string
	replicas               int
	coordinator            bool
	leaseTTL               time.Duration
	snapshotEvery          int64
	tlsCert, tlsKey, tlsCA string
}

// member reports whether serve runs its coordinator as a member of a
// cluster's (cluster.Member) rather than alone.
func (f *clusterFlags) member() bool { return f.coordinator && f.name != "" }

// embeddedNode is the name of this node of an embedded cluster, "" when
// the embedded server is alone or there is none (--nats).
func (f *clusterFlags) embeddedNode() string {
	if f.listen == "" {
		return ""
	}
	return f.name
}

func (f *clusterFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.listen, "cluster", "", "make the embedded server a node of a JetStream cluster, its routes listening on HOST:PORT (plain TCP: keep it on loopback or a private network)")
	fs.StringSliceVar(&f.routes, "routes", nil, "with --cluster: the nodes' route URLs, nats://HOST:PORT, comma separated (this node's own may be among them)")
	fs.StringVar(&f.name, "name", "", "this node's name, unique in the cluster (n1, n2, …): with --cluster, the NATS node's and its coordinator's; with --nats, the coordinator's, which makes it one of that cluster's coordinators")
	fs.StringVar(&f.cluster, "cluster-name", natsauth.DefaultCluster, "with --cluster: the cluster's name, the same on every node")
	fs.IntVar(&f.replicas, "replicas", 0, "how many servers store each stream, 1 to 5 (default 1, 3 with --cluster; with --nats of a cluster, give 3)")
	fs.BoolVar(&f.coordinator, "coordinator", true, "run a coordinator on this node (with --cluster: active or standby, as the leadership key says); =false: a NATS node only")
	fs.StringVar(&f.tlsCert, "cluster-tls-cert", "", "with --cluster: this node's certificate (PEM) for mutual TLS on the routes; needs --cluster-tls-key and --cluster-tls-ca")
	fs.StringVar(&f.tlsKey, "cluster-tls-key", "", "with --cluster: the key of --cluster-tls-cert")
	fs.StringVar(&f.tlsCA, "cluster-tls-ca", "", "with --cluster: the CA every node's route certificate must be signed by: only nodes with one can join")
	fs.Int64Var(&f.snapshotEvery, "snapshot-every", 0, fmt.Sprintf("with --name: how many events the active coordinator appends between the snapshots it stores of the replicated log, trimming COAGENT_LOG below each (0: %d; negative: only when coagent snapshot asks)", cluster.DefaultTrimEvery))
	fs.DurationVar(&f.leaseTTL, "lease-ttl", cluster.DefaultLeaseTTL, "with --name: how long the leadership lasts unless renewed, which is how soon a standby takes over from a coordinator that died (at least 1s)")
}

// check validates the flags before anything touches the disk, and sets
// the defaults that depend on others: the replicas, and whether the node
// runs the coordinator. Each error names the flag and its value.
func (f *clusterFlags) check(c *cobra.Command, s *serveFlags) error {
	changed := c.Flags().Changed
	if f.listen == "" && s.conn.url != "" && changed("name") {
		if err := cluster.CheckNode(f.name); err != nil {
			return usagef(c, "--name %q: %v", f.name, err)
		}
		if s.authOn {
			// Untried: each member would need the operator's server to
			// give every agent the cluster's subjects too (status, each
			// member's reads), and nothing here has run it. On an
			// embedded cluster each node admits its own registry's agents.
			return usagef(c, "--auth with --nats and --name is not supported yet; run the cluster's nodes with coagent serve --cluster … --auth (docs/cluster.md)")
		}
	} else if f.listen == "" {
		for _, name := range []string{"routes", "name", "cluster-name", "cluster-tls-cert", "cluster-tls-key", "cluster-tls-ca"} {
			if changed(name) {
				return usagef(c, "--%s needs --cluster HOST:PORT: it configures this node's part of a cluster", name)
			}
		}
	} else {
		if s.conn.url != "" {
			return usagef(c, "--cluster and --nats %s exclude each other: --cluster makes the embedded server a cluster node, --nats uses a server that is not embedded", s.conn.url)
		}
		if err := natsauth.CheckListen(f.listen); err != nil {
			return usagef(c, "--cluster: %v", err)
		}
		if len(f.routes) == 0 {
			return usagef(c, "--cluster needs --routes nats://HOST:PORT,…: the route addresses of the cluster's nodes (this node's own may be among them)")
		}
		for _, r := range f.routes {
			if err := natsauth.CheckRoute(r); err != nil {
				return usagef(c, "--routes: %v", err)
			}
		}
		if f.name == "" {
			return usagef(c, "--cluster needs --name: this node's name, unique in the cluster (n1, n2, …)")
		}
		if err := natsauth.CheckName(f.name); err != nil {
			return usagef(c, "--name %q: %v", f.name, err)
		}
		if err := natsauth.CheckName(f.cluster); err != nil || f.cluster == "" {
			return usagef(c, "--cluster-name %q: want letters, digits, '-' or '_'", f.cluster)
		}
		if n := btoi(f.tlsCert != "") + btoi(f.tlsKey != "") + btoi(f.tlsCA != ""); n != 0 && n != 3 {
			return usagef(c, "route TLS needs all three of --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca")
		}
	}
	if changed("lease-ttl") && !f.member() {
		return usagef(c, "--lease-ttl needs --name: only a coordinator of a cluster holds a lease")
	}
	if changed("snapshot-every") && !f.member() {
		return usagef(c, "--snapshot-every needs --name: only a coordinator of a cluster snapshots the replicated log (a coordinator alone compacts with coagent compact)")
	}
	if f.leaseTTL < time.Second {
		return usagef(c, "--lease-ttl %s: want at least 1s", f.leaseTTL)
	}
	switch {
	case changed("replicas") && (f.replicas < 1 || f.replicas > coordinator.MaxReplicas):
		return usagef(c, "--replicas %d: want 1 to %d", f.replicas, coordinator.MaxReplicas)
	case changed("replicas") && f.replicas > 1 && f.listen == "" && s.conn.url == "":
		return usagef(c, "--replicas %d needs a cluster: a server alone stores each stream once (--cluster, or --nats of a cluster)", f.replicas)
	case !changed("replicas") && f.listen != "":
		f.replicas = 3
	case !changed("replicas"):
		// Alone, and also with --nats: whether the server is in a
		// cluster, and with how many JetStream nodes, is the operator's
		// knowledge; a stream of 3 replicas on fewer nodes is refused,
		// and a default that changed with the server would report every
		// stream made before. runServe says when the server is clustered.
		f.replicas = 1
	}
	if !f.coordinator {
		if f.listen == "" {
			return usagef(c, "--coordinator=false without --cluster leaves nothing to serve")
		}
		if s.rulesFile != "" {
			return usagef(c, "--rules %s needs --coordinator: this node runs no coordinator to put them in force", s.rulesFile)
		}
	}
	return nil
}

// config is the embedded server's cluster configuration, nil without
// --cluster.
func (f *clusterFlags) config() *natsauth.Cluster {
	if f.listen == "" {
		return nil
	}
	cl := &natsauth.Cluster{Node: f.name, Name: f.cluster, Listen: f.listen, Routes: f.routes}
	if f.tlsCert != "" {
		cl.TLS = &natsauth.RouteTLS{Cert: f.tlsCert, Key: f.tlsKey, CA: f.tlsCA}
	}
	return cl
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// describe is the node's part of the start-up line.
func (f *clusterFlags) describe(srv *natsauth.Server) string {
	if f.listen == "" {
		return ""
	}
	d := fmt.Sprintf(", node %s of cluster %s, routes on %s", f.name, f.cluster, srv.NATS().ClusterAddr())
	if f.tlsCert != "" {
		d += " (mutual TLS)"
	}
	if f.coordinator {
		d += fmt.Sprintf(", streams with %d replicas", f.replicas)
	}
	return d
}

// warnRoutes says on stderr, when the routes listen off loopback, that
// they are plain TCP (natsauth.Cluster says why it is so for now).
func (f *clusterFlags) warnRoutes(stderr io.Writer) {
	if f.listen != "" && f.tlsCert == "" && !natsauth.Loopback(f.listen) {
		fmt.Fprintf(stderr, "coagent: note: the routes on %s are neither encrypted nor authenticated: whoever reaches that address can join the cluster and read every message; keep it on a private network, or give every node --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca\n", f.listen)
	}
}

// waitCluster waits until the cluster can place streams of f.replicas
// (a meta leader, enough nodes online), or ctx ends: a coordinator
// started before would fail to make its streams. Past a few seconds it
// says on stderr what it waits for, once.
func (f *clusterFlags) waitCluster(ctx context.Context, srv *natsauth.Server, stderr io.Writer) error {
	told := time.Now().Add(3 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := srv.ClusterReady(f.replicas)
		if err == nil {
			return nil
		}
		if !told.IsZero() && time.Now().After(told) {
			fmt.Fprintf(stderr, "coagent: waiting: %v; start the other nodes with --routes naming this one (%s)\n", err, f.listen)
			told = time.Time{}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped while waiting for the cluster: %w", err)
		case <-tick.C:
		}
	}
}

// errCoordinatorRuns is runServe's error when another coordinator already
// answers under the same prefix.
var errCoordinatorRuns = errors.New("another coordinator already serves")

// checkNoCoordinator fails if a coordinator already answers its API under
// the prefix on nc's server or cluster: a second one would split the
// intents and the requests between two logs. A coordinator that was
// killed answers nothing (its subscriptions died with its connection).
// Two started at the same instant can both pass: the check is a guard
// against a mistake, not the leadership a cluster will have.
func checkNoCoordinator(nc *nats.Conn, f *serveFlags) error {
	subject := f.conn.subjects().API(intents.APIStateGet)
	_, err := nc.Request(subject, []byte(`{"paths":[]}`), 2*time.Second)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil
	case errors.Is(err, nats.ErrTimeout):
		// Someone subscribes and does not answer: a coordinator that
		// hangs, or one whose machine the server has not yet noticed is
		// gone. Starting beside it could split the intents; waiting
		// cannot.
		return fmt.Errorf("%w on %s? %s has a subscriber that does not answer\n  stop it, or wait until the server drops it (about 2 minutes after its machine went away)", errCoordinatorRuns, nc.ConnectedUrlRedacted(), subject)
	case err != nil:
		return fmt.Errorf("look for a running coordinator on %s: %w", subject, err)
	}
	hint := "stop it, or give this one another --subject-prefix; to run several coordinators of one cluster, give each --name"
	return fmt.Errorf("%w on %s (%s answers)\n  %s", errCoordinatorRuns, nc.ConnectedUrlRedacted(), subject, hint)
}
