package engine

import (
	"cmp"
	"errors"
	"fmt"
	"github.com/coagent/coagent/coordinator/state"
	"slices"

	"github.com/coagent/coagent/conflict"
	"github.com/coagent/coagent/intents"
)

// ErrSequence is returned (wrapped) by Apply for an event that does not
// follow the last one applied.
var ErrSequence = errors.New("engine: event out of sequence")

// Apply folds one logged event into the engine, as replay does: events must
// come in sequence order, starting at 1. It decides nothing and emits
// nothing. An event that cannot be folded (a corrupt or foreign log) is an
// error naming its sequence number and leaves the engine unchanged.
func (e *Engine) Apply(ev *intents.Event) error {
	err := e.apply(ev, false)
	// Replay only folds: the decisions that followed a release are already
	// in the log.
	e.redecide = e.redecide[:0]
	if err != nil {
		return fmt.Errorf("event %d (%s): %w", ev.Seq, ev.Type, err)
	}
	if ev.Time.After(e.now) {
		e.now = ev.Time
	}
	return nil
}

// ApplyAll folds a run of events another engine decided, as Apply does,
// for a log that stores them as that engine's did, and hands over what
// the calls that decided them would have: a Ready with evs as its Events,
// its records, changes, notices, live events and touched paths, and the
// next deadline, but no intent of its own nor effects (those were the
// deciding engine's to act on). An event that cannot be folded is an
// error, and the engine is then part way through the run.
func (e *Engine) ApplyAll(evs []*intents.Event) (Ready, error) {
	e.gather()
	for _, ev := range evs {
		if err := e.Apply(ev); err != nil {
			e.gathered(&Ready{})
			return Ready{}, err
		}
	}
	r := Ready{Events: evs}
	e.gathered(&r)
	r.Next, r.HasNext = e.NextDeadline()
	return r, nil
}

// apply is the one place the engine's state changes. own says the event was
// just emitted by the engine, so its change was planned on the current tree
// and need not be checked again; events from a log are.
func (e *Engine) apply(ev *intents.Event, own bool) error {
	if ev.Seq != e.seq+1 {
		return fmt.Errorf("%w: got %d after %d", ErrSequence, ev.Seq, e.seq)
	}
	if err := e.check(ev); err != nil {
		return err
	}
	if e.collect {
		e.sort(ev)
	}
	switch ev.Type {
	case intents.EventIntent:
		// Only the envelope of the intent is read: replay folds the log
		// with eventlog's Fold, which leaves out the rest (replay's
		// TestFoldReadsOnlyTheEnvelope fails on a fold that reads more).
		if ev.Received.Intent != nil && ev.Agent != "" {
			e.take(ev.Agent, ev.Time)
		}
	case intents.EventRules:
		if err := e.foldRules(ev.Rules); err != nil {
			return err
		}
	case intents.EventDecision:
		d := ev.Decision
		if e.claim(d) {
			if e.collect {
				e.records = append(e.records, d)
			}
			if d.Outcome.Final() && e.xcoords[d.Intent] != nil {
				delete(e.xcoords, d.Intent) // a cross-shard apply answered
			}
			if p := e.parked[d.Intent]; p != nil && d.Outcome.Final() {
				if own && p.escalated {
					// Its case is settled, however: an arbiter, the
					// fallback, or the end of what it conflicted with.
					e.effects.Settled = append(e.effects.Settled, d.Intent)
				}
				e.unpark(d.Intent, p)
			}
		}
	case intents.EventChange:
		apply := e.tree.ApplyAt
		if own {
			apply = e.tree.ApplyPlanAt
		}
		if err := apply(ev.Seq, state.Stamp{Time: ev.Time, Agent: ev.Agent}, ev.Change.Writes); err != nil {
			return err
		}
		e.noteMerged(ev)
		e.foldClaims(ev)
	case intents.EventGrant:
		g := ev.Grant
		t := newTxn(g)
		t.trace = ev.Trace
		e.txns[t.ID] = t
		e.index.Add(&t.Txn)
		e.fence = max(e.fence, g.Fence)
		e.loadOf(t.Agent).txns++
		t.warnN = e.timers.add(e.warnAt(t), timerLeaseWarn, t.ID)
		t.endN = e.timers.add(t.expires, timerLeaseEnd, t.ID)
	case intents.EventRenew:
		t := e.txns[ev.Grant.Txn]
		if t == nil {
			e.foldRenewClaim(e.claimIDs[ev.Grant.Txn], ev.Grant)
			break
		}
		t.expires, t.leaseMS, t.warned = ev.Grant.Expires, ev.Grant.LeaseMS, false
		t.warnN = e.timers.add(e.warnAt(t), timerLeaseWarn, t.ID)
		t.endN = e.timers.add(t.expires, timerLeaseEnd, t.ID)
	case intents.EventExpire, intents.EventRelease:
		t := e.txns[ev.Release.Txn]
		e.index.Remove(&t.Txn)
		delete(e.txns, t.ID)
		e.ended.put(t.ID, ev.Release.Cause)
		e.loadOf(t.Agent).txns--
		// Whoever waited on t is decided again from scratch by the caller;
		// during replay the events of those decisions follow in the log.
		e.redecide = append(e.redecide, e.freed(t)...)
	case intents.EventWait, intents.EventEscalate:
		w := ev.Wait
		p := e.parked[w.Intent.ID]
		if p == nil {
			p = &parked{in: w.Intent}
			e.parked[w.Intent.ID] = p
			e.loadOf(w.Intent.Agent).parked++
		}
		p.deadline, p.conflicts, p.trace = w.Deadline, w.Conflicts, ev.Trace
		p.escalated = ev.Type == intents.EventEscalate
		if p.gate = w.Gate; p.gate != nil {
			p.votes, p.approved = nil, false
		}
		if p.panel = w.Panel; p.panel != nil {
			p.votes = nil
		}
		if !p.escalated {
			e.waits.Park(w.Intent.ID, w.Intent.Agent, holders(w.Conflicts))
		}
		p.deadlineN = e.timers.add(p.deadline, timerDeadline, w.Intent.ID)
	case intents.EventVote:
		e.foldVote(ev.Vote)
	case intents.EventBoard:
		if err := e.foldHandoff(ev); err != nil {
			return err
		}
	case intents.EventXShard:
		e.foldXShard(ev)
	case intents.EventNotice:
		if ev.Notice.Kind == intents.NoticeLeaseExpiring {
			if t := e.txns[ev.Notice.Txn]; t != nil {
				t.warned = true
			} else if p := e.claimIDs[ev.Notice.Txn]; p != "" {
				e.claims[p].warned = true
			}
		}
	}
	e.seq = ev.Seq
	return nil
}

// check verifies, before anything changes, that an event carries the payload
// its type needs and refers to what exists, so that a foreign or corrupt
// event is an error and never a panic or a half-applied fold.
func (e *Engine) check(ev *intents.Event) error {
	missing := func(field string) error { return fmt.Errorf("%s event without %s", ev.Type, field) }
	switch ev.Type {
	case intents.EventIntent:
		if ev.Received == nil {
			return missing("received")
		}
	case intents.EventDecision:
		if ev.Decision == nil {
			return missing("decision")
		}
	case intents.EventChange:
		if ev.Change == nil {
			return missing("change")
		}
	case intents.EventGrant:
		g := ev.Grant
		if g == nil || g.Propose == nil {
			return missing("grant.propose")
		}
		if e.txns[g.Txn] != nil {
			return fmt.Errorf("grant of txn %s already in flight", g.Txn)
		}
		if g.Txn == "" || g.Agent == "" {
			return missing("grant.txn and grant.agent")
		}
	case intents.EventRenew:
		if ev.Grant == nil {
			return missing("grant")
		}
		if e.txns[ev.Grant.Txn] == nil && e.claimIDs[ev.Grant.Txn] == "" {
			return fmt.Errorf("renew of txn %q, neither in flight nor a task's claim", ev.Grant.Txn)
		}
	case intents.EventExpire, intents.EventRelease:
		if ev.Release == nil {
			return missing("release")
		}
		if e.txns[ev.Release.Txn] == nil {
			return fmt.Errorf("%s of txn %q not in flight", ev.Type, ev.Release.Txn)
		}
	case intents.EventWait, intents.EventEscalate:
		if ev.Wait == nil || ev.Wait.Intent == nil {
			return missing("wait.intent")
		}
	case intents.EventNotice:
		if ev.Notice == nil {
			return missing("notice")
		}
	case intents.EventResolve:
		if ev.Resolution == nil {
			return missing("resolution")
		}
	case intents.EventRules:
		if ev.Rules == nil {
			return missing("rules")
		}
	case intents.EventShadow:
		if ev.Shadow == nil {
			return missing("shadow")
		}
	case intents.EventBoard:
		if err := e.checkHandoff(ev.Handoff); err != nil {
			return err
		}
	case intents.EventXShard:
		if err := e.checkXShard(ev.XShard); err != nil {
			return err
		}
	case intents.EventVote:
		if ev.Vote == nil {
			return missing("vote")
		}
		// What the vote's fold reads must be there: a foreign log's vote
		// is refused rather than folded into a case it does not fit.
		v, p := ev.Vote, e.parked[ev.Vote.Case]
		switch {
		case p == nil || p.gate == nil && p.panel == nil:
			return fmt.Errorf("vote on case %q, which is no open approval case nor one a panel settles", v.Case)
		case p.gate == nil && v.Verdict != intents.VerdictResolve:
			return fmt.Errorf("vote %q on case %q, which a panel of arbiters settles", v.Verdict, v.Case)
		case v.Verdict == intents.VerdictAnswer && (p.gate.Ask == nil || len(p.in.Writes) != 1):
			return fmt.Errorf("answer on case %q, which asks no question", v.Case)
		}
	default:
		return fmt.Errorf("unknown event type %q", ev.Type)
	}
	return nil
}

func (e *Engine) unpark(id string, p *parked) {
	delete(e.parked, id)
	e.waits.Remove(id)
	e.loadOf(p.in.Agent).parked--
}

func (e *Engine) loadOf(agent string) *load {
	l := e.load[agent]
	if l == nil {
		l = &load{}
		e.load[agent] = l
	}
	return l
}

// noteMerged remembers, on every other transaction in flight that writes in
// the same documents, that this change landed beside it: its commit will
// name the change's intent in merged_with.
func (e *Engine) noteMerged(ev *intents.Event) {
	if ev.Intent == "" {
		return
	}
	var docs []string
	for _, w := range ev.Change.Writes {
		doc := intents.Document(w.Path)
		if len(docs) >= maxMerged || slices.Contains(docs, doc) {
			continue // every partner is named already, or this document was seen
		}
		docs = append(docs, doc)
		for _, id := range e.index.WritersUnder(ev.Txn, doc, maxMerged) {
			if t := e.txns[id]; t != nil && len(t.merged) < maxMerged && !slices.Contains(t.merged, ev.Intent) {
				t.merged = append(t.merged, ev.Intent)
			}
		}
	}
}

func holders(cs []intents.Conflict) []conflict.Holder {
	var out []conflict.Holder
	for _, c := range cs {
		if c.WithTxn == "" {
			continue
		}
		h := conflict.Holder{Txn: c.WithTxn, Agent: c.WithAgent}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// freed takes the intents waiting on t, which ended, out of its queue, in
// the order they are decided again: the highest priority first and, among
// equals, the order they started waiting on it; arrival order alone when
// a rule over t's writes says "fifo". Of waiters on one transaction,
// only the first of conflicting proposes is granted: the order is who
// gets it. Replay does not decide them (their decisions follow in the
// log), so the order may change between versions without changing a
// replay.
func (e *Engine) freed(t *txn) []string {
	ids := e.waits.Release(t.ID)
	if len(ids) < 2 {
		return ids
	}
	prio := func(id string) int64 {
		if p := e.parked[id]; p != nil {
			return p.in.Priority
		}
		return 0
	}
	if !slices.ContainsFunc(ids, func(id string) bool { return prio(id) != prio(ids[0]) }) {
		return ids
	}
	paths := make([]string, len(t.Writes))
	for i, w := range t.Writes {
		paths[i] = w.Path
	}
	if e.rules.FIFO(paths) {
		return ids
	}
	slices.SortStableFunc(ids, func(a, b string) int { return cmp.Compare(prio(b), prio(a)) })
	return ids
}
