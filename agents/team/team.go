package team

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// Config says how to run the team. Zero fields take their defaults, save
// the way to the NATS server: URL or Connect.
type Config struct {
	// URL is the NATS server the coordinator serves on.
	URL string
	// Connect, if set, is used instead of URL to open the connection of
	// each member; name is the member's agent name. Either way each member
	// has a connection of its own, which Run closes before it returns.
	Connect func(name string) (*nats.Conn, error)
	// Prefix is the coordinator's subject prefix. The default is "coagent".
	Prefix string
	// Seed seeds the scripted models: the same seed writes the same report
	// with the same count of each outcome, though which writer wins a race
	// and the order of the steps are the scheduler's.
	Seed uint64
	// Writers is how many writers there are, at least 2 (two of them
	// race for the first section and clash over the intro). There are as
	// many sections as writers. The default is 3.
	Writers int
	// Models are the models behind the roles; nil fields get the scripted
	// ones of Scripted(Seed).
	Models Models
	// Approve leaves the approval of the report's publication to a person
	// (coagent case approve, the console, an MCP host) instead of the
	// editor's program; the run waits for it. It matters only where the
	// board's rules hold report.published for approval (PublishRules).
	Approve bool
	// OnEvent, if set, is told what happens as it happens: one call at a
	// time, in order, from the members' goroutines (some from the SDK's
	// delivery goroutine, so it must not block for long).
	OnEvent func(Event)
}

// DefaultWriters is the number of writers when Config.Writers is zero.
const DefaultWriters = 3

// Title is the report's title.
const Title = "Sharing state safely in teams of LLM agents"

const draftIntro = "Draft: why agents that share one state need a coordinator."

// lease is the lease of every transaction: long enough that the SDK's
// background renewal (a third of the way through) never falls inside a
// run, whose outcomes would otherwise depend on how fast the machine is.
const lease = 5 * time.Minute

// editorWait bounds the editor's wait for the writer's transaction.
const editorWait = 30 * time.Second

func (c *Config) ensureDefaults() error {
	if c.Writers == 0 {
		c.Writers = DefaultWriters
	}
	var probs []string
	if c.Writers < 2 {
		probs = append(probs, fmt.Sprintf("%d writers: want at least 2", c.Writers))
	}
	if c.URL == "" && c.Connect == nil {
		probs = append(probs, "neither a URL nor a Connect function")
	}
	if len(probs) > 0 {
		return fmt.Errorf("team: config: %s", strings.Join(probs, "; "))
	}
	if c.Connect == nil {
		url := c.URL
		c.Connect = func(name string) (*nats.Conn, error) { return nats.Connect(url, nats.Name("coagent team "+name)) }
	}
	c.Models.fill(c.Seed)
	return nil
}

// EventKind says what an Event is about.
type EventKind string

// What the team reports as it goes.
const (
	Gathered  EventKind = "gathered"   // the researcher applied a material
	Outlined  EventKind = "outlined"   // the researcher applied the outline
	ClaimWon  EventKind = "claim_won"  // a writer's claim of a section was applied
	ClaimLost EventKind = "claim_lost" // another writer claimed the section first
	Reviewed  EventKind = "reviewed"   // the editor chose a source to demote
	Opened    EventKind = "opened"     // a transaction was granted
	Merged    EventKind = "merged"     // a grant or commit named disjoint edits it merged with
	Queued    EventKind = "queued"     // an intent waits on a transaction
	Told      EventKind = "told"       // an agent learned of a wait on its transaction, or how a clash ended for it
	Committed EventKind = "committed"  // a transaction committed, merging with nobody
	Applied   EventKind = "applied"    // an intent that waited was applied
	Escalated EventKind = "escalated"  // an intent went to the arbiters
	Settled   EventKind = "settled"    // the arbiter ruled on a case
	Approval  EventKind = "approval"   // an intent waits for a person's approval
	Approved  EventKind = "approved"   // the editor voted on the publication
	Published EventKind = "published"  // the report was published
)

// Event is one thing that happened, for a live view of the run.
type Event struct {
	At    time.Duration // since the run started
	Agent string
	Kind  EventKind
	Text  string
	// Case is the case an Approval event's intent waits in.
	Case string
}

// Result is what a run produced.
type Result struct {
	Title    string
	Intro    string
	IntroBy  string // the writer whose rewrite of the intro was kept
	Sections []Section
	// Report is the final report as text: title, intro, and each section
	// with the source it cites and that source's status. It leaves out
	// who wrote what (the claim race decides that), so the same seed
	// gives the same report.
	Report string
	// Rev is the revision the report was read at.
	Rev uint64
	// Demoted is the material the editor demoted.
	Demoted string
	// Published is the revision at which the report was published, once
	// approved.
	Published uint64
	// Told folds every decision the members were told (see Stats).
	Told Stats
	// Latencies has, for each intent submitted, the time from its
	// submission to its final decision, in the order they ended.
	Latencies []time.Duration
	// Elapsed is how long the run took.
	Elapsed time.Duration
}

// Section is a section of the final report.
type Section struct {
	ID, Title, Owner, Text string
	// Cites is the id of the material cited; Source and SourceStatus its
	// title and status.
	Cites, Source, SourceStatus string
}

// Run runs the reference scenario of SPEC §9 against a running coordinator
// and returns the report and what it took. The state must not hold a report
// or materials yet. The researcher gathers one material per section and
// outlines the report; the writers race to claim sections (the first two
// race for the first one), then write them in transactions that read the
// material they cite, all open at once so that the disjoint edits merge;
// the editor demotes a material while the writer citing it holds its
// transaction, and waits; finally two writers clash over the intro and the
// arbiter settles it. Run returns the first error any member meets; the
// decisions made until then stand.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.ensureDefaults(); err != nil {
		return nil, err
	}
	t := &teamRun{cfg: cfg, start: time.Now()}
	t.mu.labels = map[string]string{}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var members []*member
	defer func() {
		for _, m := range members {
			m.close()
		}
	}()
	join := func(name string) (*member, error) {
		m, err := t.join(ctx, name)
		if err == nil {
			members = append(members, m)
		}
		return m, err
	}
	researcher, err := join("researcher")
	if err != nil {
		return nil, err
	}
	editor, err := join("editor")
	if err != nil {
		return nil, err
	}
	writers := make([]*member, cfg.Writers)
	for i := range writers {
		if writers[i], err = join(fmt.Sprintf("writer-%d", i+1)); err != nil {
			return nil, err
		}
	}
	stopArbiter, err := t.startArbiter(ctx, cancel)
	if err != nil {
		return nil, err
	}
	defer stopArbiter()

	o, err := t.gather(ctx, researcher)
	if err != nil {
		return nil, err
	}
	if err := t.claim(ctx, writers, o); err != nil {
		return nil, err
	}
	target, why, err := t.review(ctx, editor, o)
	if err != nil {
		return nil, err
	}
	if err := t.write(ctx, writers, editor, o, target, why); err != nil {
		return nil, err
	}
	introBy, err := t.clash(ctx, writers[0], writers[1], o)
	if err != nil {
		return nil, err
	}
	res, err := t.report(ctx, editor)
	if err != nil {
		return nil, err
	}
	if res.Published, err = t.publish(ctx, writers[0], editor, res); err != nil {
		return nil, err
	}
	res.IntroBy, res.Demoted = introBy, target.ID
	t.mu.Lock()
	res.Told, res.Latencies = t.mu.told, t.mu.latencies
	t.mu.Unlock()
	res.Elapsed = time.Since(t.start)
	return res, nil
}

// teamRun is the state one Run shares among its members.
type teamRun struct {
	cfg   Config
	start time.Time

	mu struct {
		sync.Mutex
		told      Stats
		latencies []time.Duration
		// labels name transactions and the commits that landed them
		// ("writer-2's s2"), for the lines that mention them.
		labels map[string]string
	}
	emitMu sync.Mutex // serializes OnEvent
}

func (t *teamRun) emit(agent string, kind EventKind, format string, args ...any) {
	t.emitCase(agent, kind, "", format, args...)
}

// emitCase is emit for an event that names a case.
func (t *teamRun) emitCase(agent string, kind EventKind, id, format string, args ...any) {
	if t.cfg.OnEvent == nil {
		return
	}
	text := fmt.Sprintf(format, args...)
	t.emitMu.Lock()
	defer t.emitMu.Unlock()
	t.cfg.OnEvent(Event{At: time.Since(t.start), Agent: agent, Kind: kind, Text: text, Case: id})
}

func (t *teamRun) observe(d *intents.Decision) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.told.AddDecision(d)
}

func (t *teamRun) latency(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.latencies = append(t.mu.latencies, d)
}

func (t *teamRun) label(id, what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.labels[id] = what
}

// alias names a commit's intent as its transaction is named.
func (t *teamRun) alias(intent, txn string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l, ok := t.mu.labels[txn]; ok {
		t.mu.labels[intent] = l
	}
}

// nameOf names a transaction or a commit's intent for a line.
func (t *teamRun) nameOf(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l, ok := t.mu.labels[id]; ok {
		return l
	}
	return short(id)
}

func (t *teamRun) namesOf(ids []string) string {
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = t.nameOf(id)
	}
	return strings.Join(names, ", ")
}

// startArbiter runs the arbiter agent until the returned stop is called.
// If the arbiter fails, the run is cancelled with its error.
func (t *teamRun) startArbiter(ctx context.Context, cancelRun context.CancelCauseFunc) (stop func(), err error) {
	const name = "arbiter-1"
	nc, err := t.cfg.Connect(name)
	if err != nil {
		return nil, fmt.Errorf("team: connect %s: %w", name, err)
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		decide := t.arbitrate(name, agents.ModelArbiter(t.cfg.Models.Arbiter))
		if err := agents.RunArbiter(actx, nc, name, decide, agents.WithPrefix(t.cfg.Prefix)); err != nil {
			cancelRun(fmt.Errorf("team: arbiter: %w", err))
		}
	}()
	return func() {
		cancel()
		<-done
		nc.Close()
	}, nil
}

// arbitrate wraps decide to say what the arbiter ruled.
func (t *teamRun) arbitrate(name string, decide agents.Decide) agents.Decide {
	return func(ctx context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		res, err := decide(ctx, c)
		if err != nil {
			t.emit(name, Settled, "could not settle case %s yet: %v", short(c.ID), err)
			return nil, err
		}
		who := map[string]string{}
		for _, in := range c.Intents {
			if in != nil {
				who[in.ID] = in.Agent
			}
		}
		side := func(ids []string) string {
			var s []string
			for _, id := range ids {
				what := "rewrite"
				if id != c.ID {
					what = "transaction"
				}
				s = append(s, fmt.Sprintf("%s's %s", who[id], what))
			}
			return strings.Join(s, ", ")
		}
		t.emit(name, Settled, "settled case %s: %s wins, %s loses — %q", short(c.ID), side(res.Winners), side(res.Losers), res.Rationale)
		return res, nil
	}
}

// group runs functions on goroutines; the first error cancels the others'
// context and is what Wait returns.
type group struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

func newGroup(ctx context.Context) *group {
	ctx, cancel := context.WithCancelCause(ctx)
	return &group{ctx: ctx, cancel: cancel}
}

func (g *group) Go(f func(ctx context.Context) error) {
	g.wg.Go(func() {
		if err := f(g.ctx); err != nil {
			g.once.Do(func() {
				g.err = err
				g.cancel(err)
			})
		}
	})
}

func (g *group) Wait() error {
	g.wg.Wait()
	g.cancel(nil)
	return g.err
}

// barrier lets n goroutines wait until all have arrived.
type barrier struct {
	mu   sync.Mutex
	n    int
	done chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, done: make(chan struct{})} }

func (b *barrier) arrive() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n--
	if b.n == 0 {
		close(b.done)
	}
}

func (b *barrier) wait(ctx context.Context) error {
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// await waits for ch to close.
func await(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

var errNoReport = errors.New("team: the report is not in the state")
