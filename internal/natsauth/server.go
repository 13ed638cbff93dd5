package natsauth

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// ServerConfig is what StartServer starts an embedded server with.
type ServerConfig struct {
	// Listen is the host:port clients connect to; port -1 takes any free
	// port (Server.NATS().Addr() tells which).
	Listen string
	// Store is the directory of the server's JetStream store.
	Store string
	// MaxPayload is the largest message the server accepts. The default
	// (0) is the server's own, 1 MiB.
	MaxPayload int32
	// Agents, when not nil, are the only clients the server admits besides
	// the coordinator: each with its nkey and the Permissions of its roles
	// under Prefix. Nil admits anyone, with no permissions checked.
	Agents *Registry
	// Prefix is the coordinator's subject prefix, under which the agents'
	// permissions are given. The default is that of intents.Subjects.
	Prefix string
	// Cluster, when not nil, makes the server a node of a JetStream
	// cluster (see Cluster for how its routes are, and are not, secured).
	// The default, nil, is a server alone.
	Cluster *Cluster
	// SyncAlways has JetStream sync its store to disk after every write,
	// before it acknowledges it; otherwise SyncInterval is how often it
	// syncs (nats-server's sync_interval). The default (false, 0) is the
	// server's own: every two minutes, a write acknowledged meanwhile
	// being in the servers' memory only.
	SyncAlways   bool
	SyncInterval time.Duration
}

// Server is an embedded NATS server with JetStream, the one `coagent
// serve` (and `bench` and `demo`) run in-process. With a registry its users
// are the registry's agents and the coordinator, whose key it makes at
// start and keeps: only this process can connect as the coordinator.
//
// Its methods are safe for concurrent use.
type Server struct {
	ns *server.Server
	// opts are the options it was started with, its port resolved: a
	// reload gives the server all its options again, not only its users.
	opts   server.Options
	prefix string
	self   nkeys.KeyPair // the coordinator's key; nil without a registry
	pub    string        // self's public key
}

// ErrNoRegistry is returned by Server.Reload on a server started without
// a registry: it admits anyone, and reloading users would shut them out.
var ErrNoRegistry = errors.New("natsauth: the server was started without an agent registry")

// StartServer starts an embedded server and waits until it accepts
// connections. Its errors name the listen address.
func StartServer(cfg ServerConfig) (*Server, error) {
	host, port, err := splitListen(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("natsauth: %w", err)
	}
	s := &Server{prefix: cfg.Prefix, opts: server.Options{Host: host, Port: port, JetStream: true,
		StoreDir: cfg.Store, MaxPayload: cfg.MaxPayload, NoLog: true, NoSigs: true,
		SyncInterval: cfg.SyncInterval, SyncAlways: cfg.SyncAlways}}
	if cfg.Cluster != nil {
		cl, routes, err := cfg.Cluster.options()
		if err != nil {
			return nil, err
		}
		// A clustered JetStream needs a server name (its Raft peer's), a
		// cluster name and a route listener; the store stays this node's,
		// one replica of each stream among the cluster's.
		s.opts.ServerName, s.opts.Cluster, s.opts.Routes = cfg.Cluster.Node, cl, routes
	}
	if cfg.Agents != nil {
		if s.self, err = nkeys.CreateUser(); err != nil {
			return nil, fmt.Errorf("natsauth: coordinator key: %w", err)
		}
		if s.pub, err = s.self.PublicKey(); err != nil {
			return nil, fmt.Errorf("natsauth: coordinator key: %w", err)
		}
		s.opts.Nkeys = cfg.Agents.Users(cfg.Prefix, s.pub)
	}
	opts := s.opts // the server keeps and changes the options it is given
	if s.ns, err = server.NewServer(&opts); err != nil {
		return nil, fmt.Errorf("natsauth: embedded NATS server: %w", err)
	}
	// The server reports why it cannot start (its listener refused, its
	// JetStream store unusable) only to its logger's Fatalf, and then waits
	// for nothing: so a logger takes that error, and the wait for the server
	// to be ready ends as soon as it comes.
	fatal := &fatalLogger{errs: make(chan error, 1)}
	s.ns.SetLogger(fatal, false, false)
	go s.ns.Start()
	if err := s.ready(cfg, fatal.errs); err != nil {
		s.ns.Shutdown()
		return nil, err
	}
	s.opts.Port = s.ns.Addr().(*net.TCPAddr).Port // the port it got, when asked for any
	if cfg.Cluster != nil {
		s.opts.Cluster.Port = s.ns.ClusterAddr().Port
	}
	return s, nil
}

// startTimeout bounds how long StartServer waits for a server that neither
// starts nor says why.
const startTimeout = 10 * time.Second

// ready waits until the server accepts connections (and routes, in a
// cluster), or fails with the error it reported on errs: an
// *AddrInUseError if its address, or its cluster address, is taken.
func (s *Server) ready(cfg ServerConfig, errs <-chan error) error {
	listen := cfg.Listen
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case err := <-errs:
			var op *net.OpError
			if errors.As(err, &op) && cfg.Cluster != nil && isPort(op.Addr, s.opts.Cluster.Port) {
				listen = cfg.Cluster.Listen // the route listener's error
			}
			if errors.Is(err, syscall.EADDRINUSE) {
				return &AddrInUseError{Addr: listen, Err: err}
			}
			if errors.As(err, &op) {
				return fmt.Errorf("natsauth: embedded NATS server cannot listen on %s: %w", listen, err)
			}
			return fmt.Errorf("natsauth: embedded NATS server on %s: %w", listen, err)
		default:
		}
		// A short wait each time, so that the loop looks at errs again soon;
		// the server's own wait polls every 25ms.
		if s.ns.ReadyForConnections(50 * time.Millisecond) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natsauth: embedded NATS server did not start on %s within %s", listen, startTimeout)
		}
	}
}

// isPort reports whether addr is a TCP address on port.
func isPort(addr net.Addr, port int) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && port > 0 && a.Port == port
}

// AddrInUseError is StartServer's error when another process (another
// coordinator, a nats-server) listens on the address already. It matches
// syscall.EADDRINUSE (errors.Is).
type AddrInUseError struct {
	Addr string
	Err  error // the listener's own error
}

func (e *AddrInUseError) Error() string {
	return fmt.Sprintf("natsauth: %s is in use: another process (a coordinator, a NATS server) listens there", e.Addr)
}

func (e *AddrInUseError) Unwrap() error { return e.Err }

// fatalLogger is the embedded server's logger: quiet, as the server was
// before it had one, except that it hands the first fatal error to errs
// instead of ending the process, as the server's own logger would.
type fatalLogger struct{ errs chan error }

func (l *fatalLogger) Fatalf(format string, v ...any) {
	var err error
	for _, a := range v {
		if e, ok := a.(error); ok {
			err = e // the listener's error, wrapped below to keep it matchable
		}
	}
	msg := fmt.Sprintf(format, v...)
	if err != nil {
		err = fmt.Errorf("%s: %w", msg, err)
	} else {
		err = errors.New(msg)
	}
	select {
	case l.errs <- err:
	default: // one is enough: the first says why
	}
}

func (*fatalLogger) Noticef(string, ...any) {}
func (*fatalLogger) Warnf(string, ...any)   {}
func (*fatalLogger) Errorf(string, ...any)  {}
func (*fatalLogger) Debugf(string, ...any)  {}
func (*fatalLogger) Tracef(string, ...any)  {}

// NATS is the running server, for what needs it itself: an in-process
// connection, its client URL, the coordinator's interest check.
func (s *Server) NATS() *server.Server { return s.ns }

// Authenticated reports whether the server admits only its registry's
// agents and the coordinator.
func (s *Server) Authenticated() bool { return s.self != nil }

// Connect makes an in-process connection as the coordinator: with its key
// on an authenticated server, on which it may do anything.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(s.ns)}, opts...)
	if s.self != nil {
		opts = append(opts, nats.Nkey(s.pub, s.self.Sign))
	}
	nc, err := nats.Connect(s.ns.ClientURL(), opts...)
	if err != nil {
		return nil, fmt.Errorf("natsauth: connect to the embedded server: %w", err)
	}
	return nc, nil
}

// Reload gives the running server the agents of reg as its users, in place
// of those it had: an agent added since is let in, one removed is shut out.
// The coordinator keeps its key. It returns ErrNoRegistry on a server
// started without a registry, and the server's error if it refuses the
// reload, in which case the users in force stay.
func (s *Server) Reload(reg *Registry) error {
	if s.self == nil {
		return ErrNoRegistry
	}
	opts := s.opts
	opts.Nkeys = reg.Users(s.prefix, s.pub)
	if err := s.ns.ReloadOptions(&opts); err != nil {
		return fmt.Errorf("natsauth: reload users: %w", err)
	}
	return nil
}

// Shutdown stops the server; it is safe to call more than once.
func (s *Server) Shutdown() { s.ns.Shutdown() }
