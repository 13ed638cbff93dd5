package team

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// member is one agent of the team: its connection, its SDK client, and the
// bookkeeping the run shares (what it is told, how long decisions take).
type member struct {
	name string
	t    *teamRun
	nc   *nats.Conn
	c    *agents.Client

	mu struct {
		sync.Mutex
		// later are the decisions awaited after the call that submitted
		// the intent returned: a granted propose that an arbiter preempts
		// gets a second, final decision (aborted).
		later map[string]chan *intents.Decision
		// nextTxn names the transaction the next grant opens, for lines.
		nextTxn string
	}
}

// join connects the member name on a connection of its own.
func (t *teamRun) join(ctx context.Context, name string) (*member, error) {
	nc, err := t.cfg.Connect(name)
	if err != nil {
		return nil, fmt.Errorf("team: connect %s: %w", name, err)
	}
	m := &member{name: name, t: t, nc: nc}
	m.mu.later = map[string]chan *intents.Decision{}
	m.c, err = agents.Connect(ctx, nc, name, agents.WithPrefix(t.cfg.Prefix), agents.WithDecisionHook(m.hook))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("team: %w", err)
	}
	return m, nil
}

func (m *member) close() {
	m.c.Close()
	m.nc.Close()
}

// hook sees every decision the member is told, interim ones included, on
// the client's delivery goroutine: it counts it, says the interim ones out
// loud (nobody else can: the call waiting for them is still waiting), and
// hands late decisions to whoever expects them.
func (m *member) hook(d *intents.Decision) {
	m.t.observe(d)
	switch d.Outcome {
	case intents.OutcomeQueued:
		m.t.emit(m.name, Queued, "queued: %s — waiting for it to end; %s told", m.t.conflictText(d.Conflicts), holdersOf(d.Conflicts))
	case intents.OutcomeEscalated:
		if len(d.Conflicts) > 0 && d.Conflicts[0].Kind == intents.ConflictApproval {
			m.t.emitCase(m.name, Approval, d.Intent, "waits for the editor's approval to publish (case %s)", short(d.Intent))
			break
		}
		m.t.emit(m.name, Escalated, "escalated to the arbiters: %s", m.t.conflictText(d.Conflicts))
	case intents.OutcomeCommitted:
		m.t.alias(d.Intent, d.Txn)
	}
	m.mu.Lock()
	ch := m.mu.later[d.Intent]
	if d.Outcome == intents.OutcomeGranted && m.mu.nextTxn != "" {
		// Named here, before the propose returns, so that the others'
		// lines name it as soon as their decisions can.
		m.t.label(d.Txn, m.mu.nextTxn)
		m.mu.nextTxn = ""
	}
	m.mu.Unlock()
	if ch != nil && d.Outcome.Final() {
		select {
		case ch <- d:
		default:
		}
	}
}

// nameNextTxn names, for the lines, the transaction the member's next
// granted propose opens.
func (m *member) nameNextTxn(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.nextTxn = what
}

// expect returns a channel that receives the next final decision of the
// intent id that arrives from now on.
func (m *member) expect(id string) <-chan *intents.Decision {
	ch := make(chan *intents.Decision, 1)
	m.mu.Lock()
	m.mu.later[id] = ch
	m.mu.Unlock()
	return ch
}

// apply is Client.Apply, timed from submission to final decision.
func (m *member) apply(ctx context.Context, b *intents.Builder) (*intents.Decision, error) {
	start := time.Now()
	d, err := m.c.Apply(ctx, b)
	if d != nil {
		m.t.latency(time.Since(start))
	}
	return d, err
}

// propose is Client.Propose, timed.
func (m *member) propose(ctx context.Context, b *intents.Builder) (*agents.Txn, error) {
	start := time.Now()
	txn, err := m.c.Propose(ctx, b)
	var rej *agents.RejectedError
	if txn != nil || errors.As(err, &rej) {
		m.t.latency(time.Since(start))
	}
	return txn, err
}

// commit is Txn.Commit, timed.
func (m *member) commit(ctx context.Context, txn *agents.Txn, b *intents.Builder) (*intents.Decision, error) {
	start := time.Now()
	d, err := txn.Commit(ctx, b)
	if d != nil {
		m.t.latency(time.Since(start))
	}
	return d, err
}

// awaitNotice returns the first notice that an intent waits on the
// transaction txn.
func (m *member) awaitNotice(ctx context.Context, txn string) (*intents.Notice, error) {
	for {
		select {
		case n := <-m.c.Notices():
			if n.Kind == intents.NoticeWaiting && n.Txn == txn {
				return n, nil
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("team: %s: no notice on transaction %s: %w", m.name, txn, context.Cause(ctx))
		}
	}
}

// conflictText says what a decision's conflicts were, one phrase per path
// and transaction, naming the transactions by what they do.
func (t *teamRun) conflictText(cs []intents.Conflict) string {
	if len(cs) == 0 {
		return "no conflict named"
	}
	type on struct{ path, txn string }
	var order []on
	kinds := map[on][]string{}
	for _, c := range cs {
		k := on{c.Path, c.WithTxn}
		if _, ok := kinds[k]; !ok {
			order = append(order, k)
		}
		kinds[k] = append(kinds[k], string(c.Kind))
	}
	parts := make([]string, len(order))
	for i, k := range order {
		noun := "conflict"
		if len(kinds[k]) > 1 {
			noun = "conflicts"
		}
		parts[i] = fmt.Sprintf("%s %s on %s with %s", strings.Join(kinds[k], " and "), noun, k.path, t.nameOf(k.txn))
	}
	return strings.Join(parts, "; ")
}

// holdersOf lists the agents holding the transactions of cs.
func holdersOf(cs []intents.Conflict) string {
	var names []string
	for _, c := range cs {
		if c.WithAgent != "" && !slices.Contains(names, c.WithAgent) {
			names = append(names, c.WithAgent)
		}
	}
	if len(names) == 0 {
		return "nobody"
	}
	return strings.Join(names, " and ")
}

// short abbreviates a ULID to its random tail, enough to tell ids apart in
// a line.
func short(id string) string {
	if len(id) <= 8 {
		return id
	}
	return "…" + id[len(id)-6:]
}
