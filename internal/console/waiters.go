package console

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"sync"

	"github.com/coagent/coagent/intents"
)

// waiters follows the parked intents: those with a wait or escalate event
// in the log and no final decision yet. No endpoint lists them, so the
// console keeps them itself: each refresh reads the wait and escalate
// events logged since the last one (indexed by type, so few), then asks
// decision.get for each intent still open, and forgets those decided.
type waiters struct {
	b *backend
	// refresh serializes the refreshes; a request waiting on it gives up
	// when its context ends.
	refresh chan struct{}

	mu struct {
		sync.Mutex
		from map[intents.EventType]uint64 // where the next read of each type starts
		open map[string]*intents.Event    // the latest wait or escalate event of each parked intent
	}
}

func newWaiters(b *backend) *waiters {
	w := &waiters{b: b, refresh: make(chan struct{}, 1)}
	w.mu.from = map[intents.EventType]uint64{}
	w.mu.open = map[string]*intents.Event{}
	return w
}

// waitPages bounds the wait or escalate events one refresh reads.
const waitPages = 100

// list refreshes and returns the parked intents' latest wait or escalate
// events, in log order.
func (w *waiters) list(ctx context.Context) ([]*intents.Event, error) {
	select {
	case w.refresh <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-w.refresh }()
	for _, typ := range []intents.EventType{intents.EventWait, intents.EventEscalate} {
		w.mu.Lock()
		from := w.mu.from[typ]
		w.mu.Unlock()
		var seen []*intents.Event
		_, err := w.b.scanLog(ctx, logQuery{Type: typ, From: from}, waitPages, func(ev *intents.Event) bool {
			seen = append(seen, ev)
			return true
		})
		if err != nil {
			return nil, err
		}
		w.mu.Lock()
		for _, ev := range seen {
			if ev.Intent != "" {
				w.mu.open[ev.Intent] = ev
			}
			w.mu.from[typ] = ev.Seq + 1
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	ids := make([]string, 0, len(w.mu.open))
	for id := range w.mu.open {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	for _, id := range ids {
		var d intents.Decision
		err := w.b.request(ctx, intents.APIDecisionGet, map[string]string{"intent": id}, &d)
		var ae *apiError
		if errors.As(err, &ae) && ae.code == "not_found" {
			continue // parked and not yet answered: it stays
		}
		if err != nil {
			return nil, err
		}
		if d.Outcome.Final() {
			w.mu.Lock()
			delete(w.mu.open, id)
			w.mu.Unlock()
		}
	}
	w.mu.Lock()
	out := make([]*intents.Event, 0, len(w.mu.open))
	for _, ev := range w.mu.open {
		out = append(out, ev)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

// waitEdge is one edge of the wait-for graph: agent From waits on agent
// To's transaction Txn, over Path.
type waitEdge struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Txn    string `json:"txn,omitempty"`
	Path   string `json:"path"`
	Kind   string `json:"kind"`
	Intent string `json:"intent"`
	// Escalated says the intent waits on an arbiter rather than on the
	// transaction's end.
	Escalated bool `json:"escalated"`
}

// waitersView answers the parked intents and the agents' wait-for graph.
func (b *backend) waitersView(ctx context.Context, _ *http.Request) (any, error) {
	evs, err := b.waiters.list(ctx)
	if err != nil {
		return nil, err
	}
	type row struct {
		Seq       uint64             `json:"seq"`
		Intent    string             `json:"intent"`
		Agent     string             `json:"agent"`
		Type      intents.EventType  `json:"type"`
		Kind      intents.Kind       `json:"kind,omitempty"`
		Action    string             `json:"action,omitempty"`
		Deadline  string             `json:"deadline,omitempty"`
		Writes    []intents.Write    `json:"writes,omitempty"`
		Conflicts []intents.Conflict `json:"conflicts"`
	}
	rows := []row{}
	edges := []waitEdge{}
	var agents []string
	for _, ev := range evs {
		r := row{Seq: ev.Seq, Intent: ev.Intent, Agent: ev.Agent, Type: ev.Type, Conflicts: []intents.Conflict{}}
		if ev.Wait != nil {
			r.Deadline = ev.Wait.Deadline.Format("2006-01-02T15:04:05.000Z07:00")
			r.Conflicts = ev.Wait.Conflicts
			if in := ev.Wait.Intent; in != nil {
				r.Kind, r.Action, r.Writes = in.Kind, in.Action, in.Writes
			}
		}
		rows = append(rows, r)
		agents = append(agents, ev.Agent)
		for _, c := range r.Conflicts {
			if c.WithAgent == "" {
				continue
			}
			edges = append(edges, waitEdge{From: ev.Agent, To: c.WithAgent, Txn: c.WithTxn, Path: c.Path, Kind: string(c.Kind),
				Intent: ev.Intent, Escalated: ev.Type == intents.EventEscalate})
			agents = append(agents, c.WithAgent)
		}
	}
	slices.Sort(agents)
	return map[string]any{"now": b.cfg.Now(), "waiters": rows, "graph": map[string]any{"agents": slices.Compact(agents), "edges": edges}}, nil
}
