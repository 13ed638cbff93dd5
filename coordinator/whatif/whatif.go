// Package whatif re-decides the intents of an event log under other board
// rules, and says which decisions would change. It feeds the recorded
// intents, resolutions and votes, in log order and at their recorded
// times, to a fresh engine, and compares each intent's decision with the
// recorded one: under the rules that were in force (Verify) every decision
// must come out as recorded, and any other is non-determinism; under new
// rules (cascade) the first divergence, the decisions that change, by rule,
// board and agent, and the final state are reported. It never invents what
// an agent would have done after another answer: later intents are
// replayed as they were sent, their transaction ids and fences mapped to
// the ones the new history gave. It reads the log and writes nothing.
package whatif

import (
	"cmp"
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// Options say what to re-decide.
type Options struct {
	// Rules is the rules file to decide under, put in force before the
	// first event; nil re-decides under the rules the log recorded, each
	// from its event on (verification).
	Rules []byte
	// From and Until bound the events replayed (0: the log's first and
	// last). The state before From is the log's fold up to it.
	From, Until uint64
	// Engine is the engine configuration the coordinator ran with (its
	// limits and timeouts); its ids are the engine's deterministic ones,
	// so that a report is the same byte for byte.
	Engine engine.Config
	// Top is how many divergences the report lists (default 10).
	Top int
	// Cascade feeds the recorded intents to an engine under Rules alone
	// (cascade mode), after a verification of the same events under the
	// recorded rules; otherwise each intent is decided under Rules
	// against the state and the transactions in flight exactly as they
	// were when it was decided (isolated mode, the default), which
	// verifies as it goes.
	Cascade bool
}

// Report is what a run found.
type Report struct {
	// Mode is "verify" (the recorded rules), "isolated" or "cascade"
	// (new rules).
	Mode string `json:"mode"`
	// From and Until are the events replayed; Events and Intents count
	// them and the intents among them.
	From    uint64 `json:"from"`
	Until   uint64 `json:"until"`
	Events  int    `json:"events"`
	Intents int    `json:"intents"`
	// FirstDivergence is the sequence of the recorded decision where the
	// new history first differs, 0 when none does.
	FirstDivergence uint64 `json:"first_divergence,omitempty"`
	// Changed counts the intents whose decision changes: their final
	// one in cascade mode, the one made when they were received in
	// isolated mode.
	Changed int `json:"changed"`
	// Matrix counts intents by their recorded and their new decision
	// ("applied", "rejected:conflict", …; "error" when deciding under the
	// new rules failed).
	Matrix map[string]map[string]int `json:"matrix"`
	// ByRule, ByBoard and ByAgent count the changed intents by the rule or
	// invariant the new or recorded decision names, by the first board
	// they write and by agent.
	ByRule  map[string]int `json:"by_rule"`
	ByBoard map[string]int `json:"by_board"`
	ByAgent map[string]int `json:"by_agent"`
	// Top are the first changed intents, in log order.
	Top []Divergence `json:"top"`
	// RecordedHash and NewHash are the sha256 of the state the log folds
	// to and of the one the new history leaves; PathsDiffer the paths
	// whose values differ (the first 100).
	RecordedHash string   `json:"recorded_sha256"`
	NewHash      string   `json:"new_sha256"`
	PathsDiffer  []string `json:"paths_differ,omitempty"`
	// Broken are the new rules' invariants the recorded history breaks:
	// checked after each recorded change that touches their paths, as a
	// commit would check them.
	Broken []Broken `json:"invariants_broken,omitempty"`
}

// Broken is an invariant of the new rules the recorded history breaks:
// the recorded change after which it first did not hold, what it saw
// then, and after how many recorded changes it did not hold.
type Broken struct {
	Invariant string `json:"invariant"`
	First     uint64 `json:"first"`
	Detail    string `json:"detail"`
	Changes   int    `json:"changes"`
}

// Divergence is one intent whose decision changes.
type Divergence struct {
	Seq      uint64   `json:"seq"` // its recorded final decision's
	Intent   string   `json:"intent"`
	Agent    string   `json:"agent"`
	Recorded Decision `json:"recorded"`
	New      Decision `json:"new"`
	Rule     string   `json:"rule,omitempty"`
	Story    string   `json:"story"` // the command that shows its story
	idx      int      // the order the intent was received in
}

// Decision is a decision as the report shows it.
type Decision struct {
	Outcome intents.Outcome `json:"outcome"`
	Reason  intents.Reason  `json:"reason,omitempty"`
	Detail  string          `json:"detail,omitempty"`
}

// Key is how the report counts a decision: its outcome, and its reason
// after a colon ("rejected:conflict"); "none" for no decision.
func (d Decision) Key() string {
	if d.Outcome == "" {
		return "none"
	}
	if d.Reason != "" {
		return string(d.Outcome) + ":" + string(d.Reason)
	}
	return string(d.Outcome)
}

// ErrNondeterministic is wrapped by the error of a verification whose
// re-decided history differs from the recorded one.
var ErrNondeterministic = errors.New("whatif: the log's decisions do not come out as recorded")

// Run re-decides the log's intents as Options say and reports. A
// verification (Options.Rules nil) that changes a decision returns the
// report and an error wrapping ErrNondeterministic naming the first
// mismatch.
func Run(log *eventlog.Log, opts Options) (*Report, error) {
	return verifiedFirst(opts, func(opts Options) (*Report, error) { return runLog(log, opts) })
}

// verifiedFirst runs a cascade after a verification of the same events,
// which must pass: a cascade does not check, as it goes, that the
// recorded rules give the recorded decisions (isolated mode does).
func verifiedFirst(opts Options, run func(Options) (*Report, error)) (*Report, error) {
	if opts.Cascade && opts.Rules != nil {
		v := opts
		v.Rules, v.Cascade = nil, false
		if rep, err := run(v); err != nil {
			return rep, err
		}
	}
	return run(opts)
}

func runLog(log *eventlog.Log, opts Options) (*Report, error) {
	from, until := cmp.Or(opts.From, max(log.FirstSeq(), 1)), log.LastSeq()
	var last uint64
	return run(opts, source{
		from: from, until: cmp.Or(opts.Until, until),
		before: func(cfg engine.Config) (*engine.Engine, error) {
			if from <= 1 {
				return engine.New(cfg)
			}
			eng, _, err := replay.Rebuild(log, cfg, from-1)
			return eng, err
		},
		scan: func(fn func(*intents.Event) error) error {
			return log.Scan(from, until, func(ev *intents.Event) error {
				if err := fn(ev); err != nil {
					return err
				}
				last = ev.Seq
				return nil
			})
		},
		// The recorded history's state: the log's fold to the last event
		// decided again, from its latest snapshot.
		recorded: func(cfg engine.Config, until uint64) (*engine.Engine, error) {
			eng, _, err := replay.Rebuild(log, cfg, until)
			return eng, err
		},
		last: func() uint64 { return last },
	})
}

// errUntil stops a scan at the first event past Options.Until that the
// engine does not emit itself: the call of Until's event is read whole.
var errUntil = errors.New("whatif: past until")

// Pager reads one page of a running coordinator's log (a log.query of
// every event): the events from seq from on, in order, and the seq to go
// on from, 0 at the end.
type Pager func(from uint64) (events []*intents.Event, next uint64, err error)

// RunRemote is Run over the log of a running coordinator, read a page at
// a time through page: the events from the first, which must be 1 (a
// compacted log's state before its first event is in a snapshot only the
// coordinator's directory holds), to Options.Until or the last one. The
// events must all be there: a page that leaves some out (those a reader
// may not see, under --auth) is an error.
func RunRemote(page Pager, opts Options) (*Report, error) {
	return verifiedFirst(opts, func(opts Options) (*Report, error) { return runRemote(page, opts) })
}

func runRemote(page Pager, opts Options) (*Report, error) {
	from, until := max(opts.From, 1), opts.Until
	var pre, rec *engine.Engine // the fold before from, and the recorded one beside
	var last uint64
	scan := func(fn func(*intents.Event) error) error {
		next := uint64(1)
		for {
			evs, more, err := page(next)
			if err != nil {
				return fmt.Errorf("whatif: reading the log from event %d: %w", next, err)
			}
			for _, ev := range evs {
				switch {
				case ev.Seq != last+1 && last == 0:
					return fmt.Errorf("whatif: the log starts at event %d, compacted: run whatif --data on a copy of the coordinator's directory", ev.Seq)
				case ev.Seq != last+1:
					return fmt.Errorf("whatif: the log's answer skips from event %d to %d: the reader may not see every event (ask as an observer or an admin)", last, ev.Seq)
				case ev.Seq > until && until != 0 && input(ev.Type):
					return errUntil
				}
				last = ev.Seq
				if err := rec.Apply(ev); err != nil {
					return fmt.Errorf("whatif: the recorded state at event %d: %w", ev.Seq, err)
				}
				if ev.Seq < from {
					if err := pre.Apply(ev); err != nil {
						return fmt.Errorf("whatif: the state before event %d: %w", from, err)
					}
					continue
				}
				if err := fn(ev); err != nil {
					return err
				}
			}
			if more == 0 || len(evs) == 0 {
				return nil
			}
			next = more
		}
	}
	return run(opts, source{
		from: from, until: until,
		before: func(cfg engine.Config) (*engine.Engine, error) {
			var err error
			if pre, err = engine.New(cfg); err != nil {
				return nil, err
			}
			if rec, err = engine.New(cfg); err != nil {
				return nil, err
			}
			return pre, nil
		},
		scan:   scan,
		folded: func() *engine.Engine { return rec },
		last:   func() uint64 { return last },
	})
}

// source is where run reads the log: the events from and until (0: the
// last), the engine with the state before from, and the last event read.
// The recorded history's state is folded, when the source folds each event
// into it before handing it over (a remote log), or else recorded's, at
// the end.
type source struct {
	from, until uint64
	before      func(engine.Config) (*engine.Engine, error)
	scan        func(func(*intents.Event) error) error
	folded      func() *engine.Engine
	recorded    func(engine.Config, uint64) (*engine.Engine, error)
	last        func() uint64
}

func run(opts Options, src source) (*Report, error) {
	if opts.Top == 0 {
		opts.Top = 10
	}
	r := &runner{opts: opts, rep: &Report{Mode: "cascade", From: src.from, Until: src.until, Matrix: map[string]map[string]int{},
		ByRule: map[string]int{}, ByBoard: map[string]int{}, ByAgent: map[string]int{}},
		live: map[string]*track{}, counted: map[ulid.ULID]struct{}{}, recTxn: map[string]grantRef{}, recFence: map[uint64]string{}, newGrant: map[string]decided{}}
	cfg := opts.Engine
	switch {
	case opts.Rules == nil:
		r.rep.Mode = "verify"
	case !opts.Cascade:
		// The recorded rules decide, which verifies the log as it goes;
		// the new ones decide each intent in the shadow.
		r.rep.Mode, r.isolated, cfg.WhatIf = "isolated", true, opts.Rules
	}
	// Both engines start from the log's state before from: the recorded
	// one folds the events as they are, the new one decides them.
	cfg.NewID = nil // the engine's deterministic ids
	var err error
	if r.eng, err = src.before(cfg); err != nil {
		return nil, fmt.Errorf("whatif: the state before event %d: %w", src.from, err)
	}
	// The new rules' invariants are checked against the recorded history,
	// folded beside.
	if err := r.invariants(cfg); err != nil {
		return nil, err
	}
	var beside *engine.Engine
	switch {
	case src.folded != nil:
		beside = src.folded()
	case r.inv != nil:
		if beside, err = src.before(cfg); err != nil {
			return nil, fmt.Errorf("whatif: the state before event %d: %w", src.from, err)
		}
	}
	started := false
	err = src.scan(func(ev *intents.Event) error {
		if src.until != 0 && ev.Seq > src.until && input(ev.Type) {
			return errUntil
		}
		if beside != nil && src.folded == nil {
			if err := beside.Apply(ev); err != nil {
				return fmt.Errorf("whatif: the recorded state at event %d: %w", ev.Seq, err)
			}
		}
		if r.inv != nil && started && ev.Change != nil {
			r.check(ev, beside.State())
		}
		if !started && !input(ev.Type) {
			// The rest of a call that began before from: what the log's
			// writers did (an intent, a resolution, a vote, a rules change)
			// is decided again from the first such event on, and the
			// events of the call before it are the state it starts from.
			if err := r.eng.Apply(ev); err != nil {
				return fmt.Errorf("whatif: the state before event %d: %w", ev.Seq, err)
			}
			return nil
		}
		if !started {
			started, r.rep.From = true, ev.Seq
			// The intents waiting or held when it starts are decided
			// again when what they wait on ends.
			for _, id := range r.eng.Parked() {
				r.register(id, "", "-")
			}
			if opts.Rules != nil && !r.isolated {
				if _, err := r.eng.SetRules(ev.Time, opts.Rules, "whatif", nil); err != nil {
					return fmt.Errorf("whatif: the new rules: %w", err)
				}
			}
		}
		return r.event(ev)
	})
	if err != nil && !errors.Is(err, errUntil) {
		return nil, err
	}
	if src.last != nil {
		r.rep.Until = src.last()
	}
	if beside != nil {
		r.rec = beside
	} else if r.rec, err = src.recorded(cfg, r.rep.Until); err != nil {
		return nil, fmt.Errorf("whatif: the recorded state at event %d: %w", r.rep.Until, err)
	}
	for _, name := range r.brokenOrder {
		r.rep.Broken = append(r.rep.Broken, *r.broken[name])
	}
	r.finish()
	r.name()
	if r.isolated && r.nondet != nil {
		d := r.nondet
		return r.rep, fmt.Errorf("%w: intent %s (event %d) was %s as recorded, %s re-decided under the recorded rules: %s", ErrNondeterministic,
			d.Intent, d.Seq, d.Recorded.Key(), d.New.Key(), cmp.Or(d.New.Detail, d.Recorded.Detail))
	}
	if r.rep.Mode == "verify" && r.rep.Changed > 0 {
		d := r.rep.Top[0]
		return r.rep, fmt.Errorf("%w: intent %s (event %d) was %s as recorded, %s re-decided: %s", ErrNondeterministic,
			d.Intent, d.Seq, d.Recorded.Key(), d.New.Key(), cmp.Or(d.New.Detail, d.Recorded.Detail))
	}
	return r.rep, nil
}

// input says an event of type t records what the log's writers did, which
// whatif feeds to the engine, rather than what the engine did about it.
func input(t intents.EventType) bool {
	switch t {
	case intents.EventIntent, intents.EventResolve, intents.EventVote, intents.EventRules:
		return true
	}
	return false
}

// decided is what the comparison keeps of a decision.
type decided struct {
	outcome intents.Outcome
	reason  intents.Reason
	detail  string
	txn     string
	fence   uint64
}

func keep(d *intents.Decision) decided {
	return decided{outcome: intents.Outcome(strings.Clone(string(d.Outcome))), reason: intents.Reason(strings.Clone(string(d.Reason))),
		detail: strings.Clone(d.Detail), txn: strings.Clone(d.Txn), fence: d.Fence}
}

// track is what the comparison keeps of one intent until both its
// recorded and its re-decided decision are final: it is then counted and
// dropped, so that what a run holds is the intents in flight, not the
// log's.
type track struct {
	idx          int // in the order the intents were received
	agent, board string
	// recorded and decided are its latest decisions, as recorded and as
	// re-decided, copied out of the events (a decoded event's strings
	// keep its whole record); recSeq the sequence of the recorded one.
	recorded, decided decided
	recSeq            uint64
	// In isolated mode: its first recorded decision and its event, and
	// how the new rules would have decided it, when they differ.
	first    *decided
	firstSeq uint64
	shadow   *intents.Shadow
}

// grantRef is a recorded grant (or claim): the intent it answered and
// the fence it gave.
type grantRef struct {
	owner string
	fence uint64
}

type runner struct {
	opts     Options
	rep      *Report
	rec, eng *engine.Engine
	last     *intents.Event
	isolated bool
	// live are the intents not yet counted, counted those that were (a
	// resend of one is not another); n numbers them as received.
	live    map[string]*track
	counted map[ulid.ULID]struct{}
	n       int
	// recTxn and recFence name the intent whose recorded grant (or
	// claim) gave a transaction id or a fence, and newGrant the
	// transaction id and fence its re-decided grant gave, so that a
	// later intent naming the recorded ones is sent with the new ones.
	// They go when the recorded transaction ends.
	recTxn   map[string]grantRef
	recFence map[uint64]string
	newGrant map[string]decided
	// inv are the new rules, when they have invariants, and eval what
	// checks them against the recorded history; broken the invariants
	// that history broke, in the order it first broke them.
	inv         *rules.Set
	eval        *cond.Evaluator
	broken      map[string]*Broken
	brokenOrder []string
	// top holds the first changed intents in the order received (a heap
	// on idx, the greatest on top); nondet the first intent whose
	// decision under the recorded rules is not the recorded one.
	top    divergences
	nondet *Divergence
	ndIdx  int
}

// register starts tracking intent id of agent, writing board.
func (r *runner) register(id, agent, board string) {
	if _, ok := r.live[id]; ok || id == "" {
		return
	}
	if u, err := ulid.ParseStrict(id); err == nil {
		if _, ok := r.counted[u]; ok {
			return
		}
	}
	r.n++
	r.live[strings.Clone(id)] = &track{idx: r.n, agent: strings.Clone(agent), board: strings.Clone(board)}
}

// event replays what one recorded event says the log's writers did — an
// intent, a resolution, a vote, a rules change under verification — to the
// new engine, and notes the recorded decisions.
func (r *runner) event(ev *intents.Event) error {
	r.rep.Events++
	r.last = ev
	switch ev.Type {
	case intents.EventDecision:
		d := ev.Decision
		if d.Txn != "" && (d.Outcome == intents.OutcomeGranted || d.Outcome == intents.OutcomeApplied && d.Fence != 0) {
			id := strings.Clone(d.Intent)
			r.recTxn[strings.Clone(d.Txn)] = grantRef{owner: id, fence: d.Fence}
			r.recFence[d.Fence] = id
		}
		if t := r.live[d.Intent]; t != nil && !d.Duplicate {
			if t.agent == "" {
				t.agent = strings.Clone(d.Agent)
			}
			t.recorded, t.recSeq = keep(d), ev.Seq
			if r.isolated && t.first == nil {
				first := t.recorded
				t.first, t.firstSeq = &first, ev.Seq
			}
			r.settle(d.Intent, t)
		}
		return nil
	case intents.EventRelease, intents.EventExpire:
		// The recorded transaction ended: nothing later names it.
		if g, ok := r.recTxn[ev.Release.Txn]; ok {
			delete(r.recTxn, ev.Release.Txn)
			delete(r.recFence, g.fence)
			delete(r.newGrant, g.owner)
		}
		return nil
	case intents.EventRules:
		if r.opts.Rules == nil || r.isolated {
			_, err := r.eng.SetRules(ev.Time, ev.Rules.File, ev.Rules.Source, nil)
			if err != nil {
				return fmt.Errorf("whatif: the rules of event %d: %w", ev.Seq, err)
			}
		}
		return nil
	case intents.EventResolve:
		res := *ev.Resolution
		res.Replacement = r.mapped(res.Replacement)
		ready, _ := r.eng.Resolve(ev.Time, &res, nil)
		r.collect(ready.Events)
		return nil
	case intents.EventVote:
		if ev.Vote.Verdict == intents.VerdictResolve && ev.Vote.Resolution != nil {
			res := *ev.Vote.Resolution
			res.Replacement = r.mapped(res.Replacement)
			ready, _ := r.eng.Resolve(ev.Time, &res, nil)
			r.collect(ready.Events)
			return nil
		}
		ready, _ := r.eng.Vote(ev.Time, ev.Vote, nil)
		r.collect(ready.Events)
		return nil
	case intents.EventIntent:
	default:
		return nil
	}
	rv := ev.Received
	in := engine.Input{Agent: ev.Agent, Raw: rv.Raw}
	if rv.Intent != nil {
		in.Raw, in.Intent = nil, r.mapped(rv.Intent)
		if ev.Trace != "" {
			in.Traceparent = []string{"00-" + ev.Trace + "-0000000000000001-01"}
		}
		r.register(rv.Intent.ID, rv.Intent.Agent, board(rv.Intent))
		r.rep.Intents++
	}
	ready := r.eng.Submit(ev.Time, in, nil)
	r.collect(ready.Events)
	return nil
}

// collect notes the re-decided decisions among evs.
func (r *runner) collect(evs []*intents.Event) {
	for _, e := range evs {
		if d := e.Decision; d != nil && !d.Duplicate {
			if d.Txn != "" && (d.Outcome == intents.OutcomeGranted || d.Outcome == intents.OutcomeApplied && d.Fence != 0) {
				r.newGrant[strings.Clone(d.Intent)] = decided{txn: strings.Clone(d.Txn), fence: d.Fence}
			}
			if t := r.live[d.Intent]; t != nil {
				t.decided = keep(d)
				r.settle(d.Intent, t)
			}
		}
		if sh := e.Shadow; sh != nil && r.isolated {
			if t := r.live[e.Intent]; t != nil && t.shadow == nil {
				cp := *sh
				cp.Detail, cp.Rule, cp.Decided = strings.Clone(sh.Detail), strings.Clone(sh.Rule), strings.Clone(sh.Decided)
				t.shadow = &cp
			}
		}
	}
}

// settle counts intent id once both its decisions are final.
func (r *runner) settle(id string, t *track) {
	if !t.recorded.outcome.Final() || t.recorded.outcome == "" || !t.decided.outcome.Final() || t.decided.outcome == "" {
		return
	}
	r.count(id, t)
	delete(r.live, id)
	if u, err := ulid.ParseStrict(id); err == nil {
		r.counted[u] = struct{}{}
	}
}

// mapped is in with the transaction id and fence its recorded grant gave
// replaced by the ones the re-decided one gave, when it names them.
func (r *runner) mapped(in *intents.Intent) *intents.Intent {
	if in == nil {
		return nil
	}
	cp := *in
	if g, ok := r.recTxn[in.Txn]; ok && in.Txn != "" {
		if d, ok := r.newGrant[g.owner]; ok && d.txn != "" {
			cp.Txn = d.txn
			if in.Fence != 0 && in.Fence == g.fence {
				cp.Fence = d.fence
			}
		}
	} else if owner, ok := r.recFence[in.Fence]; ok && in.Fence != 0 {
		if d, ok := r.newGrant[owner]; ok && d.fence != 0 {
			cp.Fence = d.fence
		}
	}
	return &cp
}

// finish fires the timers due by the last event, counts the intents
// still in flight, in the order received, and reports.
func (r *runner) finish() {
	if r.last != nil {
		r.collect(r.eng.Tick(r.last.Time, nil).Events)
	}
	left := slices.SortedFunc(maps.Keys(r.live), func(a, b string) int { return cmp.Compare(r.live[a].idx, r.live[b].idx) })
	for _, id := range left {
		if t := r.live[id]; t.recorded.outcome != "" || t.decided.outcome != "" {
			r.count(id, t) // not a resend of an intent counted already
		}
	}
	r.live = nil
	rep := r.rep
	rep.Top = make([]Divergence, len(r.top))
	for i := len(r.top) - 1; i >= 0; i-- {
		rep.Top[i] = heap.Pop(&r.top).(Divergence)
	}
	rep.RecordedHash, rep.NewHash = replay.Hash(r.rec.State()), replay.Hash(r.eng.State())
	if r.isolated {
		// The history is the recorded one.
		rep.NewHash = rep.RecordedHash
		return
	}
	if rep.RecordedHash != rep.NewHash {
		rep.PathsDiffer = differing(r.rec.State(), r.eng.State(), 100)
	}
}

// count counts one intent: in the matrix, and as a divergence when its
// decision changes.
func (r *runner) count(id string, t *track) {
	rep := r.rep
	rd, nd := view(t.recorded), view(t.decided)
	seq, rule := t.recSeq, ""
	if r.isolated {
		if rd.Key() != nd.Key() && (r.nondet == nil || t.idx < r.ndIdx) {
			r.nondet, r.ndIdx = &Divergence{Seq: t.recSeq, Intent: id, Agent: t.agent, Recorded: rd, New: nd}, t.idx
		}
		rd, nd, seq = Decision{}, Decision{}, t.firstSeq
		if t.first != nil {
			rd, nd = view(*t.first), view(*t.first)
		}
		if sh := t.shadow; sh != nil {
			nd, rule = Decision{Outcome: sh.WouldBe, Reason: sh.Reason, Detail: sh.Detail}, sh.Rule
			if sh.Kind == intents.ShadowError {
				nd = Decision{Outcome: intents.ShadowError, Detail: sh.Detail}
			}
		}
	} else {
		if rule = rules.Ref(nd.Detail); rule == "" {
			rule = rules.Ref(rd.Detail)
		}
	}
	if rep.Matrix[rd.Key()] == nil {
		rep.Matrix[rd.Key()] = map[string]int{}
	}
	rep.Matrix[rd.Key()][nd.Key()]++
	if rd.Key() == nd.Key() && (!r.isolated || t.shadow == nil) {
		return
	}
	rep.Changed++
	if rep.FirstDivergence == 0 || seq != 0 && seq < rep.FirstDivergence {
		rep.FirstDivergence = seq
	}
	if rule != "" {
		rep.ByRule[rule]++
	}
	rep.ByBoard[t.board]++
	rep.ByAgent[t.agent]++
	if r.opts.Top > 0 {
		heap.Push(&r.top, Divergence{Seq: seq, Intent: id, Agent: t.agent, Recorded: rd, New: nd, Rule: rule,
			Story: "coagent log --intent " + id, idx: t.idx})
		if r.top.Len() > r.opts.Top {
			heap.Pop(&r.top)
		}
	}
}

// divergences is a heap of divergences, the last received on top.
type divergences []Divergence

func (h divergences) Len() int           { return len(h) }
func (h divergences) Less(i, j int) bool { return h[i].idx > h[j].idx }
func (h divergences) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *divergences) Push(x any)        { *h = append(*h, x.(Divergence)) }
func (h *divergences) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// differing returns the paths whose values differ between a and b, at
// most limit of them, sorted: one that exists in only one of them (and
// none under it), or a leaf whose value differs; an object that differs
// only below is not named itself.
func differing(a, b *state.Tree, limit int) []string {
	pa, pb := a.Paths(), b.Paths()
	all := slices.Sorted(maps.Keys(pa))
	for p := range pb {
		if _, ok := pa[p]; !ok {
			all = append(all, p)
		}
	}
	slices.Sort(all)
	var out []string
	for _, p := range all {
		if len(out) == limit {
			break
		}
		if n := len(out); n > 0 && strings.HasPrefix(p, out[n-1]+".") {
			continue // under a path named already
		}
		va, oka := a.Get(p)
		vb, okb := b.Get(p)
		_, obja := va.(map[string]any)
		_, objb := vb.(map[string]any)
		switch {
		case oka != okb:
			out = append(out, p)
		case obja && objb:
		case fmt.Sprint(va) != fmt.Sprint(vb):
			out = append(out, p)
		}
	}
	return out
}

func view(d decided) Decision {
	return Decision{Outcome: d.outcome, Reason: d.reason, Detail: d.detail}
}

// board is the first segment of the first path an intent writes.
func board(in *intents.Intent) string {
	if len(in.Writes) == 0 {
		return "-"
	}
	b, _, _ := strings.Cut(in.Writes[0].Path, ".")
	return b
}

// invariants compiles the new rules when they have invariants: the
// history is checked against them.
func (r *runner) invariants(cfg engine.Config) error {
	var f rules.File
	if r.opts.Rules == nil || json.Unmarshal(r.opts.Rules, &f) != nil || len(f.Invariants) == 0 {
		return nil
	}
	comp := cond.NewCompiler(cfg.Conditions)
	set, err := rules.CompileShadow(r.opts.Rules, comp)
	if err != nil {
		return fmt.Errorf("whatif: the new rules: %w", err)
	}
	r.inv, r.eval, r.broken = set, comp.NewEvaluator(), map[string]*Broken{}
	return nil
}

// check checks the new rules' invariants that ev's change touches against
// st, the recorded state after it.
func (r *runner) check(ev *intents.Event, st *state.Tree) {
	paths := make([]string, len(ev.Change.Writes))
	for i, w := range ev.Change.Writes {
		paths[i] = w.Path
	}
	for _, c := range r.inv.Invariants(paths) {
		r.eval.Begin(ev.Time)
		ok, err := r.eval.Eval(c.Cond, st, nil, &intents.Intent{Agent: ev.Agent})
		if ok && err == nil {
			continue
		}
		b := r.broken[c.Name]
		if b == nil {
			detail := "is false"
			if err != nil {
				detail = "failed: " + err.Error()
			}
			var saw []string
			for _, p := range c.Cond.State {
				if len(saw) == 8 {
					saw = append(saw, fmt.Sprintf("and %d more", len(c.Cond.State)-8))
					break
				}
				if v, ok := st.Get(p); ok {
					saw = append(saw, p+" = "+state.FormatValue(v))
				} else {
					saw = append(saw, p+" absent")
				}
			}
			b = &Broken{Invariant: c.Name, First: ev.Seq, Detail: fmt.Sprintf("invariant %s `%s` %s after event %d (%s by %s); it saw %s",
				c.Name, c.Cond.Source, detail, ev.Seq, strings.Join(paths, ", "), cmp.Or(ev.Agent, "no agent"), strings.Join(saw, ", "))}
			r.broken[c.Name] = b
			r.brokenOrder = append(r.brokenOrder, c.Name)
		}
		b.Changes++
	}
}

// name gives each rule the report names its pattern, from the new rules
// file: "rules[2] (docs.**)".
func (r *runner) name() {
	var f rules.File
	if r.opts.Rules == nil || json.Unmarshal(r.opts.Rules, &f) != nil {
		return
	}
	named := func(ref string) string {
		var i int
		if n, err := fmt.Sscanf(ref, "rules[%d]", &i); err == nil && n == 1 && i >= 0 && i < len(f.Rules) {
			return fmt.Sprintf("%s (%s)", ref, f.Rules[i].Pattern)
		}
		return ref
	}
	byRule := map[string]int{}
	for k, n := range r.rep.ByRule {
		byRule[named(k)] += n
	}
	r.rep.ByRule = byRule
	for i := range r.rep.Top {
		r.rep.Top[i].Rule = named(r.rep.Top[i].Rule)
	}
}
