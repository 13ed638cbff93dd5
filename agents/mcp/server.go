// Package mcp makes one CoAgent agent an MCP server (the Model Context
// Protocol), so that any MCP-capable language model works on the shared
// state as that agent, with tools designed for a model rather than a mirror
// of the wire: read, write, claim and release, begin, commit and abort,
// history, and for arbiters next_case and resolve; the state tree as
// resources (coagent://state/<path>) with change notifications; and a short
// prompt on how to work on a shared board.
//
// It is an adapter of package agents: every tool call becomes intents of
// the one agent of its Client on the main path (request/reply), each with a
// fresh id and the Client's same-id resend, and a decision — a rejection
// too — is a tool result the model can act on: the reason, the detail, the
// conflicting paths, the current versions and what to do next. A
// transaction begun in a session, and a task claimed in it under a board
// rule with a lease, is renewed by the Client between the model's turns
// while the session lives and its client shows signs of life; when the
// session ends (the host exits, or an HTTP session goes idle), or its
// client makes no request for Options.Silence, its renewal stops and the
// lease runs out at the coordinator, which logs the expiry (a claimed task
// is reclaimed).
//
//	s, err := mcp.New(client, nc, mcp.Options{})
//	err = s.Run(ctx, &mcp.StdioTransport{Reader: os.Stdin, Writer: os.Stdout}) // coagent mcp
//	http.ListenAndServe(addr, s.HTTPHandler())                                 // coagent mcp --http ADDR
package mcp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
)

// Options configure a Server. The zero value is ready to use.
type Options struct {
	// Prefix is the coordinator's subject prefix, the one the Client was
	// connected with (agents.WithPrefix). The default is "coagent".
	Prefix string
	// Arbiter adds the tools next_case and resolve: the agent serves the
	// arbiter queue (SPEC §5) when the model asks for a case.
	Arbiter bool
	// Approver adds the tools approvals, approve and deny: the agent
	// votes on the intents board rules hold for approval.
	Approver bool
	// Lease is the lease of a transaction begun without lease_ms: how long
	// it outlives the session that began it. The default is 30s.
	Lease time.Duration
	// IdleTimeout closes an HTTP session that made no request for this
	// long, which lets its transactions' leases run out. The default is
	// 10 minutes. Stdio sessions end when the host closes the pipe.
	IdleTimeout time.Duration
	// Silence is how long a session's client may make no request (with
	// none in flight) before its transactions are no longer renewed: a
	// client gone without ending its session (an HTTP client that
	// vanished) then holds their paths for Silence and a lease, not until
	// IdleTimeout. A transaction whose renewal stopped stays the
	// session's: a commit within its lease still succeeds, a later one is
	// told the lease ran out. The default is 1 minute, or half of
	// IdleTimeout when that is shorter; it must be below IdleTimeout.
	Silence time.Duration
	// Token, when set, is the bearer token HTTPHandler requires of every
	// request (Authorization: Bearer <Token>): whoever reaches the
	// handler acts as the agent. The default is none (for a loopback
	// address).
	Token string
	// Version is the server version told to hosts. The default is "dev".
	Version string
	// Logger receives the server's notes (sessions that end, watches that
	// fail). The default discards them.
	Logger *slog.Logger
}

// ensureDefaults fills the zero fields with their defaults.
func (o *Options) ensureDefaults() {
	if o.Prefix == "" {
		o.Prefix = intents.DefaultPrefix
	}
	if o.Lease == 0 {
		o.Lease = 30 * time.Second
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 10 * time.Minute
	}
	if o.Silence == 0 {
		o.Silence = min(time.Minute, o.IdleTimeout/2)
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// validate reports every bad field at once.
func (o *Options) validate() error {
	var errs []error
	if o.Lease < 0 || (o.Lease > 0 && o.Lease < minLease) {
		errs = append(errs, fmt.Errorf("mcp: Options.Lease = %s: want at least %s", o.Lease, minLease))
	}
	if o.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("mcp: Options.IdleTimeout = %s: want a positive duration", o.IdleTimeout))
	}
	if o.Silence < 0 || (o.IdleTimeout > 0 && o.Silence >= o.IdleTimeout) {
		errs = append(errs, fmt.Errorf("mcp: Options.Silence = %s: want a positive duration below Options.IdleTimeout (%s)", o.Silence, o.IdleTimeout))
	}
	return errors.Join(errs...)
}

// minLease is the shortest lease a transaction may have here: the Client
// renews a third of the way through, and a shorter one would be lost to a
// slow round trip.
const minLease = 300 * time.Millisecond

// Server is the MCP server of one agent. It is safe for concurrent use by
// any number of sessions (stdio has one, streamable HTTP one per client).
type Server struct {
	c    *agents.Client
	nc   *nats.Conn
	subj intents.Subjects
	opts Options
	log  *slog.Logger
	mcp  *sdk.Server
	// inputs are the tools' input schemas, by tool name; written in New
	// only.
	inputs map[string]toolInput

	// done ends the watches and the arbiter when the server closes.
	done    context.Context
	cancel  context.CancelFunc
	workers sync.WaitGroup

	mu struct {
		sync.Mutex
		sessions map[*sdk.ServerSession]*session
		watches  map[string]*watch // by resource URI
		closed   bool
	}
	arb *arbiterBridge // nil unless Options.Arbiter
}

// session is what one MCP session holds: the transactions it began, the
// tasks it claimed, and the signs of life of its client.
type session struct {
	mu   sync.Mutex
	txns map[string]*agents.Txn // open, by transaction id
	// claims are the tasks claimed in the session, by task path: their
	// leases are renewed while it lives, and its writes to them carry
	// their fences.
	claims map[string]*agents.Claim
	closed bool
	// busy counts the client's requests in flight; seen is when the last
	// one began or ended.
	busy int
	seen time.Time
	// silenced are the transactions (by id) and claims (by lease id)
	// whose renewal stopped for the client's silence.
	silenced map[string]bool
	wake     chan struct{} // a request began or ended (capacity 1)
	gone     chan struct{} // closed when the session ends
}

// New makes the server of c's agent. nc is the connection c was made on,
// for the API calls the Client has no method for (log.query,
// decision.get) and for the arbiter queue. The caller keeps owning c and
// nc, and closes them after Close.
func New(c *agents.Client, nc *nats.Conn, opts Options) (*Server, error) {
	if c == nil || nc == nil {
		return nil, errors.New("mcp: New needs a client and its NATS connection")
	}
	opts.ensureDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Server{c: c, nc: nc, subj: intents.Subjects{Prefix: opts.Prefix}, opts: opts, log: opts.Logger, inputs: map[string]toolInput{}}
	s.mu.sessions = map[*sdk.ServerSession]*session{}
	s.mu.watches = map[string]*watch{}
	s.done, s.cancel = context.WithCancel(context.Background())
	s.mcp = sdk.NewServer(&sdk.Implementation{Name: "coagent", Title: "CoAgent", Version: opts.Version}, &sdk.ServerOptions{
		Instructions:       instructions(c.Name(), opts.Arbiter, opts.Approver),
		Logger:             slog.New(warnings{opts.Logger.Handler()}),
		SubscribeHandler:   s.subscribe,
		UnsubscribeHandler: s.unsubscribe,
	})
	s.mcp.AddReceivingMiddleware(s.liveness, s.checkArguments)
	s.addTools()
	if opts.Arbiter {
		s.arb = newArbiterBridge(s)
		s.addArbiterTools()
	}
	if opts.Approver {
		s.addApproverTools()
	}
	s.addResources()
	s.addPrompt()
	return s, nil
}

// warnings passes on the go-sdk's warnings and errors only: its info lines
// (each session, each subscription, each notification) would bury the
// server's own notes.
type warnings struct{ slog.Handler }

func (w warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}

func (w warnings) WithAttrs(as []slog.Attr) slog.Handler { return warnings{w.Handler.WithAttrs(as)} }
func (w warnings) WithGroup(g string) slog.Handler       { return warnings{w.Handler.WithGroup(g)} }

// MCP is the underlying go-sdk server, for a transport this package does
// not wire (Connect it to one).
func (s *Server) MCP() *sdk.Server { return s.mcp }

// Run serves one session on t (stdio: a StdioTransport) until the
// client closes it or ctx ends.
func (s *Server) Run(ctx context.Context, t sdk.Transport) error {
	err := s.mcp.Run(ctx, t)
	if errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil
	}
	return err
}

// HTTPHandler serves streamable HTTP: one session per client, closed when
// the client ends it or after Options.IdleTimeout without a request. With
// Options.Token, a request without it as its bearer token is refused
// (401) before it reaches a session.
func (s *Server) HTTPHandler() http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.mcp },
		&sdk.StreamableHTTPOptions{SessionTimeout: s.opts.IdleTimeout, Logger: slog.New(warnings{s.log.Handler()})})
	if s.opts.Token == "" {
		return h
	}
	want := []byte(s.opts.Token)
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if subtle.ConstantTimeCompare([]byte(token), want) != 1 {
			return nil, auth.ErrInvalidToken
		}
		// One token, one user: the go-sdk ties a session to the user that
		// opened it.
		return &auth.TokenInfo{UserID: s.c.Name()}, nil
	}
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
}

// Close closes the sessions still open and ends every watch and the
// arbiter. The sessions' transactions are no longer renewed, and their
// leases run out: Close does not abort them.
func (s *Server) Close() error {
	s.mu.Lock()
	s.mu.closed = true
	sessions := s.mu.sessions
	s.mu.sessions = map[*sdk.ServerSession]*session{}
	s.mu.Unlock()
	for _, st := range sessions {
		st.end()
	}
	// The sessions still open end here, so that nothing waits on them.
	for ss := range s.mcp.Sessions() {
		ss.Close()
	}
	s.cancel()
	s.workers.Wait()
	return nil
}

// sessionOf returns the state of session ss, made when the session is
// first seen (its first tool call or subscription: a session of protocol
// 2026-07-28 has no initialized notification), and from then on followed to
// let go of what it holds when it ends.
func (s *Server) sessionOf(ss *sdk.ServerSession) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.mu.sessions[ss]
	if st != nil {
		return st
	}
	st = &session{txns: map[string]*agents.Txn{}, claims: map[string]*agents.Claim{}, closed: s.mu.closed, seen: time.Now(), silenced: map[string]bool{},
		wake: make(chan struct{}, 1), gone: make(chan struct{})}
	if !s.mu.closed {
		s.mu.sessions[ss] = st
		s.workers.Go(func() {
			ss.Wait()
			s.ended(ss)
		})
		s.workers.Go(func() { s.watchSilence(ss, st) })
	}
	return st
}

// liveness is the receiving middleware that records each request and
// notification as a sign of life of its session's client, and a request
// in flight as one until it ends (a write that waits, a next_case).
func (s *Server) liveness(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		ss, ok := req.GetSession().(*sdk.ServerSession)
		if !ok || ss == nil {
			return next(ctx, method, req)
		}
		st := s.sessionOf(ss)
		// A subscriptions/listen stays open as long as the session: its
		// start is a sign of life, its being open is not.
		if method == "subscriptions/listen" {
			st.request(0)
			return next(ctx, method, req)
		}
		st.request(1)
		defer st.request(-1)
		return next(ctx, method, req)
	}
}

// request records a sign of life: a request begins (+1), ends (-1), or
// a message that stays open begins (0).
func (st *session) request(busy int) {
	st.mu.Lock()
	st.busy += busy
	st.seen = time.Now()
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// quietSince is when the client fell silent, and false while it has a
// request in flight.
func (st *session) quietSince() (time.Time, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.seen, st.busy == 0
}

// watchSilence stops renewing the transactions and claims of session ss
// once its client has made no request for Options.Silence, until the
// session ends.
func (s *Server) watchSilence(ss *sdk.ServerSession, st *session) {
	timer := time.NewTimer(s.opts.Silence)
	defer timer.Stop()
	for {
		if since, quiet := st.quietSince(); quiet {
			wait := time.Until(since.Add(s.opts.Silence))
			if wait <= 0 {
				if n := st.silence(); n > 0 {
					s.log.Info("the client made no request; its transactions and claims are no longer renewed and their leases will run out",
						"session", ss.ID(), "silence", s.opts.Silence, "leases", n)
				}
				// Silent still: nothing to do until the next request.
				select {
				case <-st.wake:
				case <-st.gone:
					return
				case <-s.done.Done():
					return
				}
				continue
			}
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-st.wake:
		case <-st.gone:
			return
		case <-s.done.Done():
			return
		}
	}
}

// silence stops renewing the session's open transactions and leased
// claims, and returns how many were still renewed.
func (st *session) silence() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for id, t := range st.txns {
		if !st.silenced[id] {
			t.StopRenewing()
			st.silenced[id] = true
			n++
		}
	}
	for _, cl := range st.claims {
		if id := cl.ID(); id != "" && !st.silenced[id] && cl.Err() == nil {
			cl.StopRenewing()
			st.silenced[id] = true
			n++
		}
	}
	return n
}

// ended lets go of what session ss held: its transactions and claims are
// no longer renewed (their leases run out at the coordinator, which logs
// the expiry and reclaims the tasks), its subscriptions end, a case it
// held goes back to the queue.
func (s *Server) ended(ss *sdk.ServerSession) {
	s.mu.Lock()
	st := s.mu.sessions[ss]
	delete(s.mu.sessions, ss)
	s.mu.Unlock()
	if st != nil {
		if n := st.end(); n > 0 {
			s.log.Info("session ended; its transactions' and claims' leases will run out", "session", ss.ID(), "leases", n)
		}
	}
	s.dropSubscriptions(ss)
	if s.arb != nil {
		s.arb.abandon(ss)
	}
}

// end stops renewing the session's transactions and claims and returns
// how many leases there were.
func (st *session) end() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.closed {
		close(st.gone)
	}
	st.closed = true
	for _, t := range st.txns {
		t.StopRenewing()
	}
	n := len(st.txns)
	for _, cl := range st.claims {
		cl.StopRenewing()
		if cl.ID() != "" && cl.Err() == nil {
			n++
		}
	}
	st.txns = map[string]*agents.Txn{}
	st.claims = map[string]*agents.Claim{}
	return n
}

// add records t as open in the session; false if the session has ended
// (then t is not renewed).
func (st *session) add(t *agents.Txn) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		t.StopRenewing()
		return false
	}
	st.txns[t.ID()] = t
	return true
}

func (st *session) txn(id string) *agents.Txn {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.txns[id]
}

func (st *session) forget(id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.txns, id)
	delete(st.silenced, id)
}

func (st *session) open() []*agents.Txn {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]*agents.Txn, 0, len(st.txns))
	for _, t := range st.txns {
		out = append(out, t)
	}
	return out
}

// addClaim records cl as held in the session; false if the session has
// ended (then cl is not renewed).
func (st *session) addClaim(cl *agents.Claim) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		cl.StopRenewing()
		return false
	}
	st.claims[cl.Task()] = cl
	return true
}

// claim is the session's claim of task, nil if it holds none.
func (st *session) claim(task string) *agents.Claim {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.claims[task]
}

// claimOf is the session's live leased claim whose task the writes reach
// (at the task or under it), for its fence; nil when there is none, or
// more than one (one write carries one fence).
func (st *session) claimOf(writes []intents.Write) *agents.Claim {
	st.mu.Lock()
	defer st.mu.Unlock()
	var found *agents.Claim
	for _, cl := range st.claims {
		if cl.Fence() == 0 || cl.Err() != nil {
			continue
		}
		for _, w := range writes {
			if intents.Overlaps(w.Path, cl.Task()) {
				if found != nil && found != cl {
					return nil
				}
				found = cl
			}
		}
	}
	return found
}

// forgetClaim drops the session's claim of task, once it has ended.
func (st *session) forgetClaim(cl *agents.Claim) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.claims[cl.Task()] == cl {
		delete(st.claims, cl.Task())
		delete(st.silenced, cl.ID())
	}
}
