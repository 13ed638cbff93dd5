// Package console is CoAgent's web console: a single page, embedded in the
// binary and working offline, that shows what the coordinator knows — the
// state tree (now or at any earlier revision), the transactions in flight
// with their lease countdown, the parked waiters and the agents' wait-for
// graph, the arbiter queue and the dead letters, the conflict hotspots, a
// live event feed, and the story of one intent; and it lets a person act
// on the open cases: approve or deny an intent a rule holds for approval,
// resolve an escalation.
//
// The console is an observer on NATS, never a part of the coordinator: it
// asks the coordinator's API (state.get, txn.list, log.query,
// conflicts.top, decision.get, rules.get), reads the arbiter and dead
// letter streams without consuming them, and follows <prefix>.events.>
// after the log's recent events, on one subscription that every event
// stream shares and that never waits for a slow browser. It works the same whether the coordinator runs in the same process
// (`coagent serve`) or behind --nats, and under --auth it sees what its
// connection's identity may see. The state at an earlier revision is the
// fold of the log's change events up to it (log.query, folded with package
// state), as `coagent replay` folds the log. A Link keeps the console on a
// connection of its own and moves it to another when whom it reads as
// changes.
//
//	c, err := console.New(console.Config{NATS: nc})
//	http.Handle("/", c)
package console

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

//go:embed static
var static embed.FS

// Config configures the console. Only NATS is required.
type Config struct {
	// NATS is the connection the console reads through; the caller keeps
	// owning it. Under --auth it should be an observer's (coagent agents
	// add --role observer), whose replies come to its own inbox prefix,
	// so that the coordinator shows it everything.
	NATS *nats.Conn
	// Prefix is the subject prefix of the coordinator. The default is
	// "coagent" (intents.DefaultPrefix).
	Prefix string
	// Timeout bounds each request the console makes to the coordinator.
	// The default is 10s.
	Timeout time.Duration
	// Now is the clock, for the lease countdown's reference time. The
	// default is time.Now.
	Now func() time.Time
	// Logger receives the errors of the event feed. The default discards
	// them.
	Logger *slog.Logger
	// MaxStreams bounds the event streams (/api/events) open at once; one
	// more is answered 503. The default is 32.
	MaxStreams int
	// StreamBuffer is how many feed events wait for one stream's browser;
	// a stream with that many waiting when another comes is dropped (its
	// browser reconnects). The default is 256.
	StreamBuffer int
	// WriteTimeout bounds each write to a stream's browser; a browser
	// that does not read for that long loses its stream. The default is
	// 10s.
	WriteTimeout time.Duration
	// Identity, under serve --auth, says who a request comes from: the
	// agent whose HTTP token admitted it. The console's actions (approve,
	// deny, resolve) act as that agent, and a read-only identity has none.
	// Nil: the page names the agent it acts as, which a coordinator
	// without --auth takes as given.
	Identity func(*http.Request) Identity
	// ActAs returns a connection whose replies come under agent's inbox
	// prefix, so that the coordinator knows an action as that agent's;
	// the caller owns it. Nil: the actions go through NATS.
	ActAs func(agent string) (*nats.Conn, error)
}

// ErrConfig is wrapped by every error of Config.Validate.
var ErrConfig = errors.New("console: config")

// EnsureDefaults fills every zero field but NATS with its default.
func (c *Config) EnsureDefaults() {
	if c.Prefix == "" {
		c.Prefix = intents.DefaultPrefix
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = 32
	}
	if c.StreamBuffer == 0 {
		c.StreamBuffer = 256
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
}

// Validate reports every problem of c at once, each naming its field.
func (c *Config) Validate() error {
	var errs []error
	if c.NATS == nil {
		errs = append(errs, fmt.Errorf("%w: NATS is nil: the console reads through a NATS connection", ErrConfig))
	}
	if c.Prefix != "" {
		for i, tok := range strings.Split(c.Prefix, ".") {
			if !intents.ValidSegment(tok) {
				errs = append(errs, fmt.Errorf("%w: Prefix %q: token %d (%q) is not a subject token of letters, digits, '_' or '-'", ErrConfig, c.Prefix, i+1, tok))
				break
			}
		}
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("%w: Timeout %s is negative", ErrConfig, c.Timeout))
	}
	if c.MaxStreams < 0 {
		errs = append(errs, fmt.Errorf("%w: MaxStreams %d is negative", ErrConfig, c.MaxStreams))
	}
	if c.StreamBuffer < 0 {
		errs = append(errs, fmt.Errorf("%w: StreamBuffer %d is negative", ErrConfig, c.StreamBuffer))
	}
	if c.WriteTimeout < 0 {
		errs = append(errs, fmt.Errorf("%w: WriteTimeout %s is negative", ErrConfig, c.WriteTimeout))
	}
	return errors.Join(errs...)
}

// Console is the console's handler: the page at "/", its files, and its
// JSON backend under /api/. It is safe for concurrent use.
type Console struct {
	mux *http.ServeMux
	b   *backend
}

// ServeHTTP answers the page and its backend.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.mux.ServeHTTP(w, r) }

// Feeds counts the event streams: open, dropped for a browser that did
// not keep up, refused beyond Config.MaxStreams.
func (c *Console) Feeds() FeedStats { return c.b.hub.stats() }

// SetNATS makes the console read through nc from now on (the caller keeps
// owning both connections): serve gives it another when the registry's
// change removes the agent it read as. The event streams open on the old
// connection end; their browsers reconnect.
func (c *Console) SetNATS(nc *nats.Conn) error {
	if nc == nil {
		return fmt.Errorf("%w: SetNATS(nil): the console reads through a NATS connection", ErrConfig)
	}
	c.b.conn.Store(newConn(nc))
	c.b.hub.swap(nc)
	return nil
}

// New returns the console. It holds one NATS subscription while event
// streams are open, shared by them, and none otherwise.
func New(cfg Config) (*Console, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.EnsureDefaults()
	files, err := fs.Sub(static, "static")
	if err != nil {
		return nil, fmt.Errorf("console: embedded files: %w", err)
	}
	b := newBackend(cfg)
	mux := http.NewServeMux()
	mux.Handle("GET /", noListing(http.FileServerFS(files)))
	mux.HandleFunc("GET /api/overview", b.json(b.overview))
	mux.HandleFunc("GET /api/state", b.json(b.state))
	mux.HandleFunc("GET /api/value", b.json(b.value))
	mux.HandleFunc("GET /api/txns", b.json(b.txns))
	mux.HandleFunc("GET /api/board", b.json(b.board))
	mux.HandleFunc("GET /api/waiters", b.json(b.waitersView))
	mux.HandleFunc("GET /api/arbiter", b.json(b.arbiter))
	mux.HandleFunc("GET /api/conflicts", b.json(b.conflicts))
	mux.HandleFunc("GET /api/story", b.json(b.story))
	mux.HandleFunc("GET /api/events", b.events)
	mux.HandleFunc("GET /api/me", b.json(b.me))
	mux.HandleFunc("GET /api/cases", b.json(b.cases))
	mux.HandleFunc("POST /api/vote", b.json(b.vote))
	mux.HandleFunc("POST /api/resolve", b.json(b.resolve))
	mux.HandleFunc("POST /api/reconcile", b.json(b.reconcile))
	mux.HandleFunc("POST /api/whatif", b.json(b.whatif))
	return &Console{mux: mux, b: b}, nil
}

// noListing serves the page's files but never a directory's listing: "/"
// is index.html, any other directory is not found.
func noListing(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" && strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}
