package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/console"
	"github.com/coagent/coagent/internal/httpd"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/nats-io/nats.go"
)

// defaultHTTP is where serve's HTTP listener is unless --http says.
const defaultHTTP = "127.0.0.1:7070"

// listenHTTP binds serve's HTTP listener on addr ("off": none, nil), with
// tokens (nil: none asked). The default address, when taken (a second
// serve on one machine, a coordinator beside another on a cluster's host),
// is noted on stderr and leaves the process without one; an address given
// with --http must be free.
func listenHTTP(addr string, explicit bool, tokens *httpd.Tokens, stderr io.Writer) (*httpd.Server, error) {
	if addr == "off" {
		return nil, nil
	}
	h, err := httpd.Listen(addr, tokens)
	if err != nil {
		if !explicit && errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintf(stderr, "coagent: note: %s is in use (another coagent serve?): no HTTP listener (metrics, health, console); give one with --http HOST:PORT\n", addr)
			return nil, nil
		}
		return nil, fmt.Errorf("--http %s: %w", addr, err)
	}
	return h, nil
}

// newConsoleLink connects the console, reading as reg's pick: under
// --auth on the embedded server its connection's replies come under the
// inbox prefix of an agent that may read everything (console.PickReader),
// since the console is there for those who may see everything (the HTTP
// token is an observer's or the operator's); with no such agent
// registered it reads what anyone may, and says so. Under --auth on the
// embedded server a person acts (approves, denies, resolves) as the agent
// whose HTTP token they gave, with the roles in force (roles), through a
// connection of that agent's inbox (actors).
func newConsoleLink(f *serveFlags, srv *natsauth.Server, reg *natsauth.Registry, roles func() map[string][]string, actors *consoleActors, stderr io.Writer) (*console.Link, error) {
	cfg := console.Config{Prefix: f.conn.prefix}
	if f.authOn && srv != nil {
		cfg.Identity = func(r *http.Request) console.Identity {
			agent := httpd.AgentOf(r.Context())
			return console.Identity{Agent: agent, Roles: roles()[agent]}
		}
		cfg.ActAs = actors.conn
	}
	return console.NewLink(cfg, consoleReader(f, srv, reg, stderr), func(reader string) (*nats.Conn, error) {
		var nc *nats.Conn
		var err error
		switch {
		case srv == nil:
			nc, err = f.conn.connect("coagent console")
		case reader == "":
			nc, err = srv.Connect(nats.Name("coagent console"))
		default:
			nc, err = srv.Connect(nats.Name("coagent console"), nats.CustomInboxPrefix(intents.InboxPrefix(reader)))
		}
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		return nc, nil
	})
}

// consoleActors keeps a connection per agent a person acts as in the
// console, made on first use, each with the agent's inbox prefix.
type consoleActors struct {
	srv *natsauth.Server
	mu  sync.Mutex
	ncs map[string]*nats.Conn
}

func (a *consoleActors) conn(agent string) (*nats.Conn, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if nc := a.ncs[agent]; nc != nil && !nc.IsClosed() {
		return nc, nil
	}
	nc, err := a.srv.Connect(nats.Name("coagent console: "+agent), nats.CustomInboxPrefix(intents.InboxPrefix(agent)))
	if err != nil {
		return nil, err
	}
	if a.ncs == nil {
		a.ncs = map[string]*nats.Conn{}
	}
	a.ncs[agent] = nc
	return nc, nil
}

// close closes the connections made.
func (a *consoleActors) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, nc := range a.ncs {
		nc.Close()
	}
	a.ncs = nil
}

// consoleReader is whom the console reads as under reg: "" unless --auth
// on the embedded server.
func consoleReader(f *serveFlags, srv *natsauth.Server, reg *natsauth.Registry, stderr io.Writer) string {
	if !f.authOn || srv == nil || reg == nil {
		return ""
	}
	name, ok := console.PickReader(reg.Roles())
	if !ok {
		fmt.Fprintf(stderr, "coagent: note: no observer nor admin registered: the console shows only what any agent may read (coagent agents add NAME --role observer)\n")
	}
	return name
}

// httpSide is serve's HTTP listener with the console it mounts and the
// tokens it asks (nil without --auth).
type httpSide struct {
	*httpd.Server
	link   *console.Link
	tokens *httpd.Tokens
}

// reload takes the registry's change, at SIGHUP: whom the console reads
// as, the tokens admitted (the requests of a token revoked end). The
// console first: once a revoked token is refused, the console reads as
// its new reader.
func (h *httpSide) reload(f *serveFlags, srv *natsauth.Server, reg *natsauth.Registry, stderr io.Writer) {
	if err := h.link.ReadAs(consoleReader(f, srv, reg, stderr)); err != nil {
		fmt.Fprintf(stderr, "coagent: the console still reads as %q: %v\n", h.link.Reader(), err)
	}
	if h.tokens != nil {
		h.tokens.Reload(reg)
	}
}
