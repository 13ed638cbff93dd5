package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// gate holds in, which writes under a rule's approve, for approval: it
// becomes an approval case — parked escalated with the gate on its
// escalate event, its approvers told on their notices subjects — and is
// answered escalated. An intent parked already (p != nil) keeps its slot.
func (e *Engine) gate(in *intents.Intent, p *parked, g rules.Gate) {
	if e.xcaught(in) {
		e.xrefuseWait(in, fmt.Sprintf("a write to %s needs a person's approval", g.Path), nil)
		return
	}
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
	what := fmt.Sprintf("writes %s, which rules[%d] holds for approval", g.Path, g.Rule)
	switch {
	case g.Review != "":
		what = fmt.Sprintf("refused (%s: %s); rules[%d] sends it to review", g.Review, g.Refusal, g.Rule)
	case g.Ask != nil:
		what = fmt.Sprintf("asks %q, the answer to be written at %s", intents.Clip(g.Ask.Question, 200), g.Path)
	}
	for _, m := range e.rules.Members(g.By) {
		if m == in.Agent {
			continue // never its own approver
		}
		e.emit(intents.Event{Type: intents.EventNotice, Agent: m, Intent: in.ID,
			Notice: &intents.Notice{Kind: intents.NoticeApproval, Intent: in.ID, From: in.Agent,
				Detail: fmt.Sprintf("intent %s of agent %s %s, and waits for %s until %s: %s it (case %s)",
					in.ID, in.Agent, what, who, deadline.Format(time.RFC3339), actOn(g.Gate), in.ID)}})
	}
	e.decide(&intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeEscalated,
		Detail: fmt.Sprintf("%s: waits for %s until %s (case %s); the %s fallback then",
			what, who, deadline.Format(time.RFC3339Nano), in.ID, g.Fallback),
		Conflicts: conflicts, Versions: e.versions(in, nil, nil)})
}

// refuse rejects in for reason, unless a rule's review takes the refusal:
// then it becomes a review case, which people approve (the intent is then
// decided with that check waived) or deny. An intent already approved on
// review is refused outright: a second check that fails is not the one
// the reviewers saw.
func (e *Engine) refuse(in *intents.Intent, p *parked, writes []string, reason intents.Reason, detail string, conflicts []intents.Conflict) {
	reviewed := p != nil && p.approved && p.gate != nil && p.gate.Review != ""
	if !reviewed && slices.Contains(rules.Reviewable, reason) {
		if g, ok := e.rules.Review(in.Agent, writes, reason, detail); ok {
			e.gate(in, p, g)
			return
		}
	}
	e.reject(in, reason, detail, conflicts)
}

// actOn says what a person does with a case of gate g.
func actOn(g intents.Gate) string {
	if g.Ask != nil {
		return "answer"
	}
	return "approve or deny"
}

// checkAsk checks what an input request asks of its intent: an apply of
// one set, whose value the answer gives, and an answer's schema that
// compiles.
func checkAsk(in *intents.Intent, ask *intents.Ask) error {
	if in.Kind != intents.KindApply || len(in.Writes) != 1 || in.Writes[0].Op != intents.OpSet {
		return fmt.Errorf("intent field meta.ask: an input request is an apply of one set, whose value the answer gives (kind %s, %d writes)", in.Kind, len(in.Writes))
	}
	_, err := answerSchema(ask)
	return err
}

// answerSchema compiles an ask's schema (nil: any answer).
func answerSchema(ask *intents.Ask) (*jsonschema.Schema, error) {
	if len(ask.Schema) == 0 {
		return nil, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(ask.Schema))
	if err != nil {
		return nil, fmt.Errorf("intent field meta.ask.schema: %v", err)
	}
	comp := jsonschema.NewCompiler()
	// No loader: an intent must not make the engine read files or the
	// network through a $ref.
	comp.UseLoader(jsonschema.SchemeURLLoader{})
	comp.DefaultDraft(jsonschema.Draft2020)
	if err := comp.AddResource("urn:coagent:ask", doc); err != nil {
		return nil, fmt.Errorf("intent field meta.ask.schema: %s", flat(err))
	}
	s, err := comp.Compile("urn:coagent:ask")
	if err != nil {
		return nil, fmt.Errorf("intent field meta.ask.schema: %s", flat(err))
	}
	return s, nil
}

// checkAnswer checks an answer against the ask's schema.
func checkAnswer(ask *intents.Ask, answer json.RawMessage) error {
	if len(answer) == 0 || !json.Valid(answer) {
		return fmt.Errorf("vote field answer: want a JSON value, not %q", intents.Clip(string(answer), 80))
	}
	s, err := answerSchema(ask)
	if err != nil || s == nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(answer))
	if err != nil {
		return fmt.Errorf("vote field answer: %v", err)
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("vote field answer = %s does not satisfy the question's schema: %s", intents.Clip(string(answer), 120), flat(err))
	}
	return nil
}

// flat is err's message on one line, as a decision's detail is.
func flat(err error) string { return intents.Clip(strings.Join(strings.Fields(err.Error()), " "), 500) }

// answered is in with the answer as its one write's value.
func answered(in *intents.Intent, answer json.RawMessage) *intents.Intent {
	cp := *in
	cp.Writes = []intents.Write{in.Writes[0]}
	cp.Writes[0].Value = answer
	return &cp
}

// describeGate says who must approve: "2 approvals of role:lead".
func describeGate(g intents.Gate) string {
	if g.Ask != nil {
		if len(g.By) == 0 {
			return "an answer"
		}
		return "an answer of " + strings.Join(g.By, ", ")
	}
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
	case v.Verdict != intents.VerdictApprove && v.Verdict != intents.VerdictDeny && v.Verdict != intents.VerdictAnswer:
		return refused(intents.ReasonInvalid, "vote field verdict = %q: want %s, %s or %s", v.Verdict, intents.VerdictApprove, intents.VerdictDeny, intents.VerdictAnswer)
	case len(v.Rationale) > maxRationale:
		return refused(intents.ReasonInvalid, "vote field rationale: %d bytes, above %d", len(v.Rationale), maxRationale)
	case p == nil || !p.escalated || p.gate == nil:
		return refused(intents.ReasonInvalid, "case %s is not an open approval case: unknown, settled, past its deadline, or a conflict for the arbiters (arbiter.resolve)", v.Case)
	case v.Agent == p.in.Agent:
		return refused(intents.ReasonUnauthorized, "agent %s may not approve or deny its own intent %s", v.Agent, v.Case)
	case p.gate.Ask != nil && len(p.gate.By) > 0 && !e.rules.Allowed(v.Agent, p.gate.By):
		return refused(intents.ReasonUnauthorized, "agent %s may not answer case %s: its agent asks only %s", v.Agent, v.Case, strings.Join(p.gate.By, ", "))
	case p.gate.Ask == nil && !e.rules.Allowed(v.Agent, p.gate.By):
		return refused(intents.ReasonUnauthorized, "agent %s may not vote on case %s: rules[%d] lets only %s approve or deny it",
			v.Agent, v.Case, p.gate.Rule, strings.Join(p.gate.By, ", "))
	case p.gate.Ask != nil && v.Verdict == intents.VerdictApprove:
		return refused(intents.ReasonInvalid, "case %s asks a question: answer it (verdict answer, with the answer) or deny it", v.Case)
	case p.gate.Ask == nil && v.Verdict == intents.VerdictAnswer:
		return refused(intents.ReasonInvalid, "case %s asks no question: approve or deny it", v.Case)
	case v.Verdict != intents.VerdictAnswer && len(v.Answer) > 0:
		return refused(intents.ReasonInvalid, "vote field answer: only an answer carries one")
	case slices.ContainsFunc(p.votes, func(o intents.Vote) bool { return o.Agent == v.Agent }):
		return refused(intents.ReasonInvalid, "agent %s has voted on case %s already", v.Agent, v.Case)
	}
	if v.Verdict == intents.VerdictAnswer {
		if err := checkAnswer(p.gate.Ask, v.Answer); err != nil {
			return refused(intents.ReasonInvalid, "%v", err)
		}
	}
	defer e.traced(e.traced(p.trace))
	e.emit(intents.Event{Type: intents.EventVote, Agent: v.Agent, Intent: v.Case, Vote: v})
	if v.Verdict == intents.VerdictAnswer {
		// The answer is its write's value now (foldVote): decided from
		// scratch, it may still meet a gate, a conflict or a rule.
		in := *p.in
		e.decideAgain(&in, p, "answered by "+v.Agent)
		e.settle()
		return nil
	}
	if v.Verdict == intents.VerdictDeny {
		why := v.Rationale
		if why == "" {
			why = "no reason given"
		}
		if r := p.gate.Review; r != "" {
			e.reject(p.in, r, fmt.Sprintf("denied on review by %s: %s; refused at first: %s", v.Agent, why, p.gate.Refusal), nil)
			return nil
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
	e.decideAgain(&in, p, why)
}

// decideAgain decides in, p's intent, from scratch after people acted on
// its case (why says who); a rejection it meets says so, since its agent
// waited for them.
func (e *Engine) decideAgain(in *intents.Intent, p *parked, why string) {
	n := len(e.out)
	e.decideNew(in, p, false)
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
	if p.gate.Ask != nil {
		e.reject(p.in, intents.ReasonWaitTimeout, fmt.Sprintf("nobody answered %q by its deadline", intents.Clip(p.gate.Ask.Question, 200)), nil)
		return
	}
	if p.gate.Fallback == intents.FallbackApply {
		e.emit(intents.Event{Type: intents.EventVote, Agent: FallbackArbiter, Intent: id,
			Vote: &intents.Vote{Case: id, Agent: FallbackArbiter, Verdict: intents.VerdictApprove,
				Rationale: "the deadline passed with " + have + "; the rule's fallback applies it"}})
		e.decideApproved(p, "applied by the fallback at its deadline with "+have)
		e.settle()
		return
	}
	if r := p.gate.Review; r != "" {
		e.reject(p.in, r, fmt.Sprintf("no quorum of reviewers approved it by its deadline (%s); refused at first: %s", have, p.gate.Refusal), nil)
		return
	}
	e.reject(p.in, intents.ReasonArbiterRejected, fmt.Sprintf("no quorum of approvals by its deadline: %s; the fallback rejects it", have), p.conflicts)
}

// foldVote records a vote on its case: the quorum's last approval, or the
// fallback's, approves it.
func (e *Engine) foldVote(v *intents.Vote) {
	p := e.parked[v.Case]
	p.votes = append(p.votes, *v)
	if p.gate == nil {
		return // an arbiter's, on a case a panel settles
	}
	if v.Verdict == intents.VerdictAnswer {
		p.answered, p.in = true, answered(p.in, v.Answer)
		return
	}
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
	if p.in.Kind != intents.KindApply || p.gate.Ask != nil {
		return a // a propose's values, and an answer, are not known yet
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
