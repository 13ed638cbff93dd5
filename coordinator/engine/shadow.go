package engine

import (
	"fmt"

	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
)

// Shadow rules are decided beside the enforced ones and decide nothing.
// Before an intent is decided, a probe decides it under the shadow set —
// the rules file with its warn and audit rules in force, or the rules
// event's shadow file, or Config.WhatIf — against the same state and
// transactions in flight, with the intent's event not yet recorded. The
// probe runs the engine's own decision code with emit muted: nothing it
// emits is folded or handed out, so it changes nothing. When the decision
// the enforced rules then make differs from the probe's, a shadow event
// records both after it, and a divergence of a rule in warn mode is also
// a warning on the decision.

// probe is what a shadow decision found: the first decision of the intent
// it decided, or the error that stopped it.
type probe struct {
	id  string
	d   *intents.Decision
	err string
	// also is the detail of the first other decision it would have made
	// (a transaction it would have preempted), to say why when its own
	// decision says nothing.
	also string
}

// setShadow puts the shadow rules of a rules event in force: its shadow
// file (mode its shadow mode, audit by default), or its file's rules in
// warn or audit mode, or Config.WhatIf whatever the event says.
func (e *Engine) setShadow(r *intents.Rules, live *rules.Set) error {
	e.shadow, e.shadowMode = nil, intents.ModeAudit
	switch {
	case e.whatif != nil:
		e.shadow = e.whatif
	case r != nil && len(r.Shadow) > 0:
		set, err := rules.CompileShadow(r.Shadow, e.comp)
		if err != nil {
			return fmt.Errorf("the shadow rules: %w", err)
		}
		e.shadow = set
		if r.ShadowMode == intents.ModeWarn {
			e.shadowMode = intents.ModeWarn
		}
	case live.HasShadow():
		set, err := rules.CompileShadow(r.File, e.comp)
		if err != nil {
			return fmt.Errorf("the rules in warn or audit mode: %w", err)
		}
		e.shadow = set
	}
	return nil
}

// Shadow returns the rules decided in the shadow (nil: none).
func (e *Engine) Shadow() *rules.Set { return e.shadow }

// shadowProbe decides in under the shadow rules, as submit would after
// recording its event, and keeps the decision for decide to compare. A
// panic in it is the probe's error: a shadow rule that fails never delays
// or changes the decision.
func (e *Engine) shadowProbe(agent, sender string, in *intents.Intent, size, headers int) {
	live, liveBuckets := e.rules, e.buckets
	pr := &probe{id: in.ID}
	e.rules, e.buckets, e.probe = e.shadow, e.shadowBuckets, pr
	if e.rules.Empty() {
		e.rules = nil
	}
	defer func() {
		if r := recover(); r != nil {
			pr.err = fmt.Sprintf("deciding under the shadow rules failed: %v", r)
		}
		e.rules, e.buckets, e.probe = live, liveBuckets, nil
		e.shadowed = pr
	}()
	admitted, retry := e.admit(sender, e.now)
	e.decideReceived(agent, sender, in, size, headers, admitted, retry)
}

// muted is emit while a probe runs: the event is not recorded, only the
// probed intent's first decision is kept.
func (e *Engine) muted(v *intents.Event) {
	d := v.Decision
	switch {
	case d == nil || v.Type != intents.EventDecision:
	case e.probe.d == nil && d.Intent == e.probe.id:
		cp := *d
		e.probe.d = &cp
	case e.probe.also == "":
		e.probe.also = fmt.Sprintf("%s %s of agent %s: %s", d.Outcome, d.Intent, d.Agent, d.Detail)
	}
}

// diverged compares d, the enforced decision of the probed intent, with
// the probe's, and returns the shadow event's payload when they differ.
func (e *Engine) diverged(p *probe, d *intents.Decision) *intents.Shadow {
	decided := decisionKey(d.Outcome, d.Reason)
	switch {
	case d.Duplicate:
		return nil
	case p.d != nil && decisionKey(p.d.Outcome, p.d.Reason) == decided:
		// The same decision: an invariant both sets hold that failed
		// fails the enforced decision as well.
		return nil
	case p.err != "":
		return &intents.Shadow{Kind: intents.ShadowError, Mode: intents.ModeAudit, Decided: decided, Detail: p.err}
	case p.d == nil:
		return &intents.Shadow{Kind: intents.ShadowError, Mode: intents.ModeAudit, Decided: decided,
			Detail: "the shadow rules made no decision"}
	}
	// The rule that would have decided otherwise; else the enforced one
	// the shadow rules do not have.
	detail := p.d.Detail
	if detail == "" && p.also != "" {
		detail = "it would have " + p.also
	}
	mode, rule := e.shadowMode, rules.Ref(detail)
	if m := e.shadow.ModeOf(rule); rule != "" && (m == intents.ModeWarn || m == intents.ModeAudit) {
		mode = m
	}
	if rule == "" {
		rule = rules.Ref(d.Detail)
	}
	return &intents.Shadow{Kind: intents.ShadowChange, Mode: mode, Rule: rule, Decided: decided,
		WouldBe: p.d.Outcome, Reason: p.d.Reason, Detail: detail}
}

// decisionKey is how decisions are compared and counted: the outcome, and
// the reason after a colon.
func decisionKey(o intents.Outcome, r intents.Reason) string {
	if r != "" {
		return string(o) + ":" + string(r)
	}
	return string(o)
}
