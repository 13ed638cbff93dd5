// Package console is CoAgent's web console: a single page, embedded in the
// binary and working offline, that shows what the coordinator knows — the
// state tree (now or at any earlier revision), the transactions in flight
// with their lease countdown, the parked waiters and the agents' wait-for
// graph, the arbiter queue and the dead letters, the conflict hotspots, a
// live event feed, and the story of one intent.
//
// The console is an observer on NATS, never a part of the coordinator: it
// asks the coordinator's API (state.get, txn.list, log.query,
// conflicts.top, decision.get, rules.get), reads the arbiter and dead
// letter streams without consuming them, and follows <prefix>.events.>.
// It works the same whether the coordinator runs in the same process
// (`coagent serve`) or behind --nats, and under --auth it sees what its
// connection's identity may see. The state at an earlier revision is the
// fold of the log's change events up to it (log.query, folded with package
// state), as `coagent replay` folds the log.
//
//	h, err := console.New(console.Config{NATS: nc})
//	http.Handle("/", h)
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
	return errors.Join(errs...)
}

// New returns the console's handler: the page at "/", its files, and its
// JSON backend under /api/. It is safe for concurrent use; it holds no
// NATS subscription but those of the event feeds being streamed.
func New(cfg Config) (http.Handler, error) {
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
	mux.HandleFunc("GET /api/waiters", b.json(b.waitersView))
	mux.HandleFunc("GET /api/arbiter", b.json(b.arbiter))
	mux.HandleFunc("GET /api/conflicts", b.json(b.conflicts))
	mux.HandleFunc("GET /api/story", b.json(b.story))
	mux.HandleFunc("GET /api/events", b.events)
	return mux, nil
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
