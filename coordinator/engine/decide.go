package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/conflict"
	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/intents"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/oklog/ulid/v2"
)

// rejectRaw records an intent that did not decode or validate, with the
// trace of its traceparent header, or of its meta if that much of it
// decodes.
func (e *Engine) rejectRaw(agent string, raw []byte, traceparent []string, err error) {
	id := sniffID(raw)
	trace, problem := intents.Trace(traceparent, sniffMeta(raw))
	defer e.traced(e.traced(trace))
	kept := raw
	if len(kept) > intents.MaxIntentSize {
		// The error says how large it was; the log keeps its start. Kept
		// whole, a message up to the wire's limit would make an event, and
		// a group of a cluster's log, larger than a message may be.
		kept = kept[:rawKept]
	}
	e.emit(intents.Event{Type: intents.EventIntent, Agent: agent, Intent: id,
		Received: &intents.Received{Raw: kept, Error: err.Error(), TraceError: problem}})
	if d, ok := e.recorded(id); ok && id != "" && (agent == "" || d.Agent == agent) {
		e.duplicate(d)
		return
	}
	e.decide(&intents.Decision{Intent: id, Agent: agent, Outcome: intents.OutcomeRejected,
		Reason: intents.ReasonInvalid, Detail: err.Error()})
}

// rawKept is how much of an intent larger than intents.MaxIntentSize its
// record keeps.
const rawKept = 4 << 10

// sniffID returns the intent id of a document that failed validation, when
// it has a well-formed one, so the rejection is recorded under it: the
// string of the top-level member "id", whatever else is wrong with the
// document. One that names "id" twice has none, so it cannot take either
// id from its owner.
func sniffID(raw []byte) string {
	dec := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return ""
	}
	id, n := "", 0
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return ""
		}
		if name.String() != "id" {
			if dec.SkipValue() != nil {
				return ""
			}
			continue
		}
		n++
		v, err := dec.ReadToken()
		if err != nil {
			return ""
		}
		if v.Kind() == '"' {
			id = v.String()
		} else if v.Kind() == '{' || v.Kind() == '[' {
			return "" // not an id, and not worth skipping
		}
	}
	if n != 1 {
		return ""
	}
	if _, err := ulid.ParseStrict(id); err != nil {
		return ""
	}
	return id
}

// sniffMeta returns the meta of a document that failed validation, when
// it is JSON enough to have one and that meta names a traceparent.
func sniffMeta(raw []byte) json.RawMessage {
	if !bytes.Contains(raw, []byte(intents.MetaTraceparent)) {
		return nil
	}
	var doc struct {
		Meta json.RawMessage `json:"meta"`
	}
	if json.Unmarshal(raw, &doc) != nil {
		return nil
	}
	return doc.Meta
}

// submit decides in, which arrived on the subject of agent; size is its
// bytes, the headers it came with included (headers of them), which count
// against the limits on an intent's size: a header is recorded too (a
// traceparent that cannot be used is quoted in the intent's event), so a
// limit on the body alone would let a large header through.
func (e *Engine) submit(agent string, in *intents.Intent, size, headers int, traceparent []string) {
	// The intent's event names who sent it: the subject's agent. A forged
	// body must not spend its victim's quota.
	sender := in.Agent
	if agent != "" {
		sender = agent
	}
	// A commit, abort or renew sent without a trace of its own belongs to
	// its transaction's story.
	trace, problem := intents.Trace(traceparent, in.Meta)
	if t := e.txns[in.Txn]; trace == "" && t != nil && in.Kind.Transactional() && t.Agent == in.Agent {
		trace = t.trace
	}
	defer e.traced(e.traced(trace))
	if e.shadow != nil {
		e.shadowProbe(agent, sender, in, size, headers)
	}
	admitted, retry := e.admit(sender, e.now)
	e.emit(intents.Event{Type: intents.EventIntent, Agent: sender, Intent: in.ID, Txn: in.Txn,
		Received: &intents.Received{Intent: in, TraceError: problem}})
	e.decideReceived(agent, sender, in, size, headers, admitted, retry)
	e.shadowed = nil
}

// decideReceived decides in, received on the subject of agent from
// sender, once its event is recorded (or, in a shadow probe, as if it
// were); admitted and retry are its rate quota's say.
func (e *Engine) decideReceived(agent, sender string, in *intents.Intent, size, headers int, admitted bool, retry time.Duration) {
	if agent != "" && in.Agent != agent {
		// Answered to the agent that sent it; the fold does not record it as
		// the id's decision, so a forger can neither take another agent's
		// intent id nor read its recorded decision.
		e.decide(&intents.Decision{Intent: in.ID, Agent: agent, Outcome: intents.OutcomeRejected,
			Reason: intents.ReasonUnauthorized, Txn: in.Txn,
			Detail: fmt.Sprintf("the intent names agent %q but arrived on the subject of agent %q", in.Agent, agent)})
		return
	}
	if d, ok := e.recorded(in.ID); ok && !e.cfg.Bugs.SkipIdempotency {
		if d.Agent != in.Agent {
			e.reject(in, intents.ReasonInvalid, fmt.Sprintf("intent field id = %q: already taken by another agent's intent", in.ID), nil)
			return
		}
		e.duplicate(d)
		return
	}
	if !admitted {
		q, _ := e.rules.QuotaOf(in.Agent)
		e.reject(in, intents.ReasonRateLimited, rateDetail(in.Agent, q, retry), nil)
		return
	}
	if headers > 0 && size > intents.MaxIntentSize {
		e.reject(in, intents.ReasonInvalid, fmt.Sprintf("the intent is %d bytes, %d of them in its headers: above the %d-byte limit",
			size, headers, intents.MaxIntentSize), nil)
		return
	}
	if v := e.rules.CheckIntent(in, size, headers); v != nil {
		e.reject(in, v.Reason, v.Detail, nil)
		return
	}
	switch in.Kind {
	case intents.KindApply, intents.KindPropose:
		e.decideNew(in, nil, false)
	case intents.KindCommit:
		e.commit(in)
	case intents.KindAbort:
		e.abort(in)
	case intents.KindRenew:
		e.renew(in)
	}
	if e.probe == nil {
		e.settle()
	}
}

// settle decides again, from scratch and in the order they waited, the
// intents freed by transactions that ended in this call. Deciding one may
// end or start others; the loop runs until nothing is left.
//
// A waiter whose own deadline has passed is not decided again but times
// out: when the coordinator could not run (paused, stopped) past both the
// deadline and the end of what it waited on, the timers fire late, and
// applying the waiter then would apply it after the wait_ms its agent
// allowed.
func (e *Engine) settle() {
	for len(e.redecide) > 0 {
		id := e.redecide[0]
		e.redecide = e.redecide[1:]
		p := e.parked[id]
		if p == nil || p.escalated {
			continue
		}
		prev := e.traced(p.trace)
		if !e.now.Before(p.deadline) {
			e.deadline(id, p)
		} else {
			e.decideNew(p.in, p, false)
		}
		e.trace = prev
	}
}

func (e *Engine) duplicate(d *intents.Decision) {
	cp := *d
	cp.Duplicate = true
	e.decide(&cp)
}

func (e *Engine) decide(d *intents.Decision) {
	if d.Outcome == intents.OutcomeRejected {
		d.Retryable = d.Reason.Retryable()
	}
	if x := e.xcheck; x != nil && d.Intent == x.id {
		x.refused = d // a part's refusal is its coordinator's to decide
		return
	}
	var sh *intents.Shadow
	if p := e.shadowed; p != nil && e.probe == nil && d.Intent == p.id {
		e.shadowed = nil
		if sh = e.diverged(p, d); sh != nil && sh.Mode == intents.ModeWarn && sh.Kind == intents.ShadowChange {
			d.Warnings = append(d.Warnings, intents.Warning{Rule: sh.Rule, WouldBe: sh.WouldBeKey(), Detail: sh.Detail})
		}
	}
	e.emit(intents.Event{Type: intents.EventDecision, Agent: d.Agent, Intent: d.Intent, Txn: d.Txn, Decision: d})
	if sh != nil {
		e.emit(intents.Event{Type: intents.EventShadow, Agent: d.Agent, Intent: d.Intent, Txn: d.Txn, Shadow: sh})
	}
}

// reject decides in is rejected; conflicts (with the versions of the paths
// involved) go into the decision when given.
func (e *Engine) reject(in *intents.Intent, reason intents.Reason, detail string, conflicts []intents.Conflict) {
	d := &intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeRejected,
		Reason: reason, Detail: detail, Txn: in.Txn, Conflicts: conflicts}
	if reason != intents.ReasonUnauthorized {
		// An unauthorized intent may name what its agent may not read.
		d.Versions = e.versions(in, conflicts, nil)
	}
	e.decide(d)
}

// maxVersions bounds the versions a decision carries.
const maxVersions = 64

// versions gives the current version of every conflicting path, of every
// path the intent names and of more, the first 64 of them, so that the
// agent can retry or chain its next compare-and-set without a read. What
// the readers rules keep from the agent is left out. It is nil when there
// is nothing to give.
func (e *Engine) versions(in *intents.Intent, conflicts []intents.Conflict, more []string) map[string]uint64 {
	if e.probe != nil {
		return nil // a probe's decision is compared, never sent
	}
	var v map[string]uint64
	viewer := rules.Viewer{Agent: in.Agent}
	add := func(p string) {
		if len(v) >= maxVersions {
			return
		}
		if _, ok := v[p]; ok || !e.rules.MayRead(viewer, p) {
			return
		}
		if v == nil {
			v = make(map[string]uint64, min(maxVersions, len(in.Reads)+len(in.Writes)+len(conflicts)+len(more)))
		}
		v[p] = e.tree.Version(p)
	}
	for _, c := range conflicts {
		add(c.Path)
	}
	for _, r := range in.Reads {
		add(r.Path)
	}
	for _, w := range in.Writes {
		add(w.Path)
	}
	for _, p := range more {
		add(p)
	}
	return v
}

// conditions compiles an intent's pre- and postconditions and returns them
// with the intent's whole read set: declared reads plus every path the
// conditions touch.
func (e *Engine) conditions(in *intents.Intent) (pre, post []*cond.Condition, reads []string, err error) {
	if pre, err = e.compile("pre", in.Pre, false); err != nil {
		return nil, nil, nil, err
	}
	if post, err = e.compile("post", in.Post, true); err != nil {
		return nil, nil, nil, err
	}
	for _, r := range in.Reads {
		reads = append(reads, r.Path)
	}
	for _, c := range pre {
		reads = append(reads, c.Paths...)
	}
	for _, c := range post {
		reads = append(reads, c.Paths...)
	}
	return pre, post, reads, nil
}

// compile compiles the conditions srcs of one kind (pre, post) and checks
// them against the rules' limit on their size.
func (e *Engine) compile(kind string, srcs []string, post bool) ([]*cond.Condition, error) {
	var out []*cond.Condition
	for i, src := range srcs {
		field := fmt.Sprintf("%s[%d]", kind, i)
		c, err := e.comp.Compile(field, src, post)
		if err != nil {
			return nil, err
		}
		if v := e.rules.CheckCondition(field, c); v != nil {
			return nil, errors.New(v.Detail)
		}
		out = append(out, c)
	}
	return out, nil
}

// decideNew decides an apply or propose: fresh (p == nil) or parked and
// freed by the end of a transaction it waited on (p != nil). settled says
// an arbiter has ruled on it — the escalated intent it let win, or its
// replacement — so a fact it states supersedes the one in force instead of
// going back to the arbiter.
func (e *Engine) decideNew(in *intents.Intent, p *parked, settled bool) {
	// Its conditions share one budget and see the decision's time.
	e.eval.Begin(e.now)
	pre, post, reads, err := e.conditions(in)
	if err != nil {
		e.reject(in, intents.ReasonInvalid, err.Error(), nil)
		return
	}
	writes := writePaths(in.Writes)
	if parts, detail, ok := e.crossShard(in, pre, post, reads, writes); ok {
		e.xbegin(in, parts)
		return
	} else if detail != "" {
		e.decide(&intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeRejected,
			Reason: intents.ReasonOutOfScope, Detail: detail, Txn: in.Txn})
		return
	}
	if detail := e.outOfScope(reads, writes); detail != "" {
		// Refused before anything else is looked at: another shard may
		// own what it names, so nothing here says how it would fare.
		e.decide(&intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeRejected,
			Reason: intents.ReasonOutOfScope, Detail: detail, Txn: in.Txn})
		return
	}
	if !e.authorize(in, reads, writes) {
		return
	}
	// The invariants this write set must keep are read: a transaction in
	// flight that writes their paths conflicts, so two commits can never
	// break one together.
	invs := e.rules.Invariants(writes)
	reads = append(reads, invariantReads(invs)...)
	if in.Kind == intents.KindPropose {
		// Compared in milliseconds: a huge lease_ms would overflow a Duration.
		if in.LeaseMS > e.cfg.MaxLease.Milliseconds() {
			e.reject(in, intents.ReasonInvalid, fmt.Sprintf("intent field lease_ms = %d: above the %s limit", in.LeaseMS, e.cfg.MaxLease), nil)
			return
		}
		// Checked again when a parked propose is decided anew: the agent may
		// have taken more grants while it waited.
		if limit := e.maxTxns(in.Agent); e.loadOf(in.Agent).txns >= limit {
			e.reject(in, intents.ReasonRateLimited,
				fmt.Sprintf("agent %s already holds %d transactions in flight, the limit", in.Agent, limit), nil)
			return
		}
	}
	if in.WaitMS > e.cfg.MaxWait.Milliseconds() {
		e.reject(in, intents.ReasonInvalid, fmt.Sprintf("intent field wait_ms = %d: above the %s limit", in.WaitMS, e.cfg.MaxWait), nil)
		return
	}
	if p == nil || !p.answered {
		if ask, err := intents.AskOf(in.Meta); err != nil || ask != nil {
			if err == nil {
				err = checkAsk(in, ask)
			}
			if err != nil {
				e.reject(in, intents.ReasonInvalid, err.Error(), nil)
				return
			}
			e.gate(in, p, rules.Gate{Gate: intents.Gate{Path: in.Writes[0].Path, By: ask.By, Quorum: 1,
				Fallback: intents.FallbackReject, Ask: ask}, Timeout: ask.Timeout()})
			return
		}
	}
	if p == nil || !p.approved {
		if g, ok := e.rules.Gate(in.Agent, writes); ok && (in.Kind == intents.KindApply || in.Kind == intents.KindPropose) {
			e.gate(in, p, g)
			return
		}
	}
	if stale := e.staleReads(in); len(stale) > 0 {
		c := stale[0]
		e.reject(in, intents.ReasonStaleRead, fmt.Sprintf("read %s at version %d, but it is at version %d now",
			c.Path, versionOf(in, c.Path), e.tree.Version(c.Path)), stale)
		return
	}
	conflicts, merges := e.index.Check("", reads, conflictWrites(in), nil)
	if len(conflicts) > 0 && e.preempt(in, conflicts) {
		conflicts, merges = e.index.Check("", reads, conflictWrites(in), nil)
		if e.probe != nil {
			// A probe ends nothing: what it would have preempted is still
			// in the index, and every conflict was with it.
			conflicts = nil
		}
	}
	if len(conflicts) > 0 {
		e.onConflict(in, p, conflicts)
		return
	}
	// A review's approval lets through what it reviewed.
	var waive intents.Reason
	if p != nil && p.approved && p.gate != nil {
		waive = p.gate.Review
	}
	for i, c := range pre {
		if waive == intents.ReasonPreconditionFailed {
			break
		}
		if v := e.holds(c, "pre", i, in, nil); v != nil {
			e.refuse(in, p, writes, v.Reason, v.Detail, e.lostTo(c, in, v))
			return
		}
	}
	if in.Kind == intents.KindPropose {
		e.grant(in, reads, merges)
		return
	}
	plan, v := e.plan(in, in.Writes, post, invs, settled, waive)
	if v != nil && v.Contradiction {
		// Two facts on one subject are not last-writer-wins: the arbiter
		// settles them, whatever the intent's own policy.
		e.escalate(in, p, []intents.Conflict{{Path: v.Path, Kind: intents.ConflictContradiction}}, v.Detail)
		return
	}
	if v != nil {
		e.refuse(in, p, writes, v.Reason, v.Detail, nil)
		return
	}
	if e.xcaught(in) {
		e.xcheck.ok = true // prepared, not applied: the caller holds its paths
		return
	}
	merged := e.mergedWith("", conflictWrites(in), merges)
	e.claimed, e.unclaimed = e.claimed[:0], e.unclaimed[:0]
	e.emit(intents.Event{Type: intents.EventChange, Agent: in.Agent, Intent: in.ID,
		Change: &intents.Change{Writes: plan, MergedWith: merged}})
	e.tellClaims(in)
	// The versions after the change, so the agent can chain its next
	// compare-and-set without a read.
	d := &intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeApplied,
		Rev: e.seq, MergedWith: merged, Versions: e.versions(in, nil, nil)}
	e.leaseOf(in, d)
	e.decide(d)
	e.countReleases(in)
}

// plan checks writes against the state, the values they leave against the
// rules' state machines and schemas, and the postconditions and invariants
// against the state after them. It returns the planned change, or why it
// is refused. settled is as for decideNew.
func (e *Engine) plan(in *intents.Intent, writes []intents.Write, post []*cond.Condition, invs []rules.Check, settled bool, waive intents.Reason) ([]intents.Applied, *rules.Violation) {
	plan, err := e.tree.Plan(writes)
	if err != nil {
		return nil, &rules.Violation{Reason: intents.ReasonInvalid, Detail: err.Error()}
	}
	if e.rules == nil && len(e.claims) == 0 && in.Fence != 0 {
		if v := e.checkClaims(in, nil, nil); v != nil {
			return nil, v
		}
	}
	if len(post) > 0 || len(invs) > 0 || e.rules != nil || len(e.claims) > 0 {
		after := e.tree.After(plan).At(e.now)
		// A fence that is not the claim's says more than the task's rules
		// can: whoever holds it lost the task.
		if v := e.checkClaims(in, appliedPaths(plan), after); v != nil {
			return nil, v
		}
		if v := e.rules.CheckChange(in.Agent, appliedPaths(plan), e.tree, after, settled, waive); v != nil {
			return nil, v
		}
		for i, c := range post {
			if v := e.holds(c, "post", i, in, after); v != nil {
				return nil, v
			}
		}
		for _, c := range invs {
			if v := e.holds(c.Cond, "invariant "+c.Name, -1, in, after); v != nil {
				return nil, v
			}
		}
	}
	return plan, nil
}

// lostTo names, for a precondition of in that failed (v), whom in lost
// to: the agent of the last change to a path the condition reads, when
// that is another agent. A condition that reads nothing anyone else
// changed names no one.
func (e *Engine) lostTo(c *cond.Condition, in *intents.Intent, v *rules.Violation) []intents.Conflict {
	if v.Reason != intents.ReasonPreconditionFailed || !v.False {
		return nil
	}
	var last string
	var rev uint64
	for _, p := range c.State {
		if st, ok := e.tree.Stat(p); ok && st.ModRev > rev {
			last, rev = p, st.ModRev
		}
	}
	if agent := e.tree.ModAgent(last); last != "" && agent != "" && agent != in.Agent {
		return []intents.Conflict{{Path: last, Kind: intents.ConflictPrecondition, WithAgent: agent}}
	}
	return nil
}

// holds evaluates one condition; when it does not hold it returns why: a
// precondition or postcondition failure with a sentence naming the
// expression, what went wrong and the values it saw, or, when the intent's
// conditions would cost more than their budget, invalid.
func (e *Engine) holds(c *cond.Condition, kind string, i int, in *intents.Intent, after *state.View) *rules.Violation {
	var cur cond.Reader = e.tree
	var old cond.Reader
	reason := intents.ReasonPreconditionFailed
	if after != nil {
		cur, old = after, e.tree
		reason = intents.ReasonPostconditionFailed
	}
	ok, err := e.eval.Eval(c, cur, old, in)
	if err == nil && ok {
		return nil
	}
	if e.probe != nil && err != nil && i < 0 && e.probe.err == "" {
		// A shadow invariant that fails is the shadow's failure, not a
		// refusal it would make.
		e.probe.err = fmt.Sprintf("%s `%s` failed: %v", kind, c.Source, err)
	}
	var b strings.Builder
	if i >= 0 {
		fmt.Fprintf(&b, "%s[%d] `%s` ", kind, i, c.Source)
	} else {
		fmt.Fprintf(&b, "%s `%s` ", kind, c.Source)
	}
	if errors.Is(err, cond.ErrBudget) {
		// What it saw would explain nothing: the values are too big.
		b.WriteString("is " + err.Error())
		return &rules.Violation{Reason: intents.ReasonInvalid, Detail: b.String()}
	}
	if err != nil {
		fmt.Fprintf(&b, "failed: %v", err)
	} else {
		b.WriteString("is false")
	}
	seen := 0
	show := func(r cond.Reader, prefix string, paths []string) {
		for _, p := range paths {
			if seen == 8 {
				fmt.Fprintf(&b, " and %d more", len(c.State)+len(c.Old)-8)
				seen++
			}
			if seen > 8 {
				return
			}
			if seen == 0 {
				b.WriteString("; it saw ")
			} else {
				b.WriteString(", ")
			}
			seen++
			if v, ok := r.Get(p); ok {
				fmt.Fprintf(&b, "%s%s = %s", prefix, p, state.FormatValue(v))
			} else {
				fmt.Fprintf(&b, "%s%s absent", prefix, p)
			}
		}
	}
	show(cur, "", c.State)
	if old != nil {
		show(old, "old.", c.Old)
	}
	return &rules.Violation{Reason: reason, Detail: b.String(), False: err == nil}
}

// staleReads returns a stale conflict for every read whose version is not
// the current one.
func (e *Engine) staleReads(in *intents.Intent) []intents.Conflict {
	var out []intents.Conflict
	for _, r := range in.Reads {
		if r.Version != nil && e.tree.Version(r.Path) != *r.Version && !e.XHolds([]string{r.Path}) {
			// A path a prepared part holds is in conflict with it, not
			// stale: its coordinator may have committed, and told the
			// version the part will leave.
			out = append(out, intents.Conflict{Path: r.Path, Kind: intents.ConflictStale})
		}
	}
	return out
}

func versionOf(in *intents.Intent, path string) uint64 {
	for _, r := range in.Reads {
		if r.Path == path && r.Version != nil {
			return *r.Version
		}
	}
	return 0
}

// onConflict applies the intent's conflict policy.
func (e *Engine) onConflict(in *intents.Intent, p *parked, conflicts []intents.Conflict) {
	c := conflicts[0]
	what := fmt.Sprintf("%s conflict on %s with txn %s of agent %s", c.Kind, c.Path, c.WithTxn, c.WithAgent)
	if len(conflicts) > 1 {
		what += fmt.Sprintf(" (and %d more)", len(conflicts)-1)
	}
	switch e.policy(in) {
	case intents.OnConflictWait:
		e.wait(in, p, conflicts, what)
	case intents.OnConflictEscalate:
		e.escalate(in, p, conflicts, what)
	default:
		e.reject(in, intents.ReasonConflict, what, conflicts)
	}
}

// preempt ends the transactions in's conflicts are with, when the rules
// let in's agent preempt on every path it conflicts on: each is released
// as preempted and its agent told (aborted), as an arbiter's preemption
// is, naming the path and the rule. It reports whether it did.
func (e *Engine) preempt(in *intents.Intent, conflicts []intents.Conflict) bool {
	if e.rules == nil {
		return false
	}
	why := make([]string, len(conflicts))
	for i, c := range conflicts {
		rule, ok := e.rules.MayPreempt(in.Agent, c.Path)
		if !ok || c.WithTxn == "" || e.txns[c.WithTxn] == nil {
			return false
		}
		why[i] = rule
	}
	for i, c := range conflicts {
		// The first conflict with a transaction ends it; the others with it
		// find it gone.
		if t := e.txns[c.WithTxn]; t != nil {
			e.preemptTxn(t, fmt.Sprintf("preempted by intent %s of agent %s on %s: %s", in.ID, in.Agent, c.Path, why[i]))
		}
	}
	return true
}

// preemptTxn ends t, released as preempted, and tells its agent why: its
// propose is aborted, its fence dead.
func (e *Engine) preemptTxn(t *txn, detail string) {
	defer e.traced(e.traced(t.trace))
	e.emit(intents.Event{Type: intents.EventRelease, Agent: t.Agent, Intent: t.propose.ID, Txn: t.ID,
		Release: &intents.Release{Txn: t.ID, Agent: t.Agent, Cause: intents.CausePreempted}})
	e.decide(&intents.Decision{Intent: t.propose.ID, Agent: t.Agent, Outcome: intents.OutcomeAborted, Txn: t.ID,
		Fence: t.fence, Detail: detail})
}

// escalate sends in to the arbiters with its conflicts. An intent parked
// already (p != nil, a waiter freed) keeps its slot: only a new one counts
// against the agent's limit.
func (e *Engine) escalate(in *intents.Intent, p *parked, conflicts []intents.Conflict, what string) {
	if e.xcaught(in) {
		e.xrefuseWait(in, what, conflicts)
		return
	}
	if p == nil && e.loadOf(in.Agent).parked >= e.cfg.MaxParkedPerAgent {
		e.reject(in, intents.ReasonRateLimited, fmt.Sprintf("agent %s already has %d intents parked, the limit", in.Agent, e.cfg.MaxParkedPerAgent), conflicts)
		return
	}
	deadline := e.now.Add(e.cfg.ArbiterTimeout)
	var panel *intents.Panel
	if pn, ok := e.rules.Panel(writePaths(in.Writes)); ok {
		panel = &pn
	} else if e.cfg.Panel.Quorum > 1 {
		pn := e.cfg.Panel
		panel = &pn
	}
	e.emit(intents.Event{Type: intents.EventEscalate, Agent: in.Agent, Intent: in.ID,
		Wait: &intents.Wait{Intent: in, Deadline: deadline, Conflicts: conflicts, Panel: panel}})
	if c, ok := e.Case(in.ID); ok {
		e.effects.Cases = append(e.effects.Cases, c)
	}
	sent := "; sent to the arbiters"
	if panel != nil {
		sent = fmt.Sprintf("; sent to the arbiters, %d of whom must agree", panel.Quorum)
		if panel.Of != "" {
			sent = fmt.Sprintf("; sent to the arbiters, %d of %s must agree", panel.Quorum, panel.Of)
		}
	}
	d := &intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeEscalated,
		Detail: what + sent, Conflicts: conflicts, Versions: e.versions(in, conflicts, nil)}
	e.decide(d)
}

// wait parks in behind the transactions it conflicts with, unless that
// would close a cycle of agents waiting on each other.
func (e *Engine) wait(in *intents.Intent, p *parked, conflicts []intents.Conflict, what string) {
	if e.xcaught(in) {
		e.xrefuseWait(in, what, conflicts)
		return
	}
	hs := holders(conflicts)
	if e.waits.Cycle(in.Agent, hs) {
		e.reject(in, intents.ReasonDeadlock, what+"; waiting would deadlock: "+cycleDetail(in.Agent, hs), conflicts)
		return
	}
	deadline := e.now.Add(time.Duration(in.Wait()) * time.Millisecond)
	if p != nil && p.gate == nil {
		// A re-parked intent keeps its original bound; one approved just
		// now waits from now, its bound the approval's no more.
		deadline = p.deadline
	} else if e.loadOf(in.Agent).parked >= e.cfg.MaxParkedPerAgent {
		e.reject(in, intents.ReasonRateLimited, fmt.Sprintf("agent %s already has %d intents parked, the limit", in.Agent, e.cfg.MaxParkedPerAgent), conflicts)
		return
	}
	e.emit(intents.Event{Type: intents.EventWait, Agent: in.Agent, Intent: in.ID,
		Wait: &intents.Wait{Intent: in, Deadline: deadline, Conflicts: conflicts}})
	var before []conflict.Holder
	if p != nil {
		before = holders(p.conflicts)
	}
	for _, h := range hs {
		if slices.Contains(before, h) {
			continue // told already
		}
		e.emit(intents.Event{Type: intents.EventNotice, Agent: h.Agent, Intent: in.ID, Txn: h.Txn,
			Notice: &intents.Notice{Kind: intents.NoticeWaiting, Txn: h.Txn, Intent: in.ID, From: in.Agent,
				Detail: fmt.Sprintf("intent %s of agent %s waits on your transaction %s", in.ID, in.Agent, h.Txn)}})
	}
	if p == nil {
		e.decide(&intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeQueued,
			Detail: what + "; waiting until " + deadline.Format(time.RFC3339Nano), Conflicts: conflicts,
			Versions: e.versions(in, conflicts, nil)})
	}
}

// grant puts a propose in flight.
func (e *Engine) grant(in *intents.Intent, readPaths []string, merges []string) {
	lease := time.Duration(in.LeaseMS) * time.Millisecond
	if lease == 0 {
		lease = e.cfg.DefaultLease
	}
	reads := in.Reads // intents are never changed once submitted
	if len(readPaths) > len(in.Reads) {
		reads = slices.Clone(in.Reads)
		for _, p := range readPaths[len(in.Reads):] {
			reads = append(reads, intents.Read{Path: p})
		}
	}
	var id string
	if e.probe == nil { // a probe takes no id: the ids stay those of the decisions made
		id = e.cfg.NewID(e.now).String()
	}
	g := &intents.Grant{Txn: id, Agent: in.Agent, Fence: e.fence + 1,
		LeaseMS: lease.Milliseconds(), Expires: e.now.Add(lease), Reads: reads, Propose: in}
	merged := e.mergedWith(g.Txn, in.Writes, merges)
	e.emit(intents.Event{Type: intents.EventGrant, Agent: in.Agent, Intent: in.ID, Txn: g.Txn, Grant: g})
	expires := g.Expires
	var read []string
	for _, r := range reads {
		read = append(read, r.Path)
	}
	e.decide(&intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeGranted,
		Txn: g.Txn, Fence: g.Fence, LeaseExpires: &expires, MergedWith: merged,
		Versions: e.versions(&intents.Intent{Agent: in.Agent}, nil, read)})
}

// mergedWith names the transactions in flight that write beside writes in
// the same documents (disjoint, or the same commutative op on the same path),
// other than self.
func (e *Engine) mergedWith(self string, writes []intents.Write, merges []string) []string {
	out := slices.Clone(merges)
	for _, w := range writes {
		if len(out) >= maxMerged {
			break
		}
		for _, id := range e.index.WritersUnder(self, intents.Document(w.Path), maxMerged) {
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	if len(out) > maxMerged {
		out = out[:maxMerged]
	}
	return out
}

// held returns the live transaction a commit, abort or renew acts on, or
// rejects the intent and returns nil.
func (e *Engine) held(in *intents.Intent) *txn {
	t := e.txns[in.Txn]
	if late := e.late[in.Txn]; t == nil && late != nil && in.Kind == intents.KindCommit && in.Fence == late.fence {
		delete(e.late, in.Txn)
		return late // the planted bug skip-fence
	}
	if t == nil {
		switch cause, ok := e.ended.get(in.Txn); {
		case !ok:
			e.reject(in, intents.ReasonFenced, fmt.Sprintf("txn %s is not in flight and never was", in.Txn), nil)
		case cause == intents.CauseExpired && in.Kind == intents.KindRenew:
			e.reject(in, intents.ReasonLeaseExpired, fmt.Sprintf("txn %s ended: its lease expired before the renewal", in.Txn), nil)
		case cause == intents.CauseExpired:
			// SPEC §4: a commit after expiry is fenced; the detail says why.
			e.reject(in, intents.ReasonFenced, fmt.Sprintf("txn %s ended: its lease expired", in.Txn), nil)
		default:
			e.reject(in, intents.ReasonFenced, fmt.Sprintf("txn %s ended: %s", in.Txn, cause), nil)
		}
		return nil
	}
	if t.Agent != in.Agent {
		e.reject(in, intents.ReasonUnauthorized, fmt.Sprintf("txn %s belongs to agent %s", in.Txn, t.Agent), nil)
		return nil
	}
	if in.Fence != t.fence {
		e.reject(in, intents.ReasonFenced, fmt.Sprintf("fence %d is not the live grant's fence %d of txn %s", in.Fence, t.fence, in.Txn), nil)
		return nil
	}
	return t
}

func (e *Engine) commit(in *intents.Intent) {
	t := e.held(in)
	if t == nil {
		return
	}
	writes := in.Writes
	if len(writes) == 0 {
		writes = t.propose.Writes
		for i, w := range writes {
			if len(w.Value) == 0 && w.Op != intents.OpDelete && w.Op != intents.OpIncr {
				e.reject(in, intents.ReasonInvalid, fmt.Sprintf("commit carries no writes and the propose's writes[%d] %s %s has no value", i, w.Op, w.Path), nil)
				return
			}
		}
	}
	if stale := e.staleReads(in); len(stale) > 0 {
		c := stale[0]
		e.reject(in, intents.ReasonStaleRead, fmt.Sprintf("read %s at version %d, but it is at version %d now; txn %s stays open",
			c.Path, versionOf(in, c.Path), e.tree.Version(c.Path), t.ID), stale)
		return
	}
	for i, w := range writes {
		if !inScope(w, t.Writes) {
			e.reject(in, intents.ReasonOutOfScope, fmt.Sprintf("writes[%d] %s %s is outside the write set granted to txn %s (%s)",
				i, w.Op, w.Path, t.ID, describeWrites(t.Writes)), nil)
			return
		}
	}
	paths := writePaths(writes)
	if !e.authorize(in, nil, paths) {
		return
	}
	e.eval.Begin(e.now)
	pre, post, _, err := e.conditions(in)
	if err == nil {
		var more []*cond.Condition
		_, more, _, err = e.conditions(&intents.Intent{Post: t.propose.Post})
		post = append(more, post...)
	}
	if err != nil {
		e.reject(in, intents.ReasonInvalid, err.Error(), nil)
		return
	}
	for i, c := range pre {
		if v := e.holds(c, "pre", i, in, nil); v != nil {
			e.reject(in, v.Reason, v.Detail, e.lostTo(c, in, v))
			return
		}
	}
	plan, v := e.plan(in, writes, post, e.rules.Invariants(paths), false, "")
	if v != nil && v.Contradiction {
		// A commit cannot wait for an arbiter: its transaction stays open
		// to commit a fact that supersedes the one in force, or to end.
		e.reject(in, intents.ReasonConflict, v.Detail+"; txn "+t.ID+" stays open",
			[]intents.Conflict{{Path: v.Path, Kind: intents.ConflictContradiction}})
		return
	}
	if v != nil {
		e.reject(in, v.Reason, v.Detail, nil)
		return
	}
	merged := e.mergedWith(t.ID, writes, t.merged)
	e.emit(intents.Event{Type: intents.EventChange, Agent: in.Agent, Intent: in.ID, Txn: t.ID,
		Change: &intents.Change{Writes: plan, MergedWith: merged}})
	rev := e.seq
	if e.txns[t.ID] == t { // not so for the planted bug skip-fence: t ended
		e.emit(intents.Event{Type: intents.EventRelease, Agent: in.Agent, Intent: in.ID, Txn: t.ID,
			Release: &intents.Release{Txn: t.ID, Agent: t.Agent, Cause: intents.CauseCommitted}})
	}
	more := paths
	for _, r := range t.reads {
		more = append(more, r.Path)
	}
	e.decide(&intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeCommitted,
		Txn: t.ID, Fence: t.fence, Rev: rev, MergedWith: merged, Versions: e.versions(in, nil, more)})
}

// inScope reports whether a commit's write lies inside the granted write
// set. A commutative grant admits only that op on that exact path: its
// grant may have merged with another's, which a different op would break.
func inScope(w intents.Write, granted []intents.Write) bool {
	for _, g := range granted {
		if g.Op.Commutative() {
			if w.Path == g.Path && w.Op == g.Op {
				return true
			}
			continue
		}
		if intents.Within(w.Path, g.Path) {
			return true
		}
	}
	return false
}

func describeWrites(ws []intents.Write) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = string(w.Op) + " " + w.Path
	}
	return strings.Join(parts, ", ")
}

func (e *Engine) abort(in *intents.Intent) {
	t := e.held(in)
	if t == nil {
		return
	}
	e.emit(intents.Event{Type: intents.EventRelease, Agent: in.Agent, Intent: in.ID, Txn: t.ID,
		Release: &intents.Release{Txn: t.ID, Agent: t.Agent, Cause: intents.CauseAborted}})
	e.decide(&intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeAborted,
		Txn: t.ID, Fence: t.fence})
}

func (e *Engine) renew(in *intents.Intent) {
	if e.txns[in.Txn] == nil {
		if p := e.claimIDs[in.Txn]; p != "" {
			e.renewClaim(in, e.claims[p])
			return
		}
	}
	t := e.held(in)
	if t == nil {
		return
	}
	if in.LeaseMS > e.cfg.MaxLease.Milliseconds() {
		e.reject(in, intents.ReasonInvalid, fmt.Sprintf("intent field lease_ms = %d: above the %s limit", in.LeaseMS, e.cfg.MaxLease), nil)
		return
	}
	lease := time.Duration(in.LeaseMS) * time.Millisecond
	if lease == 0 {
		lease = time.Duration(t.leaseMS) * time.Millisecond
	}
	g := &intents.Grant{Txn: t.ID, Agent: t.Agent, Fence: t.fence, LeaseMS: lease.Milliseconds(), Expires: e.now.Add(lease)}
	e.emit(intents.Event{Type: intents.EventRenew, Agent: in.Agent, Intent: in.ID, Txn: t.ID, Grant: g})
	expires := g.Expires
	e.decide(&intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeRenewed,
		Txn: t.ID, Fence: t.fence, LeaseExpires: &expires})
}

func (e *Engine) leaseWarning(t *txn) {
	if !t.expires.After(e.now) {
		return // the expiry is due too: a warning now would only be noise
	}
	e.emit(intents.Event{Type: intents.EventNotice, Agent: t.Agent, Txn: t.ID,
		Notice: &intents.Notice{Kind: intents.NoticeLeaseExpiring, Txn: t.ID,
			Detail: fmt.Sprintf("the lease of txn %s ends at %s; renew it or lose the grant", t.ID, t.expires.Format(time.RFC3339Nano))}})
}

func (e *Engine) expire(t *txn) {
	if e.cfg.Bugs.SkipFence {
		if e.late == nil {
			e.late = map[string]*txn{}
		}
		e.late[t.ID] = t
	}
	e.emit(intents.Event{Type: intents.EventExpire, Agent: t.Agent, Txn: t.ID,
		Release: &intents.Release{Txn: t.ID, Agent: t.Agent, Cause: intents.CauseExpired}})
	e.emit(intents.Event{Type: intents.EventNotice, Agent: t.Agent, Txn: t.ID,
		Notice: &intents.Notice{Kind: intents.NoticeLeaseExpired, Txn: t.ID,
			Detail: fmt.Sprintf("the lease of txn %s ended; its writes will not be applied", t.ID)}})
	e.settle()
}

// deadline ends a parked intent whose bound ran out.
func (e *Engine) deadline(id string, p *parked) {
	if p.escalated && p.gate != nil {
		e.approvalDeadline(id, p)
		return
	}
	if p.escalated {
		// No arbiter settled the case in time: whatever the fallback does,
		// the case is a dead letter.
		if c, ok := e.Case(id); ok {
			e.effects.Dead = append(e.effects.Dead, c)
		}
		if e.cfg.Fallback != nil {
			if c, ok := e.Case(id); ok {
				if res := e.cfg.Fallback(c); res != nil {
					res.Escalation, res.Arbiter = id, FallbackArbiter
					if e.resolve(res) == nil {
						return
					}
				}
			}
		}
		detail := "no arbiter resolved the escalation by its deadline; the fallback rejects it"
		if p.panel != nil && len(p.votes) > 0 {
			detail = fmt.Sprintf("the panel did not agree by its deadline (%d votes, %d needed to agree); the fallback rejects it", len(p.votes), p.panel.Quorum)
		}
		e.reject(p.in, intents.ReasonArbiterRejected, detail, p.conflicts)
		return
	}
	c := p.conflicts[0]
	if e.txns[c.WithTxn] == nil {
		// What it waited on ended, but only after its deadline, or at a
		// moment the coordinator decided nothing (see settle).
		e.reject(p.in, intents.ReasonWaitTimeout, fmt.Sprintf("its wait ended at %s, before it could be decided again after txn %s of agent %s (%s on %s) ended",
			p.deadline.Format(time.RFC3339Nano), c.WithTxn, c.WithAgent, c.Kind, c.Path), p.conflicts)
		return
	}
	e.reject(p.in, intents.ReasonWaitTimeout, fmt.Sprintf("still in %s conflict on %s with txn %s of agent %s when the wait ended",
		c.Kind, c.Path, c.WithTxn, c.WithAgent), p.conflicts)
}

// conflictWrites is what an intent writes as conflict detection sees it. An
// apply's merge writes only the keys it names (a null deletes one), not the
// whole object, so it is checked as one write per key; a propose's merge may
// carry no value and stands for the whole object.
func conflictWrites(in *intents.Intent) []intents.Write {
	if in.Kind != intents.KindApply {
		return in.Writes
	}
	var out []intents.Write
	for i, w := range in.Writes {
		if w.Op != intents.OpMerge {
			if out != nil {
				out = append(out, w)
			}
			continue
		}
		var members map[string]json.RawMessage
		if json.Unmarshal(w.Value, &members) != nil || len(members) == 0 {
			continue
		}
		if out == nil {
			out = append(make([]intents.Write, 0, len(in.Writes)+len(members)), in.Writes[:i]...)
		}
		for k := range members {
			out = append(out, intents.Write{Path: w.Path + "." + k, Op: intents.OpSet})
		}
	}
	if out == nil {
		return in.Writes
	}
	return out
}

// cycleDetail says whom waiting would make agent wait on, in a cycle.
func cycleDetail(agent string, hs []conflict.Holder) string {
	for _, h := range hs {
		if h.Agent == agent {
			return fmt.Sprintf("agent %s would wait on its own txn %s", agent, h.Txn)
		}
	}
	return fmt.Sprintf("agent %s would wait on agents that already wait, directly or not, on %s", agent, agent)
}

// recorded returns the decision recorded for an intent id: from the
// engine's window, or, for an id older than it, from Config.Recorded.
func (e *Engine) recorded(id string) (*intents.Decision, bool) {
	if d, ok := e.decided.get(id); ok {
		return d, true
	}
	return e.recordedOutside(id)
}

// claim makes d its id's decision in the window if it takes the id, by
// the rule of takes: an id belongs to the first agent decided under it.
// What claim takes is what the event log keeps as records
// (Ready.Records): the rule has no other owner. Only an invalid
// decision can be about an id another agent owns (submit refuses such
// reuse as invalid), and that owner's record may be older than the
// window: it is looked up, or the refusal would take the id from its
// owner in the window, and the owner's own resend be refused as the
// intruder's.
func (e *Engine) claim(d *intents.Decision) bool {
	if !takes(nil, d) {
		return false
	}
	if d.Reason == intents.ReasonInvalid {
		if _, ok := e.decided.get(d.Intent); !ok {
			if prev, ok := e.recordedOutside(d.Intent); ok && !takes(prev, d) {
				return false
			}
		}
	}
	return e.decided.claim(d.Intent, d, func(prev *intents.Decision) bool { return takes(prev, d) })
}

// takes reports whether d becomes the recorded decision of its intent id,
// given the one recorded so far (nil if none). An id belongs to the first
// agent decided under it; an unauthorized intent never takes an id (it
// may be another agent's), a duplicate only repeats what is recorded, and
// an intent refused as another shard's may come back once its board has.
func takes(prev, d *intents.Decision) bool {
	if d.Duplicate || d.Intent == "" || d.Reason == intents.ReasonUnauthorized || intents.Misrouted(d) {
		return false
	}
	return prev == nil || prev.Agent == d.Agent
}

// recordedOutside returns the decision recorded for an id the window does
// not hold, from Config.Recorded.
func (e *Engine) recordedOutside(id string) (*intents.Decision, bool) {
	if e.cfg.Recorded == nil || id == "" {
		return nil, false
	}
	if e.cfg.RecordedMax != "" && id > e.forgotten {
		return nil, false // younger than any id with a record outside the window
	}
	return e.cfg.Recorded(id)
}
