package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// CoreOptions configures a Core. The zero value works: every field
// documents its default, applied by EnsureDefaults, and OpenCore refuses
// options Validate finds wrong.
type CoreOptions struct {
	// Engine configures the decision engine; see engine.Config for its
	// defaults, but for two the Core sets: Engine.NewID defaults to ULIDs
	// with random entropy, monotonic within a millisecond, so that ids stay
	// unique across restarts even when the clock has not moved past the
	// last logged event; and Engine.Recorded, if nil, answers from the
	// log's idempotency records (with Engine.RecordedMax kept to the log).
	Engine engine.Config
	// Log configures the event log; see eventlog.Options.
	Log eventlog.Options
	// SnapshotEvery is how many events pass between snapshots of the
	// engine, which bound how much of the log a restart folds. The default
	// is 100,000.
	SnapshotEvery uint64
	// Logger receives the report of a panic contained while deciding (see
	// Core.Decide). The default discards it.
	Logger *slog.Logger

	// recordedMax says the Core keeps Engine.RecordedMax to the log.
	recordedMax bool
	// holdWrite, set by tests, may hold a batch back from the log until
	// the channel it returns yields (nil: write it at once), as a
	// replicated log does: the window between a decision and its
	// durability, made as long as a test needs.
	holdWrite func([]*intents.Event) <-chan error
}

// EnsureDefaults fills every zero field with its default, Engine's and
// Log's included. Engine.Recorded is left as it is: its default needs the
// open log, and OpenCore sets it.
func (o *CoreOptions) EnsureDefaults() {
	if o.SnapshotEvery == 0 {
		o.SnapshotEvery = 100000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Engine.NewID == nil {
		entropy := ulid.Monotonic(rand.Reader, 0)
		o.Engine.NewID = func(t time.Time) ulid.ULID {
			id, err := ulid.New(ulid.Timestamp(t), entropy)
			if err != nil { // the monotonic entropy ran out inside one millisecond
				id = ulid.MustNew(ulid.Timestamp(t), rand.Reader)
			}
			return id
		}
	}
	o.Engine.EnsureDefaults()
	o.Log.EnsureDefaults()
}

// Validate reports every problem of the options at once, Engine's and
// Log's included, each naming the field and its value. OpenCore calls
// EnsureDefaults, then Validate.
func (o *CoreOptions) Validate() error {
	return errors.Join(o.Engine.Validate(), o.Log.Validate())
}

// Core is the engine made durable. It is not safe for concurrent use: one
// goroutine submits, while any number may wait on the Group it returns.
type Core struct {
	log      *eventlog.Log
	eng      *engine.Engine
	opts     CoreOptions
	lastSnap uint64
	out      []*intents.Event
	// routes, records and fx are the routed decisions, the decisions that
	// became records and the engine's effects of the batch in hand;
	// changes, notices and live its events as the engine filed them, and
	// touched the paths they bumped; rules the board rules it put in force
	// (if rulesChanged). Commit hands them over with it. next is when the
	// engine's next timer is due, as its last call said.
	routes                 []Routed
	records                []*intents.Decision
	fx                     engine.Effects
	changes, notices, live []*intents.Event
	touched                []string
	rulesChanged           bool
	rules                  *rules.Set
	next                   time.Time
	hasNext                bool
	// via is how each intent decided in this process and still waiting
	// for its final decision came.
	via map[string]Via
	// pending is the last batch enqueued: a contained panic waits for it
	// before rebuilding the engine from the log.
	pending *eventlog.Pending
	// failed is set when a contained panic could not restore the engine:
	// the Core must not be used again, and Commit says why.
	failed error
	// replicate, when set (the active coordinator of a cluster), stores
	// each batch in the replicated log first; the local log writes it once
	// the stream has it.
	replicate Replicator
}

// OpenCore opens the event log in dir and rebuilds the engine from it: the
// latest snapshot, then every event after it.
func OpenCore(dir string, opts CoreOptions) (*Core, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("coordinator: open the core in %s: %w", dir, err)
	}
	log, err := eventlog.Open(dir, &opts.Log)
	if err != nil {
		return nil, err
	}
	if opts.Engine.Recorded == nil {
		// Duplicates older than the engine's window are answered from the
		// log's idempotency records; an id younger than every record needs
		// no lookup.
		opts.Engine.Recorded = func(id string) (*intents.Decision, bool) {
			d, err := log.Decision(id)
			return d, err == nil
		}
		if opts.Engine.RecordedMax, err = recordedMax(log); err != nil {
			log.Close()
			return nil, err
		}
		opts.recordedMax = true
	}
	eng, snapSeq, err := replay.Rebuild(log, opts.Engine, 0)
	if err != nil {
		log.Close()
		return nil, err
	}
	if log.StateSeq() < log.LastSeq() {
		// A crash lost the state entries of the log's last stretch, which
		// only a fold can make again: this one's.
		if err := log.RewriteState(allEntries(eng.State())); err != nil {
			log.Close()
			return nil, fmt.Errorf("coordinator: open the core in %s: %w", dir, err)
		}
	}
	c := &Core{log: log, eng: eng, opts: opts, lastSnap: snapSeq, via: map[string]Via{}}
	c.next, c.hasNext = eng.NextDeadline()
	return c, nil
}

// recordedMax is the engine's Config.RecordedMax for log: its greatest
// record, or, with none, "0", which sorts before every intent id.
func recordedMax(log *eventlog.Log) (string, error) {
	id, err := log.LastRecorded()
	if id == "" && err == nil {
		id = "0"
	}
	return id, err
}

// Close closes the log after the batches already enqueued.
func (c *Core) Close() error { return c.log.Close() }

// Log returns the event log, for reads.
func (c *Core) Log() *eventlog.Log { return c.log }

// Engine returns the engine; only the goroutine that submits may use it.
func (c *Core) Engine() *engine.Engine { return c.eng }

// Uncommitted returns the events decided since the last Commit, which the
// engine has folded and no log holds yet; only the goroutine that submits
// may use it, and only until its next call.
func (c *Core) Uncommitted() []*intents.Event { return c.out }

// Decide decides one intent, by via, at now. Its events join the batch
// the next Commit makes durable; nothing may be told to anyone before
// then. The events stay valid until that Commit returns.
//
// Deciding one intent never takes the process down: a panic while the
// engine decides it or folds its events is contained here. The engine is
// put back as it was before the intent (rebuilt from the log and the batch
// in hand), the panic is logged once, and the intent is recorded as
// rejected invalid, with a detail saying an internal error stopped it. Its
// id then has that decision, so a resend is answered from the record and
// is not decided again.
func (c *Core) Decide(now time.Time, in engine.Input, via Via) Decided {
	n := len(c.out)
	var r engine.Ready
	if !c.guard(n, "intent", func() { r = c.eng.Submit(now, in, c.out) }) {
		c.guard(n, "the refusal of an intent", func() { r = c.eng.Refuse(now, in, errInternalDetail, c.out) })
	}
	c.done(n, r, via, true)
	return Decided{Events: c.out[n:], ID: r.ID, Own: r.Own}
}

// Decided is what Decide decided: the call's events, the intent's id (""
// when it has none that is usable) and its own decision.
type Decided struct {
	Events []*intents.Event
	ID     string
	Own    *intents.Decision
}

// done takes the Ready of the call that appended c.out[n:] (a zero one if
// a contained panic stopped it), routes its decisions and keeps the rest
// for Commit; via, if known, is how its intent came.
func (c *Core) done(n int, r engine.Ready, via Via, known bool) {
	if r.Events != nil {
		c.out = r.Events
	}
	var own *intents.Decision
	if known {
		own = r.Own
	}
	c.route(c.out[n:], own, via)
	c.keep(r)
	c.fx.Add(r.Effects)
	if r.RulesChanged {
		c.rulesChanged, c.rules = true, r.Rules
	}
	if r.Events != nil {
		c.next, c.hasNext = r.Next, r.HasNext
	}
}

// keep keeps what of r the batch's log write and Group need: r's slices
// are the engine's until its next call.
func (c *Core) keep(r engine.Ready) {
	c.records = append(c.records, r.Records...)
	c.changes = append(c.changes, r.Changes...)
	c.notices = append(c.notices, r.Notices...)
	c.live = append(c.live, r.Live...)
	c.touched = append(c.touched, r.Touched...)
}

// errInternalDetail is the detail of an intent whose decision a contained
// panic stopped.
const errInternalDetail = "an internal error stopped the decision of this intent; it changed nothing (the coordinator's log has the report)"

// ErrInternal is returned (wrapped) by Resolve and SetRules when a
// contained panic stopped them; nothing changed.
var ErrInternal = errors.New("coordinator: internal error")

// Tick fires the timers due by now; like Decide, its events join the next
// Commit. A panic while firing them is contained as in Decide: the timers'
// events are dropped and the engine is as it was.
func (c *Core) Tick(now time.Time) []*intents.Event {
	n := len(c.out)
	var r engine.Ready
	c.guard(n, "timers", func() { r = c.eng.Tick(now, c.out) })
	c.done(n, r, 0, false)
	return c.out[n:]
}

// Resolve applies an arbiter's resolution; like Decide, its events join the
// next Commit. A refused resolution (*engine.ResolveError) changes nothing,
// and neither does one a contained panic stopped (ErrInternal).
func (c *Core) Resolve(now time.Time, res *intents.Resolution) ([]*intents.Event, error) {
	n := len(c.out)
	var r engine.Ready
	var err error
	if !c.guard(n, "a resolution", func() { r, err = c.eng.Resolve(now, res, c.out) }) {
		return nil, fmt.Errorf("%w: the resolution of %s", ErrInternal, res.Escalation)
	}
	c.done(n, r, 0, false)
	return c.out[n:], err
}

// Vote records an approver's vote (engine.Vote); it is durable once
// Commit's Pending is.
func (c *Core) Vote(now time.Time, v *intents.Vote) ([]*intents.Event, error) {
	n := len(c.out)
	var r engine.Ready
	var err error
	if !c.guard(n, "a vote", func() { r, err = c.eng.Vote(now, v, c.out) }) {
		return nil, fmt.Errorf("%w: the vote on %s", ErrInternal, v.Case)
	}
	c.done(n, r, 0, false)
	return c.out[n:], err
}

// SetRules puts a rules file in force (engine.SetRules); it is durable
// once Commit's Pending is.
func (c *Core) SetRules(now time.Time, file []byte, source string) ([]*intents.Event, error) {
	n := len(c.out)
	var r engine.Ready
	var err error
	if !c.guard(n, "a rules change", func() { r, err = c.eng.SetRules(now, file, source, c.out) }) {
		return nil, fmt.Errorf("%w: the rules change", ErrInternal)
	}
	c.done(n, r, 0, false)
	return c.out[n:], err
}

// SetShadowRules puts a rules file in force in the shadow
// (engine.SetShadowRules); it is durable once Commit's Pending is.
func (c *Core) SetShadowRules(now time.Time, file []byte, mode, source string) ([]*intents.Event, error) {
	n := len(c.out)
	var r engine.Ready
	var err error
	if !c.guard(n, "a shadow rules change", func() { r, err = c.eng.SetShadowRules(now, file, mode, source, c.out) }) {
		return nil, fmt.Errorf("%w: the shadow rules change", ErrInternal)
	}
	c.done(n, r, 0, false)
	return c.out[n:], err
}

// guard runs fn, which may only append to c.out past n. If fn panics, it
// logs the panic, drops what fn appended, puts the engine back as it was
// before fn and reports false.
func (c *Core) guard(n int, what string, fn func()) (ok bool) {
	if c.failed != nil {
		return false
	}
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		ok = false
		c.opts.Logger.Error("contained a panic; the engine is restored to its state before it",
			"while", what, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		if err := c.restore(n); err != nil {
			c.failed = fmt.Errorf("coordinator: restore the engine after a panic in %s: %w", what, err)
			c.opts.Logger.Error("the engine could not be restored; stopping", "err", c.failed)
		}
	}()
	fn()
	return true
}

// restore rebuilds the engine as it was after c.out[:n]: from the log,
// once every batch enqueued is durable, and the events of the batch in
// hand before n. The engine that panicked may have folded part of what it
// was doing, so nothing of it is kept.
func (c *Core) restore(n int) error {
	c.out = c.out[:n]
	if c.pending != nil {
		if err := c.pending.Wait(context.Background()); err != nil {
			return err
		}
	}
	// The engine that panicked may hold effects of the call: they go with
	// it. Those of the calls before it were taken already. The ids it
	// forgot since the start may have records: the log says up to which.
	cfg := c.opts.Engine
	if c.opts.recordedMax {
		var err error
		if cfg.RecordedMax, err = recordedMax(c.log); err != nil {
			return err
		}
	}
	eng, _, err := replay.Rebuild(c.log, cfg, 0)
	if err != nil {
		return err
	}
	// What the calls before n handed over (their touched paths among it)
	// is kept already; their events are folded again.
	for _, ev := range c.out {
		if err := eng.Apply(ev); err != nil {
			return fmt.Errorf("fold the batch in hand: %w", err)
		}
	}
	c.eng = eng
	return nil
}

// Commit enqueues everything decided since the last Commit as one batch —
// one synced write for many decisions — and returns it as a Group (nil if
// there was nothing), durable once its Wait returns. If it fails the engine
// has moved past the log, so the Core must not be used again: reopen it,
// and the log says what happened.
func (c *Core) Commit() (*Group, error) {
	if c.failed != nil {
		return nil, c.failed
	}
	if len(c.out) == 0 {
		return nil, nil
	}
	b := &eventlog.Batch{Events: c.out, State: entries(c.eng.State(), c.touched), Records: c.records}
	c.records, c.touched = nil, c.touched[:0]
	var ready <-chan error
	if c.replicate != nil {
		var err error
		if ready, err = c.replicate.Replicate(b.Events); err != nil {
			c.failed = err
			return nil, err
		}
	} else if c.opts.holdWrite != nil {
		ready = c.opts.holdWrite(b.Events)
	}
	p, err := c.log.EnqueueAfter(b, ready)
	g := c.group(b, p)
	c.out = c.out[:0:0] // the batch keeps the events; start a new slice
	if err != nil {
		return nil, fmt.Errorf("coordinator: log the decisions: %w", err)
	}
	c.pending = p
	if seq := c.eng.Seq(); seq-c.lastSnap >= c.opts.SnapshotEvery {
		// A snapshot must never get ahead of the log: were the events it
		// covers lost in a crash, their seqs would be reused by another
		// history. So it waits for them, once every SnapshotEvery events.
		if err := p.Wait(context.Background()); err != nil {
			return nil, fmt.Errorf("coordinator: log the decisions: %w", err)
		}
		if err := c.snapshot(); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// group hands over the batch b, enqueued as p, with the routes and effects
// of what made it, and starts afresh.
func (c *Core) group(b *eventlog.Batch, p *eventlog.Pending) *Group {
	g := &Group{Batch: b, Decisions: c.routes, Changes: c.changes, Notices: c.notices, Live: c.live,
		Cases: c.fx.Cases, Dead: c.fx.Dead, Settled: c.fx.Settled, Reclaimed: c.fx.Reclaimed, DeadTasks: c.fx.DeadTasks,
		RulesChanged: c.rulesChanged, Rules: c.rules, Next: c.next, HasNext: c.hasNext, Rev: c.eng.State().Rev(), pending: p}
	c.routes, c.fx, c.rulesChanged, c.rules = nil, engine.Effects{}, false, nil
	c.changes, c.notices, c.live = nil, nil, nil
	return g
}

// Follow folds a group of events another coordinator decided (a message
// of the replicated log) into the engine and enqueues it in the log, as
// the writer's Commit did: the same events under the same seqs, and the
// state they leave. A group the log already holds is skipped (a follower
// may be handed again the message it stopped at). It returns the group's
// pending write, nil when skipped.
func (c *Core) Follow(evs []*intents.Event) (*eventlog.Pending, error) {
	if c.failed != nil {
		return nil, c.failed
	}
	if len(evs) == 0 {
		return nil, errors.New("coordinator: follow: an empty group")
	}
	have := c.eng.Seq()
	switch first, last := evs[0].Seq, evs[len(evs)-1].Seq; {
	case last <= have:
		// Held already, if it is the same history: the events' ids say.
		mine, err := c.log.Event(last)
		if err != nil {
			return nil, fmt.Errorf("coordinator: follow: read event %d: %w", last, err)
		}
		if mine.ID != evs[len(evs)-1].ID {
			return nil, fmt.Errorf("%w: event %d differs from the replicated log's: this log holds another history", ErrAhead, last)
		}
		return nil, nil
	case first != have+1:
		return nil, fmt.Errorf("coordinator: follow: the group holds events %d–%d, and the log ends at %d", first, last, have)
	}
	r, err := c.eng.ApplyAll(evs)
	if err != nil {
		// The engine is part way through the group: it must be rebuilt
		// from the log before anything else is folded.
		c.failed = fmt.Errorf("coordinator: follow: fold %w", err)
		return nil, c.failed
	}
	c.keep(r)
	c.next, c.hasNext = r.Next, r.HasNext
	c.out = append(c.out[:0:0], evs...)
	g, err := c.Commit()
	if err != nil {
		return nil, err
	}
	return g.pending, nil
}

// NextDeadline is when the engine's next timer is due, if any: call Tick
// then.
func (c *Core) NextDeadline() (time.Time, bool) { return c.next, c.hasNext }

// Submit is Decide and Commit of one intent, as it came from the stream.
func (c *Core) Submit(now time.Time, agent string, raw []byte) ([]*intents.Event, *Group, error) {
	d := c.Decide(now, engine.Input{Agent: agent, Raw: raw}, ViaStream)
	g, err := c.Commit()
	return d.Events, g, err
}

// snapshot saves the engine as of its last event, which must be durable.
func (c *Core) snapshot() error {
	data, err := json.Marshal(c.eng.Snapshot())
	if err != nil {
		return fmt.Errorf("coordinator: encode snapshot: %w", err)
	}
	if err := c.log.SaveSnapshot(c.eng.Seq(), data); err != nil {
		return err
	}
	c.lastSnap = c.eng.Seq()
	return nil
}

// allEntries is every entry of the materialized state of t.
func allEntries(t *state.Tree) []eventlog.Entry {
	paths := t.Paths()
	out := make([]eventlog.Entry, 0, len(paths))
	for p := range paths {
		out = append(out, replay.Entry(t, p))
	}
	return out
}

// entries turns touched, the paths the batch's changes bumped (possibly
// repeated), into the materialized entries of t, the tree they leave,
// for the log.
func entries(t *state.Tree, touched []string) []eventlog.Entry {
	if len(touched) == 0 {
		return nil
	}
	slices.Sort(touched)
	touched = slices.Compact(touched)
	out := make([]eventlog.Entry, 0, len(touched))
	for _, p := range touched {
		out = append(out, replay.Entry(t, p))
	}
	return out
}
