package natsauth

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster makes an embedded server a node of a JetStream cluster, as the
// cluster {} block and server_name of a nats-server configuration do:
// its streams are then Raft groups of the cluster's nodes, replicated on
// as many as each stream's replicas say (SPEC §10).
//
// Without TLS, routes are plain TCP: neither encrypted nor authenticated.
// Whoever reaches Listen can join the cluster as a node and see every
// message, so a node listens for routes where the operator says (`coagent
// serve --cluster HOST:PORT`: there is no default address, and the
// examples use 127.0.0.1) and, off loopback, only on a private network.
// With TLS, as nats-server's cluster { tls { … verify: true } }, routes
// are encrypted and each side must present a certificate signed by the CA:
// only the nodes given one can join. (Route credentials, nats-server's
// other way, add nothing a verified certificate does not already give.)
type Cluster struct {
	// Node is this server's name, unique in the cluster: JetStream knows
	// its peers by name, and a node restarted under another name is a new
	// peer. Required.
	Node string
	// Name is the cluster's name, the same on every node; a route to a
	// server of another cluster is refused. The default is DefaultCluster.
	Name string
	// Listen is the host:port the other nodes' routes connect to; port -1
	// takes any free port. Required.
	Listen string
	// Routes are the nodes to connect to, as nats://host:port URLs: at
	// least one, as clustered JetStream requires. This node's own address
	// may be among them (the server notices and skips it), so that every
	// node can be given the same list.
	Routes []string
	// TLS, when not nil, secures the routes with mutual TLS.
	TLS *RouteTLS
}

// RouteTLS is the mutual TLS of a cluster's routes: this node's
// certificate and key, and the CA the other nodes' certificates must be
// signed by. The certificate is both the server's (routes accepted) and
// the client's (routes solicited), so it must name the address the other
// nodes reach this one at (an IP or DNS subject alternative name).
type RouteTLS struct {
	Cert, Key, CA string
}

// DefaultCluster is the cluster name of a Cluster that gives none.
const DefaultCluster = "coagent"

// CheckListen reports what is wrong with addr as a listen address: a
// host (possibly empty: every interface) and a port, -1 or 0..65535.
func CheckListen(addr string) error {
	_, _, err := splitListen(addr)
	return err
}

func splitListen(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("listen address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("listen address %q: port %q: want a number from 0 to 65535, or -1 for any", addr, portStr)
	}
	return host, port, nil
}

// CheckRoute reports what is wrong with route as the URL of a route:
// nats:// (or nats-route://), a host and a port, nothing else.
func CheckRoute(route string) error {
	_, err := parseRoute(route)
	return err
}

func parseRoute(route string) (*url.URL, error) {
	u, err := url.Parse(route)
	if err != nil {
		return nil, fmt.Errorf("route %q: %w", route, err)
	}
	if u.Scheme != "nats" && u.Scheme != "nats-route" {
		return nil, fmt.Errorf("route %q: want nats://HOST:PORT", route)
	}
	if u.Hostname() == "" || u.Port() == "" {
		return nil, fmt.Errorf("route %q: want nats://HOST:PORT, with a host and a port", route)
	}
	if port, err := strconv.Atoi(u.Port()); err != nil || port < 1 || port > 65535 {
		return nil, fmt.Errorf("route %q: port %q: want a number from 1 to 65535", route, u.Port())
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		// Route credentials would need the accepting side configured
		// too; until they are exposed, a URL that carries them is refused
		// rather than half obeyed.
		return nil, fmt.Errorf("route %q: want nats://HOST:PORT, without credentials, path or query", route)
	}
	return u, nil
}

// Check reports every problem of the cluster configuration at once, each
// naming the field and its value.
func (c *Cluster) Check() error {
	_, _, err := c.options()
	return err
}

// options are the server options the configuration sets: the server's
// name, its cluster block and its routes.
func (c *Cluster) options() (server.ClusterOpts, []*url.URL, error) {
	var errs []error
	if c.Node == "" {
		errs = append(errs, errors.New("natsauth: cluster: the node name is missing"))
	} else if err := CheckName(c.Node); err != nil {
		errs = append(errs, fmt.Errorf("natsauth: cluster: node name %q: %w", c.Node, err))
	}
	name := c.Name
	if name == "" {
		name = DefaultCluster
	} else if err := CheckName(name); err != nil {
		errs = append(errs, fmt.Errorf("natsauth: cluster: cluster name %q: %w", name, err))
	}
	host, port, err := splitListen(c.Listen)
	if err != nil {
		errs = append(errs, fmt.Errorf("natsauth: cluster: %w", err))
	}
	if len(c.Routes) == 0 {
		// JetStream does not start clustered without them, even on the
		// first node: it may name only itself.
		errs = append(errs, errors.New("natsauth: cluster: no routes: give the nodes' route URLs (this node's own may be among them)"))
	}
	var routes []*url.URL
	for _, r := range c.Routes {
		u, err := parseRoute(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("natsauth: cluster: %w", err))
			continue
		}
		routes = append(routes, u)
	}
	opts := server.ClusterOpts{Name: name, Host: host, Port: port}
	if c.TLS != nil {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: c.TLS.Cert, KeyFile: c.TLS.Key, CaFile: c.TLS.CA, Verify: true})
		if err != nil {
			errs = append(errs, fmt.Errorf("natsauth: cluster: route TLS (cert %s, key %s, CA %s): %w", c.TLS.Cert, c.TLS.Key, c.TLS.CA, err))
		}
		if tc != nil {
			// A node is both the server and the client of its routes: the
			// CA verifies the certificates it is shown either way, as
			// nats-server's configuration parser sets it up.
			tc.RootCAs = tc.ClientCAs
		}
		opts.TLSConfig, opts.TLSTimeout = tc, 2
	}
	if err := errors.Join(errs...); err != nil {
		return server.ClusterOpts{}, nil, err
	}
	return opts, routes, nil
}

// CheckName reports a name nats-server would refuse or misread: empty,
// or with white space or a subject's special characters (names are
// tokens of the servers' own subjects).
func CheckName(n string) error {
	for _, r := range n {
		switch {
		case r <= ' ', r == '.', r == '*', r == '>', r == 0x7f:
			return fmt.Errorf("%q is not allowed in a name: want letters, digits, '-' or '_'", r)
		}
	}
	return nil
}

// Loopback reports whether addr's host is a loopback address or
// localhost: a route listener there is reachable from this machine only.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ClusterReady reports nil once the server's JetStream can place a stream
// of replicas: for a node of a cluster, once the cluster has elected its
// meta leader and knows at least replicas nodes online, this one among
// them; for a server alone, at once. Otherwise its error says what is
// missing: no leader yet, or how many nodes are online. A stream created
// before either fails (no leader, or "insufficient resources"), so the
// coordinator of a node waits for this first.
func (s *Server) ClusterReady(replicas int) error {
	if s.opts.Cluster.Port == 0 {
		return nil
	}
	jsz, err := s.ns.Jsz(nil)
	if err != nil {
		return fmt.Errorf("natsauth: JetStream: %w", err)
	}
	routes := s.ns.NumRemotes()
	if jsz.Meta == nil || jsz.Meta.Leader == "" {
		return fmt.Errorf("the JetStream cluster has no leader yet (this node has routes to %d other nodes; a leader needs a majority of the cluster's)", routes)
	}
	online := 1 // the leader's list leaves out the leader, or this node
	for _, p := range jsz.Meta.Replicas {
		if !p.Offline {
			online++
		}
	}
	if online < replicas {
		return fmt.Errorf("the JetStream cluster has %d nodes online, and streams of %d replicas need %d (this node has routes to %d other nodes)", online, replicas, replicas, routes)
	}
	return nil
}
