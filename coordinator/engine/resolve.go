package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
)

// Case returns the arbiter's case for an escalated intent still open: the
// intent, the proposes of the transactions it conflicts with, those
// transactions, and the current values and versions of every path involved.
func (e *Engine) Case(id string) (*intents.Escalation, bool) {
	p := e.parked[id]
	if p == nil || !p.escalated {
		return nil, false
	}
	c := &intents.Escalation{ID: id, Intents: []*intents.Intent{p.in}, State: map[string]intents.PathState{},
		Conflicts: p.conflicts, Deadline: p.deadline, Trace: p.trace}
	paths := map[string]bool{}
	for _, w := range p.in.Writes {
		paths[w.Path] = true
	}
	for _, r := range p.in.Reads {
		paths[r.Path] = true
	}
	for _, cf := range p.conflicts {
		paths[cf.Path] = true
		t := e.txns[cf.WithTxn]
		if t == nil || slices.ContainsFunc(c.Intents, func(in *intents.Intent) bool { return in.ID == t.propose.ID }) {
			continue
		}
		c.Intents = append(c.Intents, t.propose)
		if c.Holder == nil {
			c.Holder = &intents.Holder{Txn: t.ID, Agent: t.Agent, Fence: t.fence, Intent: t.propose.ID, Writes: t.Writes}
		}
	}
	for path := range paths {
		st := e.tree.Lookup(path)
		c.State[path] = intents.PathState{Exists: st.Exists, Value: st.Value, Version: st.Version}
	}
	if p.panel != nil {
		pn := *p.panel
		c.Panel, c.Votes = &pn, slices.Clone(p.votes)
	}
	if p.gate != nil {
		c.Kind, c.Approval = intents.CaseApproval, e.approvalOf(p)
		switch {
		case p.gate.Review != "":
			c.Kind = intents.CaseReview
		case p.gate.Ask != nil:
			c.Kind = intents.CaseInput
		}
	}
	return c, true
}

// ResolveError says why a resolution was refused; Reason is the API's error
// code.
type ResolveError struct {
	Reason intents.Reason
	Detail string
}

func (e *ResolveError) Error() string { return "resolution refused: " + e.Detail }

func refuse(format string, args ...any) error {
	return &ResolveError{Reason: intents.ReasonInvalid, Detail: fmt.Sprintf(format, args...)}
}

// Resolve settles an escalated intent with an arbiter's resolution (SPEC
// §5). The escalated intent wins (it is decided again, now rejecting rather
// than escalating on conflict), loses (rejected arbiter_rejected), or is
// superseded by a replacement intent decided like any apply. Transactions in
// flight that lose, or stand in the winner's way, are preempted: aborted,
// their fence dead. Every involved agent gets its final decision. A
// resolution for a case that is not open — unknown, settled, or past its
// deadline — is refused with a *ResolveError and changes nothing.
func (e *Engine) Resolve(now time.Time, res *intents.Resolution, out []*intents.Event) (Ready, error) {
	e.begin(now, out)
	e.advance() // a deadline that has passed settles the case first
	if err := e.resolve(res); err != nil {
		return e.end(), err
	}
	return e.end(), nil
}

func (e *Engine) resolve(res *intents.Resolution) error {
	p := e.parked[res.Escalation]
	switch {
	case res.Escalation == "":
		return refuse("escalation is missing")
	case p == nil || !p.escalated:
		return refuse("escalation %s is not open: unknown, already resolved, or past its deadline", res.Escalation)
	case p.gate != nil:
		return refuse("case %s waits for %s, not for an arbiter: %s it (case.vote)", res.Escalation, describeGate(*p.gate), actOn(*p.gate))
	}
	c, _ := e.Case(res.Escalation)
	// The rule of what fits a case is the arbiters' as much as ours: one
	// validator, which the SDK applies before it sends.
	var bad *arbiter.ResolutionError
	if errors.As(arbiter.Check(c, res), &bad) {
		return refuse("%s", strings.Join(bad.Problems, "; "))
	}
	if res.Replacement != nil {
		if _, taken := e.recorded(res.Replacement.ID); taken {
			return refuse("replacement: intent id %s is already used", res.Replacement.ID)
		}
	}
	if p.panel != nil {
		settled, err := e.panelVote(p, res)
		if err != nil || settled == nil {
			return err
		}
		res = settled
	}
	esc := p.in.ID
	holders := map[string]*txn{} // propose id → its transaction still in flight
	for _, cf := range p.conflicts {
		if t := e.txns[cf.WithTxn]; t != nil {
			holders[t.propose.ID] = t
		}
	}
	escWins := arbiter.EscalatedWins(c, res)

	// The resolution belongs to the story of its replacement when that has
	// a trace of its own (meta.traceparent), else to the escalated intent's;
	// so does the replacement's decision. The escalated intent's own
	// decision keeps its trace.
	var rtrace, rproblem string
	if res.Replacement != nil {
		rtrace, rproblem = intents.Trace(nil, res.Replacement.Meta)
	}
	if rtrace == "" {
		rtrace = p.trace
	}
	defer e.traced(e.traced(rtrace))

	why := fmt.Sprintf("arbiter %s: %s", res.Arbiter, res.Rationale)
	e.emit(intents.Event{Type: intents.EventResolve, Agent: res.Arbiter, Intent: esc, Resolution: res})
	// Whoever loses, or stands in the way of what wins, is preempted; a
	// holder that wins keeps its grant.
	for _, id := range slices.Sorted(maps.Keys(holders)) {
		if slices.Contains(res.Winners, id) || (!slices.Contains(res.Losers, id) && !escWins && res.Replacement == nil) {
			continue
		}
		e.preemptTxn(holders[id], "preempted by "+why)
	}
	switch {
	case res.Replacement != nil:
		r := *res.Replacement
		r.OnConflict = intents.OnConflictReject
		e.emit(intents.Event{Type: intents.EventIntent, Agent: r.Agent, Intent: r.ID,
			Received: &intents.Received{Intent: res.Replacement, TraceError: rproblem}})
		e.decideNew(&r, nil, true)
		e.trace = p.trace
		d, _ := e.decided.get(r.ID)
		outcome := "was not decided"
		if d != nil {
			outcome = string(d.Outcome)
			if d.Reason != "" {
				outcome += " (" + string(d.Reason) + ")"
			}
		}
		e.reject(p.in, intents.ReasonArbiterRejected,
			fmt.Sprintf("superseded by replacement %s, which was %s; %s", r.ID, outcome, why), nil)
	case escWins: // under p's trace: no replacement
		in := *p.in
		in.OnConflict = intents.OnConflictReject // settled: no second escalation
		e.decideNew(&in, p, true)
	default:
		e.reject(p.in, intents.ReasonArbiterRejected, why, nil)
	}
	e.settle()
	return nil
}

// panelVote records res as one arbiter's vote on p, a case a panel
// settles. It returns the resolution that settles the case once the
// panel's quorum agrees — res, its rationale the agreeing arbiters' — and
// nil while it does not; the case is then offered to the arbiters again
// (Effects.Cases), with the votes so far. An arbiter the panel does not
// name, or one that has voted, is refused.
func (e *Engine) panelVote(p *parked, res *intents.Resolution) (*intents.Resolution, error) {
	pn := p.panel
	switch {
	case pn.Of != "" && !e.rules.Allowed(res.Arbiter, []string{pn.Of}):
		return nil, &ResolveError{Reason: intents.ReasonUnauthorized,
			Detail: fmt.Sprintf("arbiter %s may not vote on case %s: its panel is of %s", res.Arbiter, res.Escalation, pn.Of)}
	case slices.ContainsFunc(p.votes, func(v intents.Vote) bool { return v.Agent == res.Arbiter }):
		return nil, refuse("arbiter %s has voted on case %s already", res.Arbiter, res.Escalation)
	}
	defer e.traced(e.traced(p.trace))
	e.emit(intents.Event{Type: intents.EventVote, Agent: res.Arbiter, Intent: res.Escalation,
		Vote: &intents.Vote{Case: res.Escalation, Agent: res.Arbiter, Verdict: intents.VerdictResolve, Rationale: res.Rationale, Resolution: res}})
	key := effectOf(res)
	var agree []string
	for _, v := range p.votes {
		if v.Resolution != nil && effectOf(v.Resolution) == key {
			agree = append(agree, v.Agent+": "+v.Resolution.Rationale)
		}
	}
	if len(agree) < pn.Quorum {
		if c, ok := e.Case(p.in.ID); ok {
			e.effects.Cases = append(e.effects.Cases, c)
		}
		return nil, nil
	}
	settled := *res
	settled.Rationale = fmt.Sprintf("%d of the panel agree: %s", len(agree), strings.Join(agree, "; "))
	return &settled, nil
}

// effectOf is what two resolutions must share to agree: the same winners
// and losers, or replacements that write the same.
func effectOf(res *intents.Resolution) string {
	w, l := slices.Sorted(slices.Values(res.Winners)), slices.Sorted(slices.Values(res.Losers))
	var rep []byte
	if res.Replacement != nil {
		rep, _ = json.Marshal(res.Replacement.Writes)
	}
	return strings.Join(w, ",") + "|" + strings.Join(l, ",") + "|" + string(rep)
}
