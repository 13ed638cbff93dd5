package engine

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
)

// gate holds in, which writes under a rule's approve, for approval: it
// becomes an approval case — parked escalated with the gate on its
// escalate event, its approvers told on their notices subjects — and is
// answered escalated. An intent parked already (p != nil) keeps its slot.
func (e *Engine) gate(in *intents.Intent, p *parked, g rules.Gate) {
	if p == nil && e.loadOf(in.Agent).parked >= e.cfg.MaxParkedPerAgent {
		e.reject(in, intents.ReasonRateLimited, fmt.Sprintf("agent %s already has %d intents parked, the limit", in.Agent, e.cfg.MaxParkedPerAgent), nil)
		return
	}
	deadline := e.now.Add(g.Timeout)
	conflicts := []intents.Conflict{{Path: g.Path, Kind: intents.ConflictApproval}}
	gate := g.Gate
	e.emit(intents.Event{Type: intents.EventEscalate, Agent: in.Agent, Intent: in.ID,
		Wait: &intents.Wait{Intent: in, Deadline: deadline, Conflicts: conflicts, Gate: &gate}})
	if c, ok := e.Case(in.ID); ok {
		e.effects.Cases = append(e.effects.Cases, c)
	}
	who := describeGate(g.Gate)
	for _, m := range e.rules.Members(g.By) {
		if m == in.Agent {
			continue // never its own approver
		}
		e.emit(intents.Event{Type: intents.EventNotice, Agent: m, Intent: in.ID,
			Notice: &intents.Notice{Kind: intents.NoticeApproval, Intent: in.ID, From: in.Agent,
				Detail: fmt.Sprintf("intent %s of agent %s writes %s and waits for %s until %s: approve or deny it (case %s)",
					in.ID, in.Agent, g.Path, who, deadline.Format(time.RFC3339), in.ID)}})
	}
	e.decide(&intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeEscalated,
		Detail: fmt.Sprintf("writes %s, which rules[%d] holds for approval: waits for %s until %s (case %s); the %s fallback then",
			g.Path, g.Rule, who, deadline.Format(time.RFC3339Nano), in.ID, g.Fallback),
		Conflicts: conflicts, Versions: e.versions(in, nil, nil)})
}

// describeGate says who must approve: "2 approvals of role:lead".
func describeGate(g intents.Gate) string {
	n := "1 approval"
	if g.Quorum != 1 {
		n = fmt.Sprintf("%d approvals", g.Quorum)
	}
	return n + " of " + strings.Join(g.By, ", ")
}

// Approvals returns the agents of the approving votes, in order.
func Approvals(votes []intents.Vote) []string {
	var out []string
	for _, v := range votes {
		if v.Verdict == intents.VerdictApprove {
			out = append(out, v.Agent)
		}
	}
	return out
}

// maxRationale bounds a vote's rationale, which the log keeps.
const maxRationale = 4096

// VoteError says why a vote was refused; Reason is the API's error code.
type VoteError struct {
	Reason intents.Reason
	Detail string
}

func (e *VoteError) Error() string { return "vote refused: " + e.Detail }

// Vote records an approver's verdict on an approval case. A denial
// rejects the intent (arbiter_rejected, naming who denied it and why); the
// approval that makes the quorum decides it from scratch against the state
// of now — its preconditions may no longer hold, and the decision then
// says it was approved. A vote on a case that is not open, by an agent the
// gate does not name (or the intent's own), or a second vote by one agent
// is refused with a *VoteError and changes nothing.
func (e *Engine) Vote(now time.Time, v *intents.Vote, out []*intents.Event) (Ready, error) {
	e.begin(now, out)
	e.advance() // a deadline that has passed settles the case first
	if err := e.vote(v); err != nil {
		return e.end(), err
	}
	return e.end(), nil
}

func (e *Engine) vote(v *intents.Vote) error {
	refused := func(reason intents.Reason, format string, args ...any) error {
		return &VoteError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
	}
	p := e.parked[v.Case]
	switch {
	case v.Case == "":
		return refused(intents.ReasonInvalid, "vote field case: missing")
	case !intents.ValidSegment(v.Agent):
		return refused(intents.ReasonInvalid, "vote field agent = %q: not an agent name", v.Agent)
	case v.Verdict != intents.VerdictApprove && v.Verdict != intents.VerdictDeny:
		return refused(intents.ReasonInvalid, "vote field verdict = %q: want %s or %s", v.Verdict, intents.VerdictApprove, intents.VerdictDeny)
	case len(v.Rationale) > maxRationale:
		return refused(intents.ReasonInvalid, "vote field rationale: %d bytes, above %d", len(v.Rationale), maxRationale)
	case p == nil || !p.escalated || p.gate == nil:
		return refused(intents.ReasonInvalid, "case %s is not an open approval case: unknown, settled, past its deadline, or a conflict for the arbiters (arbiter.resolve)", v.Case)
	case v.Agent == p.in.Agent:
		return refused(intents.ReasonUnauthorized, "agent %s may not approve or deny its own intent %s", v.Agent, v.Case)
	case !e.rules.Allowed(v.Agent, p.gate.By):
		return refused(intents.ReasonUnauthorized, "agent %s may not vote on case %s: rules[%d] lets only %s approve or deny it",
			v.Agent, v.Case, p.gate.Rule, strings.Join(p.gate.By, ", "))
	case slices.ContainsFunc(p.votes, func(o intents.Vote) bool { return o.Agent == v.Agent }):
		return refused(intents.ReasonInvalid, "agent %s has voted on case %s already", v.Agent, v.Case)
	}
	defer e.traced(e.traced(p.trace))
	e.emit(intents.Event{Type: intents.EventVote, Agent: v.Agent, Intent: v.Case, Vote: v})
	if v.Verdict == intents.VerdictDeny {
		why := v.Rationale
		if why == "" {
			why = "no reason given"
		}
		e.reject(p.in, intents.ReasonArbiterRejected, fmt.Sprintf("denied by %s: %s", v.Agent, why), nil)
		return nil
	}
	if !p.approved {
		return nil // the quorum is not there yet
	}
	e.decideApproved(p, "approved by "+strings.Join(Approvals(p.votes), ", "))
	e.settle()
	return nil
}

// decideApproved decides p, an approval case approved (why says by whom),
// from scratch; a rejection it meets names the approval, since its agent
// waited for one. It is decided as an arbiter's winner is: a second
// escalation on conflict would hand a person's yes to a program.
func (e *Engine) decideApproved(p *parked, why string) {
	in := *p.in
	if e.policy(&in) == intents.OnConflictEscalate {
		in.OnConflict = intents.OnConflictReject
	}
	n := len(e.out)
	e.decideNew(&in, p, false)
	for _, ev := range e.out[n:] {
		if d := ev.Decision; d != nil && d.Intent == in.ID && d.Outcome == intents.OutcomeRejected {
			d.Detail = why + ", but " + d.Detail
		}
	}
}

// approvalDeadline settles an approval case whose deadline passed without
// a quorum: a dead letter whatever its fallback, which applies the intent
// (decided from scratch, as if approved) or rejects it.
func (e *Engine) approvalDeadline(id string, p *parked) {
	if c, ok := e.Case(id); ok {
		e.effects.Dead = append(e.effects.Dead, c)
	}
	got := Approvals(p.votes)
	have := fmt.Sprintf("%d of %d approvals", len(got), p.gate.Quorum)
	if len(got) > 0 {
		have += " (" + strings.Join(got, ", ") + ")"
	}
	if p.gate.Fallback == intents.FallbackApply {
		e.emit(intents.Event{Type: intents.EventVote, Agent: FallbackArbiter, Intent: id,
			Vote: &intents.Vote{Case: id, Agent: FallbackArbiter, Verdict: intents.VerdictApprove,
				Rationale: "the deadline passed with " + have + "; the rule's fallback applies it"}})
		e.decideApproved(p, "applied by the fallback at its deadline with "+have)
		e.settle()
		return
	}
	e.reject(p.in, intents.ReasonArbiterRejected, fmt.Sprintf("no quorum of approvals by its deadline: %s; the fallback rejects it", have), p.conflicts)
}

// foldVote records a vote on its case: the quorum's last approval, or the
// fallback's, approves it.
func (e *Engine) foldVote(v *intents.Vote) {
	p := e.parked[v.Case]
	p.votes = append(p.votes, *v)
	if v.Verdict == intents.VerdictApprove && (v.Agent == FallbackArbiter || len(Approvals(p.votes)) >= p.gate.Quorum) {
		p.approved = true
	}
}

// approvalOf is the approval part of p's case: its gate, votes, and the
// values its writes would leave if applied now.
func (e *Engine) approvalOf(p *parked) *intents.Approval {
	a := &intents.Approval{Gate: *p.gate, Votes: slices.Clone(p.votes)}
	if a.Votes == nil {
		a.Votes = []intents.Vote{}
	}
	if p.in.Kind != intents.KindApply {
		return a
	}
	plan, err := e.tree.Plan(p.in.Writes)
	if err != nil {
		return a // the decision will say why; the case shows the state now
	}
	a.After = map[string]intents.PathState{}
	for _, w := range plan {
		st := intents.PathState{Exists: w.Op != intents.OpDelete, Version: w.NewVersion}
		if st.Exists {
			st.Value = w.Value
		}
		a.After[w.Path] = st
	}
	return a
}
