package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/console"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// defaultHTTP is where serve's HTTP listener is unless --http says.
const defaultHTTP = "127.0.0.1:7070"

// httpServer is serve's HTTP listener: /metrics (Prometheus), /healthz (the
// process is alive), /readyz (it serves intents), and one handler at "/",
// the console, which Mount sets (until then "/" is 404). Each serve of a
// cluster has its own, and so its own metrics and readiness: an active
// coordinator's or a standby's.
type httpServer struct {
	ln  net.Listener
	srv *http.Server
	mux *http.ServeMux
	// reg is the process's registry: the Go and process collectors, each
	// Service's metrics while it runs (coordinator.Options.Metrics), and
	// coagent_active.
	reg *prometheus.Registry
	// root is the handler at "/"; ready says whether the coordinator
	// serves intents (nil: not started yet).
	root  atomic.Pointer[http.Handler]
	ready atomic.Pointer[func(context.Context) error]
	// auth, if set (serve --auth), admits only requests with a token.
	auth *httpAuth
	// console, if set, is the console at "/" and its connection.
	console *consoleLink
	// loopback says the listener is on a loopback address, where a
	// request naming another host is a page that rebound its own name to
	// 127.0.0.1 to read the console through the browser (DNS rebinding).
	loopback bool
	// cross refuses a browser's state-changing request sent from another
	// origin's page.
	cross *http.CrossOriginProtection
}

// listenHTTP binds serve's HTTP listener on addr ("off": none, nil). The
// default address, when taken (a second serve on one machine, a
// coordinator beside another on a cluster's host), is noted on stderr and
// leaves the process without one; an address given with --http must be
// free.
func listenHTTP(addr string, explicit bool, stderr io.Writer) (*httpServer, error) {
	if addr == "off" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if !explicit && errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintf(stderr, "coagent: note: %s is in use (another coagent serve?): no HTTP listener (metrics, health, console); give one with --http HOST:PORT\n", addr)
			return nil, nil
		}
		return nil, fmt.Errorf("--http %s: %w", addr, err)
	}
	h := &httpServer{ln: ln, mux: http.NewServeMux(), reg: prometheus.NewRegistry(),
		loopback: loopbackHost(ln.Addr().String()), cross: http.NewCrossOriginProtection()}
	h.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h.mux.Handle("GET /metrics", promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{Registry: h.reg}))
	h.mux.HandleFunc("GET /readyz", h.readyz)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if root := h.root.Load(); root != nil {
			(*root).ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	})
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	return h, nil
}

// URL is where the listener is, as the start-up line names it: the bound
// address, so that --http 127.0.0.1:0 says which port it got.
func (h *httpServer) URL() string { return "http://" + h.ln.Addr().String() }

// Mount puts root at "/": the console. Safe to call while serving.
func (h *httpServer) Mount(root http.Handler) { h.root.Store(&root) }

// setReady sets what /readyz asks.
func (h *httpServer) setReady(fn func(context.Context) error) { h.ready.Store(&fn) }

// start serves until close.
func (h *httpServer) start() {
	go func() { _ = h.srv.Serve(h.ln) }() // ends with ErrServerClosed at close
}

// close stops the listener, letting the requests in hand finish until ctx
// ends.
func (h *httpServer) close(ctx context.Context) {
	if err := h.srv.Shutdown(ctx); err != nil {
		h.srv.Close()
	}
}

// ServeHTTP answers /healthz to anyone, and everything else to those the
// token check admits.
func (h *httpServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.loopback && !loopbackHost(r.Host) {
		http.Error(w, fmt.Sprintf("403 forbidden: Host %q: this listener is on %s and answers only requests to a loopback name (localhost, 127.0.0.1, [::1])",
			intents.Clip(r.Host, 80), h.ln.Addr()), http.StatusForbidden)
		return
	}
	if err := h.cross.Check(r); err != nil {
		http.Error(w, fmt.Sprintf("403 forbidden: %s %s from origin %q: %v", r.Method, r.URL.Path, intents.Clip(r.Header.Get("Origin"), 80), err), http.StatusForbidden)
		return
	}
	if r.URL.Path == "/healthz" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
		return
	}
	if h.auth != nil {
		hash, ok := h.auth.admit(w, r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="coagent"`)
			http.Error(w, "401 unauthorized: give a token (coagent agents add NAME --role observer prints one) as Authorization: Bearer TOKEN, or ?token=TOKEN", http.StatusUnauthorized)
			return
		}
		ctx, release := h.auth.hold(r.Context(), hash)
		defer release()
		r = r.WithContext(ctx)
	}
	h.mux.ServeHTTP(w, r)
}

// reload takes the registry's change, at SIGHUP: the tokens admitted (the
// requests of a token revoked end), whom the console reads as.
func (h *httpServer) reload(reg *natsauth.Registry) {
	// The console first: once a revoked token is refused, the console
	// reads as its new reader.
	if h.console != nil {
		h.console.reload(reg)
	}
	if h.auth != nil {
		h.auth.reload(reg)
	}
}

// loopbackHost reports whether addr (a Host header or a listener's
// address, with or without a port) names the loopback interface.
func loopbackHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// readyWait bounds one /readyz: it asks the server about the streams.
const readyWait = 3 * time.Second

func (h *httpServer) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	ready := h.ready.Load()
	if ready == nil {
		http.Error(w, "not ready: starting", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyWait)
	defer cancel()
	if err := (*ready)(ctx); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// httpAuth is the token check of serve --auth's HTTP listener. A token is
// the registry's (coagent agents add --role observer), kept as its hash
// and read again at SIGHUP, or the one --http-token or COAGENT_HTTP_TOKEN
// gives. A browser may give it once as ?token=; it is then kept in a
// cookie, so that the console's own requests carry it.
type httpAuth struct {
	// tokens maps each token's hash (natsauth.HashHTTPToken) to whose it is.
	tokens atomic.Pointer[map[string]string]
	// extra is the hash of the token of --http-token ("" for none).
	extra string

	// mu guards the requests in hand, each with the hash of the token
	// that admitted it, so that revoking a token ends what it opened (an
	// event stream outlives any number of reloads otherwise).
	mu struct {
		sync.Mutex
		held map[*heldRequest]struct{}
	}
}

// heldRequest is a request in hand and how to end it.
type heldRequest struct {
	hash   string
	cancel context.CancelCauseFunc
}

// errRevoked ends the requests of a token the registry no longer has.
var errRevoked = errors.New("the token was revoked")

// tokenCookie is the cookie that keeps a browser's token.
const tokenCookie = "coagent_token"

// newHTTPAuth checks tokens against reg's and the hash of extra ("" for
// none).
func newHTTPAuth(reg *natsauth.Registry, extra string) *httpAuth {
	a := &httpAuth{}
	a.mu.held = map[*heldRequest]struct{}{}
	if extra != "" {
		a.extra = natsauth.HashHTTPToken(extra)
	}
	a.reload(reg)
	return a
}

// reload takes the registry's tokens, at SIGHUP.
func (a *httpAuth) reload(reg *natsauth.Registry) {
	t := map[string]string{}
	if reg != nil {
		t = reg.HTTPTokens()
	}
	a.tokens.Store(&t)
	a.mu.Lock()
	defer a.mu.Unlock()
	for req := range a.mu.held {
		if !a.validHash(req.hash) {
			req.cancel(errRevoked)
			delete(a.mu.held, req)
		}
	}
}

// hold returns the context of a request admitted by the token of hash,
// which ends when a reload revokes the token, and what to call when the
// request ends.
func (a *httpAuth) hold(ctx context.Context, hash string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	req := &heldRequest{hash: hash, cancel: cancel}
	a.mu.Lock()
	a.mu.held[req] = struct{}{}
	a.mu.Unlock()
	// A reload between admit and here swept without this request: check
	// again, against the tokens it stored before sweeping.
	if !a.validHash(hash) {
		cancel(errRevoked)
	}
	return ctx, func() {
		a.mu.Lock()
		delete(a.mu.held, req)
		a.mu.Unlock()
		cancel(nil)
	}
}

// none reports whether no token would be admitted.
func (a *httpAuth) none() bool { return a.extra == "" && len(*a.tokens.Load()) == 0 }

// valid reports whether token is one of the tokens admitted, and its
// hash.
func (a *httpAuth) valid(token string) (string, bool) {
	if token == "" {
		return "", false
	}
	h := natsauth.HashHTTPToken(token)
	return h, a.validHash(h)
}

// validHash reports whether the token of hash h is admitted.
func (a *httpAuth) validHash(h string) bool {
	if h == a.extra && h != "" {
		return true
	}
	_, ok := (*a.tokens.Load())[h]
	return ok
}

// admit reports whether r carries a valid token: in its Authorization
// header, its token query parameter (which sets the cookie), or the
// cookie; and the token's hash.
func (a *httpAuth) admit(w http.ResponseWriter, r *http.Request) (string, bool) {
	if v := r.Header.Get("Authorization"); v != "" {
		const bearer = "Bearer "
		if len(v) <= len(bearer) || v[:len(bearer)] != bearer {
			return "", false
		}
		return a.valid(v[len(bearer):])
	}
	if q := r.URL.Query().Get("token"); q != "" {
		h, ok := a.valid(q)
		if !ok {
			return "", false
		}
		http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: q, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		return h, true
	}
	c, err := r.Cookie(tokenCookie)
	if err != nil {
		return "", false
	}
	return a.valid(c.Value)
}

// activeGauge is coagent_active: 1 while this process's coordinator is
// the one deciding (always, alone; the active member of a cluster), 0 for
// a standby, so that sum(coagent_active) is 1 on a healthy cluster.
func activeGauge(active func() bool) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coagent_active",
		Help: "1 while this coordinator is the one deciding (alone: always; in a cluster: the active member), 0 for a standby."},
		func() float64 {
			if active() {
				return 1
			}
			return 0
		})
}

// consoleLink is the console and the connection it reads through: never
// serve's own, so that the console's reads and event streams share
// nothing with the coordinator's decisions (a stalled stream on the
// coordinator's connection slowed every intent). Under --auth on the
// embedded server the connection's replies come under the inbox prefix of
// an agent that may read everything (see consoleReader), since the
// coordinator answers a read for the agent whose inbox the reply goes to,
// and the console is there for those who may see everything (the HTTP
// token is an observer's or the operator's); with no such agent
// registered it reads what anyone may, and says so. At SIGHUP the reader
// is picked again, and a new one gets a new connection: the console
// survives the removal of the agent it read as.
type consoleLink struct {
	f       *serveFlags
	srv     *natsauth.Server
	stderr  io.Writer
	console *console.Console

	mu struct {
		sync.Mutex
		nc     *nats.Conn
		reader string // "" with no inbox prefix
		// retired are the connections replaced, left open a while for
		// the requests in hand on them.
		retired []*nats.Conn
	}
}

// retireAfter is how long a replaced connection stays open for the
// requests in hand on it: the console's request timeout.
const retireAfter = 10 * time.Second

// newConsoleLink connects the console, reading as reg's pick.
func newConsoleLink(f *serveFlags, srv *natsauth.Server, reg *natsauth.Registry, stderr io.Writer) (*consoleLink, error) {
	l := &consoleLink{f: f, srv: srv, stderr: stderr}
	reader := l.pick(reg)
	nc, err := l.connect(reader)
	if err != nil {
		return nil, err
	}
	c, err := console.New(console.Config{NATS: nc, Prefix: f.conn.prefix})
	if err != nil {
		nc.Close()
		return nil, err
	}
	l.console = c
	l.mu.nc, l.mu.reader = nc, reader
	return l, nil
}

// pick is whom the console reads as under reg: "" unless --auth on the
// embedded server.
func (l *consoleLink) pick(reg *natsauth.Registry) string {
	if !l.f.authOn || l.srv == nil || reg == nil {
		return ""
	}
	name, ok := consoleReader(reg.Roles())
	if !ok {
		fmt.Fprintf(l.stderr, "coagent: note: no observer nor admin registered: the console shows only what any agent may read (coagent agents add NAME --role observer)\n")
	}
	return name
}

func (l *consoleLink) connect(reader string) (*nats.Conn, error) {
	var nc *nats.Conn
	var err error
	switch {
	case l.srv == nil:
		nc, err = l.f.conn.connect("coagent console")
	case reader == "":
		nc, err = l.srv.Connect(nats.Name("coagent console"))
	default:
		nc, err = l.srv.Connect(nats.Name("coagent console"), nats.CustomInboxPrefix(intents.InboxPrefix(reader)))
	}
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	return nc, nil
}

// reload picks the reader again under reg and, if it changed, moves the
// console to a connection of its own; a connection that cannot be made is
// reported and leaves the console as it was.
func (l *consoleLink) reload(reg *natsauth.Registry) {
	reader := l.pick(reg)
	l.mu.Lock()
	defer l.mu.Unlock()
	if reader == l.mu.reader {
		return
	}
	nc, err := l.connect(reader)
	if err != nil {
		fmt.Fprintf(l.stderr, "coagent: the console still reads as %q: %v\n", l.mu.reader, err)
		return
	}
	if err := l.console.SetNATS(nc); err != nil {
		nc.Close()
		fmt.Fprintf(l.stderr, "coagent: the console still reads as %q: %v\n", l.mu.reader, err)
		return
	}
	old := l.mu.nc
	l.mu.retired = append(l.mu.retired, old)
	time.AfterFunc(retireAfter, old.Close)
	l.mu.nc, l.mu.reader = nc, reader
}

// close closes the console's connections.
func (l *consoleLink) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.nc.Close()
	for _, nc := range l.mu.retired {
		nc.Close()
	}
}

// consoleReader picks whom the console reads as: the first observer by
// name, else the first admin (the operator, whom the first start with
// --auth registers, and who may read everything too), so that the console
// sees everything from the first start on, before any observer is added.
func consoleReader(roles map[string][]string) (string, bool) {
	names := slices.Sorted(maps.Keys(roles))
	for _, role := range []string{natsauth.RoleObserver, natsauth.RoleAdmin} {
		for _, name := range names {
			if slices.Contains(roles[name], role) {
				return name, true
			}
		}
	}
	return "", false
}
