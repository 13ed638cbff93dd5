package console

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/coagent/coagent/coordinator/rules"
	"github.com/nats-io/nats.go"
)

// Link is a console and the connection it reads through: never the
// coordinator's own, so that the console's reads and event streams share
// nothing with the coordinator's decisions (a stalled stream on the
// coordinator's connection slowed every intent). The coordinator answers
// a read for the agent whose inbox the reply goes to, so whom the console
// reads as is its connection's inbox prefix (PickReader says whom); when
// that changes (the registry lost the agent), ReadAs moves the console to
// a new connection, and the old one stays open a while for the requests
// in hand on it. It is safe for concurrent use.
type Link struct {
	console *Console
	dial    func(reader string) (*nats.Conn, error)

	mu struct {
		sync.Mutex
		nc     *nats.Conn
		reader string // "" with no inbox prefix
		// retired are the connections replaced, closed at Close if
		// their timer has not closed them yet.
		retired []*nats.Conn
	}
}

// retireAfter is how long a replaced connection stays open for the
// requests in hand on it: the console's request timeout.
const retireAfter = 10 * time.Second

// NewLink makes the console of cfg read as reader, through a connection
// dial makes for it; dial connects as that agent, with its inbox prefix
// ("" for none), and is called again by ReadAs. cfg.NATS is the link's to
// set. The link owns the connections dial makes.
func NewLink(cfg Config, reader string, dial func(reader string) (*nats.Conn, error)) (*Link, error) {
	nc, err := dial(reader)
	if err != nil {
		return nil, err
	}
	cfg.NATS = nc
	c, err := New(cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	l := &Link{console: c, dial: dial}
	l.mu.nc, l.mu.reader = nc, reader
	return l, nil
}

// Console is the console, to mount.
func (l *Link) Console() *Console { return l.console }

// Reader is whom the console reads as now.
func (l *Link) Reader() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.reader
}

// ReadAs makes the console read as reader: if that is another than now,
// through a new connection. A connection that cannot be made, or that
// the console does not take, is the error, and the console reads as
// before.
func (l *Link) ReadAs(reader string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if reader == l.mu.reader {
		return nil
	}
	nc, err := l.dial(reader)
	if err != nil {
		return err
	}
	if err := l.console.SetNATS(nc); err != nil {
		nc.Close()
		return err
	}
	old := l.mu.nc
	l.mu.retired = append(l.mu.retired, old)
	time.AfterFunc(retireAfter, old.Close)
	l.mu.nc, l.mu.reader = nc, reader
	return nil
}

// Close closes the console's connections.
func (l *Link) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.nc.Close()
	for _, nc := range l.mu.retired {
		nc.Close()
	}
}

// PickReader picks whom the console reads as under the registry's roles:
// the first observer by name, else the first admin (the operator, whom
// the first start with --auth registers, and who may read everything
// too), so that the console sees everything from the first start on,
// before any observer is added. ok is false when there is neither.
func PickReader(roles map[string][]string) (name string, ok bool) {
	names := slices.Sorted(maps.Keys(roles))
	for _, role := range []string{rules.RoleObserver, rules.RoleAdmin} {
		for _, name := range names {
			if slices.Contains(roles[name], role) {
				return name, true
			}
		}
	}
	return "", false
}
