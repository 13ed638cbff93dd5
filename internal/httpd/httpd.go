// Package httpd is the HTTP listener of `coagent serve`: /metrics
// (Prometheus), /healthz (the process is alive), /readyz (its coordinator
// serves intents) and one handler at "/", the console; and the checks that
// guard them. A listener on loopback answers only requests that name a
// loopback host, so that a page whose name was rebound to 127.0.0.1 reads
// nothing through a browser; a browser's state-changing request from
// another origin is refused; and under --auth every path but /healthz asks
// a token (Tokens). Each serve of a cluster has its own listener, and so
// its own metrics and readiness: an active coordinator's or a standby's.
package httpd

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server is the listener and what it serves. Its methods are safe for
// concurrent use.
type Server struct {
	ln  net.Listener
	srv *http.Server
	mux *http.ServeMux
	// reg is the process's registry: the Go and process collectors, each
	// coordinator's metrics while it runs (coordinator.Options.Metrics),
	// and coagent_active.
	reg *prometheus.Registry
	// root is the handler at "/"; ready says whether the coordinator
	// serves intents (nil: not started yet).
	root  atomic.Pointer[http.Handler]
	ready atomic.Pointer[func(context.Context) error]
	// tokens, if set, admits only requests with a token.
	tokens *Tokens
	// loopback says the listener is on a loopback address, where a
	// request naming another host is a page that rebound its own name to
	// 127.0.0.1 to read the console through the browser (DNS rebinding).
	loopback bool
	// cross refuses a browser's state-changing request sent from another
	// origin's page.
	cross *http.CrossOriginProtection
}

// Listen binds the listener on addr; it serves once Start is called. With
// tokens every path but /healthz asks one of them; nil asks none. The
// error is the listen's, as net gives it (syscall.EADDRINUSE for an
// address taken).
func Listen(addr string, tokens *Tokens) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, mux: http.NewServeMux(), reg: prometheus.NewRegistry(), tokens: tokens,
		loopback: LoopbackHost(ln.Addr().String()), cross: http.NewCrossOriginProtection()}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if root := s.root.Load(); root != nil {
			(*root).ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	})
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	return s, nil
}

// URL is where the listener is: the bound address, so that a listen on
// 127.0.0.1:0 says which port it got.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Loopback reports whether the listener is on a loopback address.
func (s *Server) Loopback() bool { return s.loopback }

// Registry is where /metrics gathers from.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Mount puts root at "/": the console. Until then "/" is 404.
func (s *Server) Mount(root http.Handler) { s.root.Store(&root) }

// SetReady sets what /readyz asks: nil from fn is ready, an error is why
// not. Until it is set /readyz says the coordinator is starting.
func (s *Server) SetReady(fn func(context.Context) error) { s.ready.Store(&fn) }

// Start serves until Close.
func (s *Server) Start() {
	go func() { _ = s.srv.Serve(s.ln) }() // ends with ErrServerClosed at Close
}

// Close stops the listener, letting the requests in hand finish until ctx
// ends, and then ending them.
func (s *Server) Close(ctx context.Context) {
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
}

// ServeHTTP answers /healthz to anyone, and everything else to those the
// token check admits.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.loopback && !LoopbackHost(r.Host) {
		http.Error(w, fmt.Sprintf("403 forbidden: Host %q: this listener is on %s and answers only requests to a loopback name (localhost, 127.0.0.1, [::1])",
			intents.Clip(r.Host, 80), s.ln.Addr()), http.StatusForbidden)
		return
	}
	if err := s.cross.Check(r); err != nil {
		http.Error(w, fmt.Sprintf("403 forbidden: %s %s from origin %q: %v", r.Method, r.URL.Path, intents.Clip(r.Header.Get("Origin"), 80), err), http.StatusForbidden)
		return
	}
	if r.URL.Path == "/healthz" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
		return
	}
	if s.tokens != nil {
		hash, ok := s.tokens.admit(w, r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="coagent"`)
			http.Error(w, "401 unauthorized: give a token (coagent agents add NAME --role observer prints one) as Authorization: Bearer TOKEN, or ?token=TOKEN", http.StatusUnauthorized)
			return
		}
		ctx, release := s.tokens.hold(r.Context(), hash)
		defer release()
		r = r.WithContext(context.WithValue(ctx, agentKey{}, s.tokens.agent(hash)))
	}
	s.mux.ServeHTTP(w, r)
}

// LoopbackHost reports whether addr (a Host header or a listener's
// address, with or without a port) names the loopback interface.
func LoopbackHost(addr string) bool {
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

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	ready := s.ready.Load()
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

// ActiveGauge is coagent_active: 1 while this process's coordinator is
// the one deciding (always, alone; the active member of a cluster), 0 for
// a standby, so that sum(coagent_active) is 1 on a healthy cluster.
func ActiveGauge(active func() bool) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coagent_active",
		Help: "1 while this coordinator is the one deciding (alone: always; in a cluster: the active member), 0 for a standby."},
		func() float64 {
			if active() {
				return 1
			}
			return 0
		})
}
