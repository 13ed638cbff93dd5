package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/conflict"
	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/intents"
)

// Engine decides intents. Create it with New.
type Engine struct {
	cfg  Config
	comp *cond.Compiler
	eval *cond.Evaluator

	// The folded state: everything below is rebuilt by Apply.
	tree    *state.Tree
	seq     uint64 // last event applied
	fence   uint64 // last fencing token issued
	index   *conflict.Index
	waits   *conflict.Waits
	txns    map[string]*txn
	ended   *recent[intents.ReleaseCause]
	decided *recent[*intents.Decision] // the latest decision per intent id
	// forgotten is the greatest intent id that may have a record outside
	// decided: Config.RecordedMax, or an id decided forgot since.
	forgotten string
	parked    map[string]*parked
	load      map[string]*load
	timers    timers
	// The board rules in force (nil: none), the event that set them, and
	// the agents' token buckets under their rate quotas.
	rules      *rules.Set
	rulesEvent *intents.Rules
	buckets    map[string]*bucket
	// The rules decided in the shadow (see shadow.go): nil for none; the
	// mode of a divergence no rule of theirs names; the token buckets
	// under their quotas; Config.WhatIf compiled.
	shadow        *rules.Set
	shadowMode    string
	shadowBuckets map[string]*bucket
	whatif        *rules.Set

	// The task claims under leases, by task path; their ids' tasks; and,
	// for every path above a claimed task, how many claimed tasks are
	// under it (see claims.go).
	claims     map[string]*claim
	claimIDs   map[string]string
	claimAbove map[string]int

	// The shard this log is of ("": the default shard), the owner of
	// each board it released or adopted, and the event that released each
	// board it has not taken back (see shard.go).
	shard    string
	owners   map[string]string
	released map[string]uint64
	// The parts of cross-shard applies prepared here, and the cross-shard
	// applies this shard coordinates, begun and not decided, by intent id
	// (see xshard.go).
	xparts  map[string]*xpart
	xcoords map[string]*xcoord

	// late keeps the transactions that expired, for the planted bug
	// skip-fence to commit; never set otherwise.
	late map[string]*txn

	// The call in progress, and what its Ready will hand over beside its
	// events: the effects it had for the arbiters, the submitted intent's
	// id and decision (seekOwn while not yet found; received once its
	// received event was emitted), and whether it put rules in force.
	now          time.Time
	trace        string // stamped on every event emitted (see traced)
	out          []*intents.Event
	effects      Effects
	seekOwn      bool
	collect      bool                // records and the rest are gathered (a call, ApplyAll)
	records      []*intents.Decision // the decisions that took their ids
	changes      []*intents.Event
	notices      []*intents.Event
	liveEvents   []*intents.Event
	received     bool
	ownID        string
	own          *intents.Decision
	rulesChanged bool
	redecide     []string        // waiters freed by a release, to decide again
	claimed      []*claim        // the claims the change being decided started
	unclaimed    []*claim        // and those it ended
	arena        []intents.Event // where emitted events are carved from
	// probe is set while a shadow probe decides (emit is muted), and
	// shadowed holds its result until the intent's decision.
	probe    *probe
	shadowed *probe
	// xcheck is set while a part of a cross-shard apply is decided for its
	// prepare.
	xcheck *xcheck
}

// txn is a transaction in flight.
type txn struct {
	conflict.Txn
	fence   uint64
	leaseMS int64
	expires time.Time
	propose *intents.Intent
	reads   []intents.Read
	merged  []string // intents that committed beside it into its documents
	trace   string   // its propose's trace id, from its grant event
	warned  bool
	// warnN and endN number its current lease timers (see timer).
	warnN, endN uint64
}

// newTxn is the transaction g grants, before its timers are set.
func newTxn(g *intents.Grant) *txn {
	t := &txn{
		Txn:     conflict.Txn{ID: g.Txn, Agent: g.Agent, Writes: g.Propose.Writes},
		fence:   g.Fence,
		leaseMS: g.LeaseMS,
		expires: g.Expires,
		propose: g.Propose,
		reads:   g.Reads,
	}
	for _, r := range g.Reads {
		t.Reads = append(t.Reads, r.Path)
	}
	return t
}

// parked is an intent waiting on transactions in flight or on an arbiter.
type parked struct {
	in        *intents.Intent
	deadline  time.Time
	escalated bool
	conflicts []intents.Conflict
	trace     string // its trace id, from its wait or escalate event
	deadlineN uint64 // the number of its current deadline timer
	// gate is set while it is an approval case (its escalate event's),
	// votes are the verdicts on it, and approved says a quorum (or the
	// fallback) approved it: it is not gated again.
	gate     *intents.Gate
	votes    []intents.Vote
	approved bool
	// answered says an input case was answered: in holds the answer as
	// its write's value from then on.
	answered bool
	// panel is set while it is a conflict case a quorum of arbiters
	// settles; votes then holds their resolutions.
	panel *intents.Panel
}

// load counts what one agent holds, for rate limiting.
type load struct{ txns, parked int }

// maxMerged bounds merged_with.
const maxMerged = 16

// New returns an engine with an empty state.
func New(cfg Config) (*Engine, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	comp := cond.NewCompiler(cfg.Conditions)
	e := &Engine{
		cfg:     cfg,
		comp:    comp,
		eval:    comp.NewEvaluator(),
		tree:    state.New(),
		index:   conflict.New(),
		waits:   conflict.NewWaits(),
		txns:    map[string]*txn{},
		ended:   newRecent[intents.ReleaseCause](cfg.DedupWindow, nil),
		parked:  map[string]*parked{},
		load:    map[string]*load{},
		buckets: map[string]*bucket{},

		shadowBuckets: map[string]*bucket{},
		shadowMode:    intents.ModeAudit,

		claims:     map[string]*claim{},
		claimIDs:   map[string]string{},
		claimAbove: map[string]int{},
	}
	if len(cfg.WhatIf) > 0 {
		set, err := rules.CompileShadow(cfg.WhatIf, comp)
		if err != nil {
			return nil, fmt.Errorf("engine: the what-if rules: %w", err)
		}
		e.whatif, e.shadow = set, set
	}
	// A parked intent's interim decision stays until its final one.
	e.decided = newRecent[*intents.Decision](cfg.DedupWindow, func(yield func(string)) {
		for id := range e.parked {
			yield(id)
		}
	})
	e.forgotten = cfg.RecordedMax
	e.decided.forget = func(dropped map[string]*intents.Decision) {
		for id := range dropped {
			if id > e.forgotten {
				e.forgotten = id
			}
		}
	}
	return e, nil
}

// Input is one intent for Submit or Refuse, as it arrived.
type Input struct {
	// Agent is the subject's agent token the intent came on; "" when the
	// caller has already checked the sender's identity.
	Agent string
	// Raw is the intent's JSON, as it arrived; anything it holds — not
	// JSON, an unknown field, a bad path — is recorded and rejected,
	// never a panic.
	Raw []byte
	// Intent is an intent already decoded, in place of Raw: it is
	// validated again, since the caller may have built it by hand.
	Intent *intents.Intent
	// Traceparent holds the values of the traceparent header it came
	// with (intents.HeaderTraceparent), nil when it had none. The trace id
	// it names (or else the intent's meta.traceparent) is recorded on
	// every event the intent causes, at once or later (Event.Trace); one
	// that cannot be used is recorded on the intent's event
	// (Received.TraceError) and changes nothing else.
	Traceparent []string
}

// Submit decides one intent at time now. Timers due by now fire first.
// Its Ready's Events are out with the call's events appended; Own is the
// intent's decision.
func (e *Engine) Submit(now time.Time, in Input, out []*intents.Event) Ready {
	e.begin(now, out)
	e.seekOwn = true
	e.advance()
	if in.Intent != nil {
		e.submitDecoded(in.Agent, in.Intent)
		return e.end()
	}
	if in.Agent != "" && !intents.ValidSegment(in.Agent) {
		e.rejectRaw("", in.Raw, in.Traceparent, fmt.Errorf("the subject's agent token %q is not an agent name", in.Agent))
		return e.end()
	}
	decoded, err := intents.Decode(in.Raw)
	if err != nil {
		e.rejectRaw(in.Agent, in.Raw, in.Traceparent, err)
	} else {
		h := traceparentBytes(in.Traceparent)
		e.submit(in.Agent, decoded, len(in.Raw)+h, h, in.Traceparent)
	}
	return e.end()
}

// traceparentBytes is what the traceparent header's values take on the
// wire, as NATS writes each one ("name: value" and a line break).
func traceparentBytes(values []string) int {
	n := 0
	for _, v := range values {
		n += len(intents.HeaderTraceparent) + len(": \r\n") + len(v)
	}
	return n
}

// submitDecoded decides an intent the caller decoded (Input.Intent).
func (e *Engine) submitDecoded(agent string, in *intents.Intent) {
	if err := in.Validate(); err != nil {
		raw, _ := json.Marshal(in)
		e.rejectRaw(agent, raw, nil, err)
		return
	}
	size := 0
	if e.rules.LimitsSize() || e.shadow.LimitsSize() {
		// Only a size limit needs the encoding, which costs more than the
		// decision.
		raw, _ := json.Marshal(in)
		size = len(raw)
	}
	e.submit(agent, in, size, 0, nil)
}

// Refuse records in as rejected invalid with detail, without deciding it
// and without firing timers: the caller could not decide it (a panic it
// contained while the engine decided it). A duplicate of an id already
// decided gets its recorded decision, as in Submit.
func (e *Engine) Refuse(now time.Time, in Input, detail string, out []*intents.Event) Ready {
	e.begin(now, out)
	e.seekOwn = true
	raw := in.Raw
	if in.Intent != nil {
		raw, _ = json.Marshal(in.Intent)
	}
	e.rejectRaw(in.Agent, raw, in.Traceparent, errors.New(detail))
	return e.end()
}

// Tick fires the timers due by now — lease warnings and expiries, wait
// and arbiter deadlines. Its Ready's Next says when to call it again.
func (e *Engine) Tick(now time.Time, out []*intents.Event) Ready {
	e.begin(now, out)
	e.advance()
	return e.end()
}

// NextDeadline returns when the earliest pending timer is due, if any. The
// caller should call Tick then; each call's Ready says the same.
func (e *Engine) NextDeadline() (time.Time, bool) {
	for e.timers.Len() > 0 {
		if e.live(e.timers.peek()) {
			return e.timers.peek().at, true
		}
		e.timers.pop()
	}
	return time.Time{}, false
}

func (e *Engine) begin(now time.Time, out []*intents.Event) {
	// Time never runs backwards inside the engine: a clock step back on the
	// host must not un-expire a lease.
	if now.Before(e.now) {
		now = e.now
	}
	e.now = now.UTC().Round(0)
	e.trace = ""
	e.out = out
	e.redecide = e.redecide[:0]
	e.effects = Effects{}
	e.seekOwn, e.received, e.ownID, e.own = false, false, "", nil
	e.rulesChanged = false
	e.shadowed = nil
	e.gather()
}

// gather starts gathering what a call's Ready hands over beside its
// events, and the paths it touches; gathered hands it over and stops.
func (e *Engine) gather() {
	e.collect, e.records = true, e.records[:0]
	e.changes, e.notices, e.liveEvents = e.changes[:0], e.notices[:0], e.liveEvents[:0]
	e.tree.Track(true)
}

// gathered is what was gathered since gather, for a Ready.
func (e *Engine) gathered(r *Ready) {
	r.Records, r.Changes, r.Notices, r.Live = e.records, e.changes, e.notices, e.liveEvents
	r.Touched = e.tree.Touched()
	e.collect = false
	// Off between calls, so that a replay's Apply, which nobody drains,
	// does not grow the list.
	e.tree.Track(false)
}

// sort files ev, an event of a call or of ApplyAll, in the Ready's lists.
func (e *Engine) sort(ev *intents.Event) {
	switch ev.Type {
	case intents.EventChange:
		e.changes = append(e.changes, ev)
		return
	case intents.EventNotice:
		e.notices = append(e.notices, ev)
	}
	e.liveEvents = append(e.liveEvents, ev)
}

// end hands the call's Ready over.
func (e *Engine) end() Ready {
	r := Ready{Events: e.out, ID: e.ownID, Own: e.own, Effects: e.effects}
	e.gathered(&r)
	if e.rulesChanged {
		r.RulesChanged, r.Rules = true, e.rules
	}
	r.Next, r.HasNext = e.NextDeadline()
	e.out, e.effects, e.own = nil, Effects{}, nil
	return r
}

// emit records an event: it gets the next sequence number, an id and the
// time, is folded into the engine, and is appended to the call's output.
// Events are carved from chunks, one allocation for many: the caller may
// keep any of them for as long as it likes.
func (e *Engine) emit(v intents.Event) {
	if e.probe != nil {
		e.muted(&v)
		return
	}
	if len(e.arena) == cap(e.arena) {
		e.arena = make([]intents.Event, 0, 64)
	}
	e.arena = append(e.arena, v)
	ev := &e.arena[len(e.arena)-1]
	ev.Seq = e.seq + 1
	ev.ID = e.cfg.NewID(e.now)
	ev.Time = e.now
	if ev.Trace == "" {
		ev.Trace = e.trace
	}
	if err := e.apply(ev, true); err != nil {
		// The engine only emits events it can fold; failing here is a bug
		// in the engine, not bad input.
		panic(fmt.Sprintf("engine: folding its own event %d (%s): %v", ev.Seq, ev.Type, err))
	}
	e.out = append(e.out, ev)
	if e.seekOwn {
		e.noteOwn(ev)
	}
	if ev.Type == intents.EventRules {
		e.rulesChanged = true
	}
}

// noteOwn watches the events of a Submit or Refuse for the intent's own
// decision: after its received event, the first decision of its id; of an
// intent with no usable id, the first decision. Others may come between
// (the end of a transaction it preempted, a waiter it freed), and timers
// that fired before it was received have decisions of their own.
func (e *Engine) noteOwn(ev *intents.Event) {
	switch {
	case !e.received && ev.Type == intents.EventIntent:
		e.received, e.ownID = true, ev.Intent
	case e.received && ev.Decision != nil && (e.ownID == "" || ev.Decision.Intent == e.ownID):
		e.own, e.seekOwn = ev.Decision, false
	}
}

// traced makes trace the one stamped on the events emitted from now on
// (emit), and returns the one before, which the caller puts back when what
// it emits under trace is done: an event carries the trace of the intent
// whose story it belongs to, which is not always the intent being decided
// (a waiter freed, a transaction preempted or expired).
func (e *Engine) traced(trace string) (prev string) {
	prev, e.trace = e.trace, trace
	return prev
}

// Effects are what calls did beside their events that the caller must act
// on once the events are durable: the arbiter cases they opened, to send to
// the arbiters, and the cases whose deadline passed without an arbiter's
// resolution (the fallback settled them), to keep as dead letters; and the
// ids of the cases that were settled in any way (a resolution, the
// fallback, a final decision of their intent for another reason), whose
// messages leave the arbiters' queue; and the task claims whose lease
// ended, which the call reclaimed, and the tasks past their tries. They are output only: a fold of the log
// (Apply) makes none.
type Effects struct {
	Cases     []*intents.Escalation
	Dead      []*intents.Escalation
	Settled   []string
	Reclaimed []Reclaimed
	// DeadTasks are the tasks whose tries went past their rule's
	// max_retries in the call: each is a dead letter to keep.
	DeadTasks []*intents.DeadTask
}

// Reclaimed is a task claim whose lease ended unrenewed: the task went
// back, its owner was told.
type Reclaimed struct {
	Task, Owner, Lease string
	Fence              uint64
	// Reconcile are the task's effects that were pending: the task waits
	// for someone to declare them before it can be claimed again.
	Reconcile []string
}

// Seq returns the sequence number of the last event applied.
func (e *Engine) Seq() uint64 { return e.seq }

// State returns the state tree. It must only be read, and only by the
// goroutine that owns the engine.
func (e *Engine) State() *state.Tree { return e.tree }

// Decision returns the latest decision recorded for an intent id.
func (e *Engine) Decision(id string) (*intents.Decision, bool) {
	d, ok := e.decided.get(id)
	return d, ok
}

// TxnInfo describes a transaction in flight (the txn.list API).
type TxnInfo struct {
	Txn          string          `json:"txn"`
	Agent        string          `json:"agent"`
	Fence        uint64          `json:"fence"`
	Reads        []intents.Read  `json:"reads"`
	Writes       []intents.Write `json:"writes"`
	LeaseExpires time.Time       `json:"lease_expires"`
}

// Txns lists the transactions in flight, sorted by id.
func (e *Engine) Txns() []TxnInfo {
	out := make([]TxnInfo, 0, len(e.txns))
	for _, t := range e.txns {
		out = append(out, TxnInfo{Txn: t.ID, Agent: t.Agent, Fence: t.fence, Reads: t.reads,
			Writes: t.Writes, LeaseExpires: t.expires})
	}
	slices.SortFunc(out, func(a, b TxnInfo) int { return strings.Compare(a.Txn, b.Txn) })
	return out
}

// Parked returns the ids of the intents waiting or escalated, sorted.
func (e *Engine) Parked() []string {
	return slices.Sorted(maps.Keys(e.parked))
}
