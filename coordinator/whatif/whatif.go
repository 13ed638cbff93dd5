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
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
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
	// (cascade mode); otherwise each intent is decided under Rules
	// against the state and the transactions in flight exactly as they
	// were when it was decided (isolated mode, the default).
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
		from: from, until: opts.Until, remote: true,
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
		scan:     scan,
		recorded: func(engine.Config, uint64) (*engine.Engine, error) { return rec, nil },
		last:     func() uint64 { return last },
	})
}

// source is where run reads the log: the events from and until (0: the
// last), the engine with the state before from, and the one with the
// recorded state at the end. last, when set, tells the last event read.
type source struct {
	from, until uint64
	remote      bool
	before      func(engine.Config) (*engine.Engine, error)
	scan        func(func(*intents.Event) error) error
	recorded    func(engine.Config, uint64) (*engine.Engine, error)
	last        func() uint64
}

func run(opts Options, src source) (*Report, error) {
	if opts.Top == 0 {
		opts.Top = 10
	}
	r := &runner{opts: opts, rep: &Report{Mode: "cascade", From: src.from, Until: src.until, Matrix: map[string]map[string]int{},
		ByRule: map[string]int{}, ByBoard: map[string]int{}, ByAgent: map[string]int{}},
		recorded: map[string]decided{}, recSeq: map[string]uint64{}, decided: map[string]decided{},
		agents: map[string]string{}, boards: map[string]string{}, order: nil,
		recTxn: map[string]string{}, recFence: map[uint64]string{}}
	cfg := opts.Engine
	switch {
	case opts.Rules == nil:
		r.rep.Mode = "verify"
	case !opts.Cascade:
		// The recorded rules decide, which verifies the log as it goes;
		// the new ones decide each intent in the shadow.
		r.rep.Mode, r.isolated, cfg.WhatIf = "isolated", true, opts.Rules
		r.first, r.shadows = map[string]decided{}, map[string]*intents.Shadow{}
	}
	// Both engines start from the log's state before from: the recorded
	// one folds the events as they are, the new one decides them.
	cfg.NewID = nil // the engine's deterministic ids
	var err error
	if r.eng, err = src.before(cfg); err != nil {
		return nil, fmt.Errorf("whatif: the state before event %d: %w", src.from, err)
	}
	started := false
	err = src.scan(func(ev *intents.Event) error {
		if src.until != 0 && ev.Seq > src.until && input(ev.Type) {
			return errUntil
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
	if r.rec, err = src.recorded(cfg, r.rep.Until); err != nil {
		return nil, fmt.Errorf("whatif: the recorded state at event %d: %w", r.rep.Until, err)
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

type runner struct {
	opts     Options
	rep      *Report
	rec, eng *engine.Engine
	last     *intents.Event
	// recorded and decided are each intent's latest decision, as recorded
	// and as re-decided, copied out of the events (a decoded event's
	// strings keep its whole record); recSeq the sequence of the recorded
	// one; order the intents in the order they were received.
	recorded, decided map[string]decided
	recSeq            map[string]uint64
	order             []string
	agents, boards    map[string]string
	// recTxn and recFence name the intent whose recorded grant (or
	// claim) gave a transaction id or a fence, so that a later intent
	// naming them is sent with the ones its re-decided grant gave.
	recTxn   map[string]string
	recFence map[uint64]string
	// In isolated mode: first is each intent's first recorded decision
	// and firstSeq its event, shadows how the new rules would have
	// decided it when they differ, and nondet the first intent whose
	// decision under the recorded rules is not the recorded one.
	isolated bool
	first    map[string]decided
	firstSeq map[string]uint64
	shadows  map[string]*intents.Shadow
	nondet   *Divergence
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
		if _, ok := r.agents[d.Intent]; !ok && !d.Duplicate && d.Intent != "" {
			// Received before the first event decided again (a waiter, a
			// case): decided again all the same, once what it waited on
			// ends.
			id := strings.Clone(d.Intent)
			r.agents[id], r.boards[id] = strings.Clone(d.Agent), "-"
			r.order = append(r.order, id)
		}
		if _, ok := r.agents[d.Intent]; ok && !d.Duplicate {
			r.recorded[d.Intent], r.recSeq[d.Intent] = keep(d), ev.Seq
			if _, seen := r.first[d.Intent]; r.isolated && !seen {
				r.first[d.Intent] = r.recorded[d.Intent]
				if r.firstSeq == nil {
					r.firstSeq = map[string]uint64{}
				}
				r.firstSeq[d.Intent] = ev.Seq
			}
		}
		if d.Txn != "" && (d.Outcome == intents.OutcomeGranted || d.Outcome == intents.OutcomeApplied && d.Fence != 0) {
			id := strings.Clone(d.Intent)
			r.recTxn[strings.Clone(d.Txn)] = id
			r.recFence[d.Fence] = id
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
		if _, seen := r.agents[rv.Intent.ID]; !seen && rv.Intent.ID != "" {
			id := strings.Clone(rv.Intent.ID)
			r.agents[id], r.boards[id] = strings.Clone(rv.Intent.Agent), strings.Clone(board(rv.Intent))
			r.order = append(r.order, id)
		}
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
			r.decided[d.Intent] = keep(d)
		}
		if sh := e.Shadow; sh != nil && r.isolated {
			if _, ok := r.shadows[e.Intent]; !ok {
				cp := *sh
				cp.Detail, cp.Rule = strings.Clone(sh.Detail), strings.Clone(sh.Rule)
				r.shadows[strings.Clone(e.Intent)] = &cp
			}
		}
	}
}

// mapped is in with the transaction id and fence its recorded grant gave
// replaced by the ones the re-decided one gave, when it names them.
func (r *runner) mapped(in *intents.Intent) *intents.Intent {
	if in == nil {
		return nil
	}
	cp := *in
	if owner, ok := r.recTxn[in.Txn]; ok && in.Txn != "" {
		if d, ok := r.decided[owner]; ok && d.txn != "" {
			cp.Txn = d.txn
			if rec, ok := r.recorded[owner]; ok && in.Fence != 0 && in.Fence == rec.fence {
				cp.Fence = d.fence
			}
		}
	} else if owner, ok := r.recFence[in.Fence]; ok && in.Fence != 0 {
		if d, ok := r.decided[owner]; ok && d.fence != 0 {
			cp.Fence = d.fence
		}
	}
	return &cp
}

// finish fires the timers due by the last event, and compares.
func (r *runner) finish() {
	if r.last != nil {
		r.collect(r.eng.Tick(r.last.Time, nil).Events)
	}
	if r.isolated {
		r.finishIsolated()
		return
	}
	rep := r.rep
	for _, id := range r.order {
		rd, nd := view(r.recorded[id]), view(r.decided[id])
		if rep.Matrix[rd.Key()] == nil {
			rep.Matrix[rd.Key()] = map[string]int{}
		}
		rep.Matrix[rd.Key()][nd.Key()]++
		if rd.Key() == nd.Key() {
			continue
		}
		rep.Changed++
		seq := r.recSeq[id]
		if rep.FirstDivergence == 0 || seq != 0 && seq < rep.FirstDivergence {
			rep.FirstDivergence = seq
		}
		rule := rules.Ref(nd.Detail)
		if rule == "" {
			rule = rules.Ref(rd.Detail)
		}
		if rule != "" {
			rep.ByRule[rule]++
		}
		rep.ByBoard[r.boards[id]]++
		rep.ByAgent[r.agents[id]]++
		if len(rep.Top) < r.opts.Top {
			rep.Top = append(rep.Top, Divergence{Seq: seq, Intent: id, Agent: r.agents[id], Recorded: rd, New: nd, Rule: rule,
				Story: "coagent log --intent " + id})
		}
	}
	rep.RecordedHash, rep.NewHash = replay.Hash(r.rec.State()), replay.Hash(r.eng.State())
	if rep.RecordedHash != rep.NewHash {
		rep.PathsDiffer = differing(r.rec.State(), r.eng.State(), 100)
	}
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

// finishIsolated reports isolated mode: each intent's first recorded
// decision against the one the new rules would have made in its place.
// The state is the recorded one, so the report gives one hash.
func (r *runner) finishIsolated() {
	rep := r.rep
	for _, id := range r.order {
		if rd, nd := view(r.recorded[id]), view(r.decided[id]); rd.Key() != nd.Key() && r.nondet == nil {
			r.nondet = &Divergence{Seq: r.recSeq[id], Intent: id, Agent: r.agents[id], Recorded: rd, New: nd}
		}
		rd, nd := view(r.first[id]), view(r.first[id])
		sh := r.shadows[id]
		if sh != nil {
			nd = Decision{Outcome: sh.WouldBe, Reason: sh.Reason, Detail: sh.Detail}
			if sh.Kind == intents.ShadowError {
				nd = Decision{Outcome: intents.ShadowError, Detail: sh.Detail}
			}
		}
		if rep.Matrix[rd.Key()] == nil {
			rep.Matrix[rd.Key()] = map[string]int{}
		}
		rep.Matrix[rd.Key()][nd.Key()]++
		if sh == nil {
			continue
		}
		rep.Changed++
		seq := r.firstSeq[id]
		if rep.FirstDivergence == 0 || seq != 0 && seq < rep.FirstDivergence {
			rep.FirstDivergence = seq
		}
		if sh.Rule != "" {
			rep.ByRule[sh.Rule]++
		}
		rep.ByBoard[r.boards[id]]++
		rep.ByAgent[r.agents[id]]++
		if len(rep.Top) < r.opts.Top {
			rep.Top = append(rep.Top, Divergence{Seq: seq, Intent: id, Agent: r.agents[id], Recorded: rd, New: nd, Rule: sh.Rule,
				Story: "coagent log --intent " + id})
		}
	}
	rep.RecordedHash = replay.Hash(r.rec.State())
	rep.NewHash = rep.RecordedHash
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
