package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
)

// Version is reported by the micro service.
const Version = "0.1.0"

// startAPI registers the NATS micro service "coagent" with the endpoints of
// SPEC §6, so `nats micro ls|info|stats` show it.
func (s *Service) startAPI() (micro.Service, error) {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        "coagent",
		Version:     Version,
		Description: "CoAgent coordinator: intents in, decisions out",
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: api: %w", err)
	}
	endpoints := []struct {
		name, subject string
		handler       micro.HandlerFunc
	}{
		{"submit", "submit", s.handleSubmit},
		// The same, as the agent the last token names: under auth the
		// server lets an agent publish only on its own, so the identity is
		// checked as on coagent.intents.<agent>.
		{"submit_agent", "submit.*", s.handleSubmit},
		{"state_get", "state.get", s.handleStateGet},
		{"txn_list", "txn.list", s.handleTxnList},
		{"log_query", "log.query", s.handleLogQuery},
		{"arbiter_resolve", "arbiter.resolve", s.handleResolve},
		{"conflicts_top", "conflicts.top", s.handleConflictsTop},
		{"feed_follow", "feed.follow", s.handleFollow},
		{"decision_get", "decision.get", s.handleDecisionGet},
		{"rules_get", "rules.get", s.handleRulesGet},
		{"rules_set", "rules.set", s.handleRulesSet},
	}
	for _, ep := range endpoints {
		if err := svc.AddEndpoint(ep.name, ep.handler, micro.WithEndpointSubject(s.subj.API(ep.subject))); err != nil {
			svc.Stop()
			return nil, fmt.Errorf("coordinator: api endpoint %s: %w", ep.name, err)
		}
	}
	return svc, nil
}

// maxSubmitWait bounds the wait a submit asks for (Coagent-Wait-Ms); past
// it the interim decision is the answer, as past any wait.
const maxSubmitWait = 10 * time.Minute

// The error codes of the API besides the rejection reasons of SPEC §3.
const (
	codeUnavailable = "unavailable"
	codeInternal    = "internal"
)

func replyError[C ~string](req micro.Request, code C, format string, args ...any) {
	_ = req.Error(string(code), fmt.Sprintf(format, args...), nil)
}

// respond answers req with v as JSON. A reply that does not encode (a
// value JSON cannot hold, from a log older than the checks that keep such
// values out) is answered with an internal error rather than left
// unanswered, so the client is told instead of timing out.
func respond(req micro.Request, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		replyError(req, codeInternal, "the reply does not encode as JSON: %v", err)
		return
	}
	_ = req.Respond(data)
}

func (s *Service) handleSubmit(req micro.Request) {
	wait := s.opts.SubmitWait
	if h := req.Headers().Get(intents.HeaderWait); h != "" {
		ms, err := strconv.ParseInt(h, 10, 64)
		if err != nil || ms < 0 {
			replyError(req, intents.ReasonInvalid, "header %s = %q: not a number of milliseconds", intents.HeaderWait, h)
			return
		}
		// Compared in milliseconds: a huge value would overflow a Duration.
		// A submit holds one of MaxSubmits slots while it waits, so the
		// wait is bounded.
		wait = time.Duration(min(ms, maxSubmitWait.Milliseconds())) * time.Millisecond
	}
	// The endpoints are submit and submit.*, so the subject is one of them.
	agent, _ := s.subj.SubmitAgent(req.Subject())
	// A submit waits for its decision, up to wait: it must not hold up the
	// requests behind it, which micro hands to this handler one at a time.
	select {
	case s.submits <- struct{}{}:
	default:
		replyError(req, codeUnavailable, "coordinator: %d submits already wait for their decisions; send the same intent again later", cap(s.submits))
		return
	}
	go func() {
		defer func() { <-s.submits }()
		d, err := s.apiSubmit(context.Background(), agent, req.Data(), wait)
		if err != nil {
			replyError(req, codeUnavailable, "%v", err)
			return
		}
		respond(req, d)
	}()
}

func (s *Service) handleStateGet(req micro.Request) {
	var body struct {
		Paths []string `json:"paths"`
	}
	if err := strictJSON(req.Data(), &body); err != nil {
		replyError(req, intents.ReasonInvalid, "state.get: %v", err)
		return
	}
	for i, p := range body.Paths {
		if err := intents.CheckPath(p); err != nil {
			replyError(req, intents.ReasonInvalid, "state.get: paths[%d] = %q: %v", i, p, err)
			return
		}
	}
	out, err := s.stateGet(context.Background(), body.Paths, s.viewerOf(req.Reply()))
	if err != nil {
		replyError(req, codeUnavailable, "%v", err)
		return
	}
	respond(req, out)
}

func (s *Service) handleTxnList(req micro.Request) {
	var f txnFilter
	if len(req.Data()) > 0 {
		if err := strictJSON(req.Data(), &f); err != nil {
			replyError(req, intents.ReasonInvalid, "txn.list: %v", err)
			return
		}
	}
	switch {
	case f.Path != "" && intents.CheckPath(f.Path) != nil:
		replyError(req, intents.ReasonInvalid, "txn.list: path %q: %v", f.Path, intents.CheckPath(f.Path))
		return
	case f.Agent != "" && !intents.ValidSegment(f.Agent):
		replyError(req, intents.ReasonInvalid, "txn.list: agent %q is not an agent name", f.Agent)
		return
	}
	out, err := s.txnList(context.Background(), f, s.viewerOf(req.Reply()))
	if err != nil {
		replyError(req, codeUnavailable, "%v", err)
		return
	}
	respond(req, out)
}

func (s *Service) handleLogQuery(req micro.Request) {
	var body struct {
		Agent string `json:"agent"`
		Path  string `json:"path"`
		Type  string `json:"type"`
		Txn   string `json:"txn"`
		From  uint64 `json:"from"`
		Limit int    `json:"limit"`
	}
	if len(req.Data()) > 0 {
		if err := strictJSON(req.Data(), &body); err != nil {
			replyError(req, intents.ReasonInvalid, "log.query: %v", err)
			return
		}
	}
	switch {
	case body.Path != "" && intents.CheckPath(body.Path) != nil:
		replyError(req, intents.ReasonInvalid, "log.query: path %q: %v", body.Path, intents.CheckPath(body.Path))
		return
	case body.Agent != "" && !intents.ValidSegment(body.Agent):
		replyError(req, intents.ReasonInvalid, "log.query: agent %q is not an agent name", body.Agent)
		return
	case body.Type != "" && !slices.Contains(intents.EventTypes, intents.EventType(body.Type)):
		replyError(req, intents.ReasonInvalid, "log.query: type %q is not an event type", body.Type)
		return
	}
	out, err := s.logQuery(eventlog.Query{Agent: body.Agent, Path: body.Path, Type: intents.EventType(body.Type),
		Txn: body.Txn, From: body.From, Limit: min(max(body.Limit, 0), 1000)}, s.viewerOf(req.Reply()))
	if err != nil {
		replyError(req, codeInternal, "log.query: %v", err)
		return
	}
	respond(req, out)
}

// codeNotFound is decision.get's error for an intent with no recorded
// decision (or one its reader may not see).
const codeNotFound = "not_found"

// handleDecisionGet answers the recorded decision of an intent: final, or
// the latest interim one. Under Auth an agent is answered only its own
// decisions (an observer any): another agent's is not_found, as an
// unknown one is, so the answer says nothing of it.
func (s *Service) handleDecisionGet(req micro.Request) {
	var body struct {
		Intent string `json:"intent"`
	}
	if err := strictJSON(req.Data(), &body); err != nil {
		replyError(req, intents.ReasonInvalid, "decision.get: %v", err)
		return
	}
	if _, err := ulid.ParseStrict(body.Intent); err != nil || strings.ToUpper(body.Intent) != body.Intent {
		replyError(req, intents.ReasonInvalid, "decision.get: intent %q: not a ULID in canonical upper case", body.Intent)
		return
	}
	d, err := s.decisionGet(context.Background(), body.Intent)
	if err != nil {
		replyError(req, codeUnavailable, "%v", err)
		return
	}
	if v := s.viewerOf(req.Reply()); d == nil || !v.all && d.Agent != v.Agent {
		replyError(req, codeNotFound, "decision.get: no decision recorded for intent %s", body.Intent)
		return
	}
	respond(req, d)
}

// strictJSON decodes an API request body, refusing unknown fields.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	return nil
}

func (s *Service) handleResolve(req micro.Request) {
	// The replacement is an intent: decoded as strictly as one.
	res, err := intents.DecodeResolution(req.Data())
	if err != nil {
		replyError(req, intents.ReasonInvalid, "arbiter.resolve: %v", err)
		return
	}
	err = s.apiResolve(context.Background(), res)
	var refused *engine.ResolveError
	switch {
	case errors.As(err, &refused):
		replyError(req, refused.Reason, "arbiter.resolve: %s", refused.Detail)
	case err != nil:
		replyError(req, codeUnavailable, "%v", err)
	default:
		respond(req, map[string]bool{"ok": true})
	}
}

// handleRulesSet puts the request body, a rules file, in force. The reply
// is the rules event's record (hash, source) without the file.
func (s *Service) handleRulesSet(req micro.Request) {
	source := req.Headers().Get(HeaderRulesSource)
	if source == "" {
		source = "api"
	}
	rec, err := s.SetRules(context.Background(), req.Data(), source)
	var bad *rules.Error
	switch {
	case errors.As(err, &bad):
		replyError(req, intents.ReasonInvalid, "rules.set: %v", err)
	case err != nil:
		replyError(req, codeUnavailable, "%v", err)
	default:
		respond(req, map[string]string{"hash": rec.Hash, "source": rec.Source})
	}
}

// HeaderRulesSource names where a rules file given to rules.set comes from
// (a path); the default is "api".
const HeaderRulesSource = "Coagent-Rules-Source"

// handleRulesGet answers the rules in force: {"hash", "source", "file"},
// or {} when none were ever set.
func (s *Service) handleRulesGet(req micro.Request) {
	rec, err := s.Rules(context.Background())
	if err != nil {
		replyError(req, codeUnavailable, "%v", err)
		return
	}
	if rec == nil {
		respond(req, map[string]any{})
		return
	}
	respond(req, rec)
}

func (s *Service) handleConflictsTop(req micro.Request) {
	var body struct {
		Limit int `json:"limit"`
	}
	if len(req.Data()) > 0 {
		if err := strictJSON(req.Data(), &body); err != nil {
			replyError(req, intents.ReasonInvalid, "conflicts.top: %v", err)
			return
		}
	}
	if body.Limit <= 0 {
		body.Limit = 20
	}
	spots, err := s.conflictsTop(context.Background(), body.Limit, s.viewerOf(req.Reply()))
	if err != nil {
		replyError(req, codeUnavailable, "%v", err)
		return
	}
	respond(req, map[string]any{"spots": spots})
}
