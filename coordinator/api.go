package coordinator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coagent/coagent/conflict"
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
	cfg := micro.Config{
		Name:        "coagent",
		Version:     Version,
		Description: "CoAgent coordinator: intents in, decisions out",
	}
	if s.node != "" {
		// Only the active coordinator of a cluster serves the API.
		cfg.Metadata = map[string]string{"node": s.node, "role": intents.RoleActive}
	}
	svc, err := micro.AddService(s.nc, cfg)
	if err != nil {
		return nil, fmt.Errorf("coordinator: api: %w", err)
	}
	endpoints := []struct {
		name, subject string
		handler       micro.HandlerFunc
	}{
		{"state_get", intents.APIStateGet, s.handleStateGet},
		{"txn_list", intents.APITxnList, s.handleTxnList},
		{"log_query", intents.APILogQuery, s.handleLogQuery},
		{"arbiter_resolve", intents.APIArbiterResolve, s.handleResolve},
		{"case_vote", intents.APICaseVote, s.handleVote},
		{"conflicts_top", intents.APIConflictsTop, s.handleConflictsTop},
		{"feed_follow", intents.APIFeedFollow, s.handleFollow},
		{"decision_get", intents.APIDecisionGet, s.handleDecisionGet},
		{"rules_get", intents.APIRulesGet, s.handleRulesGet},
		{"rules_set", intents.APIRulesSet, s.handleRulesSet},
		{"shard_info", intents.APIShardInfo, s.handleShardInfo},
		{"shard_release", intents.APIShardRelease, s.handleShardRelease},
		{"shard_adopt", intents.APIShardAdopt, s.handleShardAdopt},
		{"shard_prepare", intents.APIShardPrepare, s.handleShardPrepare},
		{"shard_finish", intents.APIShardFinish, s.handleShardFinish},
		{"shard_decided", intents.APIShardDecided, s.handleShardDecided},
		// Submit last: the server takes one connection's subscriptions in
		// order, so a client answered by submit finds every other endpoint
		// (its state.get right after a decision is never "no responders").
		{"submit", intents.APISubmit, s.handleSubmit},
		// The same, as the agent the last token names: under auth the
		// server lets an agent publish only on its own, so the identity is
		// checked as on coagent.intents.<agent>.
		{"submit_agent", intents.APISubmit + ".*", s.handleSubmit},
	}
	if s.node != "" {
		// Its own subjects too, as every member of the cluster answers
		// them, so that a read may ask any node by name.
		if err := addNodeEndpoints(svc, s, s.subj, s.node, s.stamp); err != nil {
			svc.Stop()
			return nil, err
		}
	}
	for _, ep := range endpoints {
		if err := svc.AddEndpoint(ep.name, ep.handler, micro.WithEndpointSubject(s.subj.API(ep.subject))); err != nil {
			svc.Stop()
			return nil, fmt.Errorf("coordinator: api endpoint %s: %w", ep.name, err)
		}
	}
	return svc, nil
}

// readSource is where the read-only endpoints (state.get, log.query,
// txn.list) read: the active Service, whose loop owns the engine, or a
// standby member, whose follower folds into its own (Standby). Both
// answer through the same handlers, so a viewer is shown the same either
// way.
type readSource interface {
	// readEngine runs read with the engine, where reading it is safe, and
	// with what the engine holds that may not be durable yet; read returns
	// the event that must be durable before what it read is told (0: none
	// is needed). Then answer is called once, on any goroutine: ok is
	// false when the coordinator cannot answer (it stopped, its log
	// failed, or too many reads wait).
	readEngine(ctx context.Context, read func(*engine.Engine, *unsynced) uint64, answer func(ok bool))
	// readLog runs fn with the event log, for log.query (safe to read
	// beside its writer), and reports false when it cannot (the
	// coordinator stopped).
	readLog(fn func(*eventlog.Log)) bool
	// viewerOf is who a request with the reply subject reply is answered
	// for.
	viewerOf(reply string) viewer
	// xended is closed once a part of a cross-shard apply prepared here
	// ends, or a moment later (a reader that waits for one asks again).
	xended() <-chan struct{}
}

var _ readSource = (*Service)(nil)

// readEngine reads on the loop. A read that showed something in flight is
// held until it is durable (reads.go); the others are answered at once.
func (s *Service) readEngine(ctx context.Context, read func(*engine.Engine, *unsynced) uint64, answer func(ok bool)) {
	if s.leased != nil && !s.leased() {
		answer(false) // another member may have taken over and written since
		return
	}
	var once sync.Once
	answer1 := func(ok bool) { once.Do(func() { answer(ok) }) }
	held, ok := false, true
	if !s.call(ctx, func() {
		if until := read(s.core.Engine(), s.inFlight()); until != 0 && !s.planted().DirtyReads {
			held, ok = s.reads.hold(until, answer1)
		}
	}) {
		answer1(false)
		return
	}
	if !held {
		answer1(ok)
	}
}

func (s *Service) readLog(fn func(*eventlog.Log)) bool {
	if s.leased != nil && !s.leased() {
		return false
	}
	return s.logReaders.read(s.core.Log(), fn)
}

// logReaders lets the API's handlers read the event log until Shutdown
// closes it: a handler still running when the API stopped would read a
// closed log, which Pebble answers with a panic.
type logReaders struct {
	mu      sync.Mutex
	closing bool
	active  sync.WaitGroup
}

// read runs fn with l unless the log is closing; it reports whether it
// did.
func (r *logReaders) read(l *eventlog.Log, fn func(*eventlog.Log)) bool {
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return false
	}
	r.active.Add(1)
	r.mu.Unlock()
	defer r.active.Done()
	fn(l)
	return true
}

// close refuses reads from now on and waits for those under way.
func (r *logReaders) close() {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	r.active.Wait()
}

// stamp returns the options of an answer read at revision rev: the
// headers that say who answered it, in which role, and how current it is
// (intents.HeaderNode, HeaderRole, HeaderRev). A nil stamp adds none.
type stamp func(rev uint64) []micro.RespondOpt

// at returns the options of an answer at rev; none for a nil stamp.
func (st stamp) at(rev uint64) []micro.RespondOpt {
	if st == nil {
		return nil
	}
	return st(rev)
}

// shard returns st with the header that names the shard that answered
// (intents.HeaderShard) besides.
func (st stamp) shard(name string) stamp {
	return func(rev uint64) []micro.RespondOpt {
		return append(st.at(rev), micro.WithHeaders(micro.Headers{intents.HeaderShard: {name}}))
	}
}

// stampOf returns the stamp of node's answers in role.
func stampOf(node, role string) stamp {
	return func(rev uint64) []micro.RespondOpt {
		return []micro.RespondOpt{micro.WithHeaders(micro.Headers{intents.HeaderNode: {node}, intents.HeaderRole: {role},
			intents.HeaderRev: {strconv.FormatUint(rev, 10)}})}
	}
}

// addNodeEndpoints adds to svc the read-only endpoints of node's own
// subjects (intents.Subjects.NodeAPI), answered from r with st.
func addNodeEndpoints(svc micro.Service, r readSource, subj intents.Subjects, node string, st stamp) error {
	endpoints := []struct {
		name, subject string
		handler       micro.HandlerFunc
	}{
		{"node_state_get", intents.APIStateGet, func(req micro.Request) { answerStateGet(r, st, req) }},
		{"node_txn_list", intents.APITxnList, func(req micro.Request) { answerTxnList(r, st, req) }},
		{"node_log_query", intents.APILogQuery, func(req micro.Request) { answerLogQuery(r, st, req) }},
	}
	for _, ep := range endpoints {
		if err := svc.AddEndpoint(ep.name, ep.handler, micro.WithEndpointSubject(subj.NodeAPI(node, ep.subject))); err != nil {
			return fmt.Errorf("coordinator: api endpoint %s: %w", ep.name, err)
		}
	}
	return nil
}

// maxSubmitWait bounds the wait a submit asks for (Coagent-Wait-Ms); past
// it the interim decision is the answer, as past any wait.
const maxSubmitWait = 10 * time.Minute

// The error codes of the API besides the rejection reasons of SPEC §3.
const (
	codeUnavailable = intents.CodeUnavailable
	codeInternal    = intents.CodeInternal
)

func replyError[C ~string](req micro.Request, code C, format string, args ...any) {
	_ = req.Error(string(code), fmt.Sprintf(format, args...), nil)
}

// replyErrorLater is replyError for a request answered after its handler
// returned (a submit, answered by the loop or the output stage): the
// service reads what Error records of the request once the handler
// returns, so a later Error races with that read. The same headers go by
// Respond, which records nothing unless the reply fails.
func replyErrorLater[C ~string](req micro.Request, code C, format string, args ...any) {
	_ = req.Respond(nil, micro.WithHeaders(micro.Headers{micro.ErrorHeader: {fmt.Sprintf(format, args...)}, micro.ErrorCodeHeader: {string(code)}}))
}

// respond answers req with v as JSON. A reply that does not encode (a
// value JSON cannot hold, from a log older than the checks that keep such
// values out) is answered with an internal error rather than left
// unanswered, so the client is told instead of timing out.
func respond(req micro.Request, v any, opts ...micro.RespondOpt) {
	data, err := json.Marshal(v)
	if err != nil {
		replyError(req, codeInternal, "the reply does not encode as JSON: %v", err)
		return
	}
	_ = req.Respond(data, opts...)
}

// handleSubmit puts an API submit in the intake and returns: the output
// stage answers it once its decision is durable (final, or the latest
// interim one once its wait ends), so no submit waits on another, and a
// full intake is answered unavailable at once: the same intent may be sent
// again, and is decided once.
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
	sent, txn := s.forward(req, agent, req.Headers().Get(intents.HeaderClaimNext))
	if sent {
		return
	}
	select {
	case s.submits <- struct{}{}:
	default:
		replyError(req, codeUnavailable, "coordinator: %d submits already wait for their decisions; send the same intent again later", cap(s.submits))
		return
	}
	sub := &submit{req: req, agent: agent, txn: txn, deadline: s.opts.Now().Add(wait), release: func() { <-s.submits }}
	if lane := req.Headers().Get(intents.HeaderClaimNext); lane != "" {
		if err := intents.CheckPath(lane); err != nil {
			<-s.submits
			replyError(req, intents.ReasonInvalid, "header %s = %q: %v", intents.HeaderClaimNext, lane, err)
			return
		}
		sub.lane = lane
	}
	select {
	case s.intake <- input{sub: sub, at: time.Now()}:
	default:
		sub.answer(nil)
		s.log.Debug("intake full; a submit was answered unavailable")
	}
}

func (s *Service) handleStateGet(req micro.Request) {
	if s.forwardRead(req) {
		return
	}
	answerStateGet(s, s.stamp, req)
}

func (s *Service) handleTxnList(req micro.Request) { answerTxnList(s, s.stamp, req) }

func (s *Service) handleLogQuery(req micro.Request) {
	if s.forwardLogQuery(req) {
		return
	}
	answerLogQuery(s, s.stamp, req)
}

// answerStateGet answers a state.get from r, its answer stamped with st.
func answerStateGet(r readSource, st stamp, req micro.Request) {
	var body struct {
		Paths []string `json:"paths"`
		// Mod asks for each path's mod_time and mod_agent besides, which
		// SPEC §6's reply has not: a client that decodes it strictly
		// gets them only when it asks.
		Mod bool `json:"mod,omitempty"`
	}
	if err := strictJSON(req.Data(), &body); err != nil {
		replyError(req, intents.ReasonInvalid, "state.get: %v", err)
		return
	}
	for i, p := range body.Paths {
		if p == "" {
			continue // the whole tree, as etcd's get "" --prefix
		}
		if err := intents.CheckPath(p); err != nil {
			replyError(req, intents.ReasonInvalid, "state.get: paths[%d] = %q: %v", i, p, err)
			return
		}
	}
	stateGet(context.Background(), r, body.Paths, r.viewerOf(req.Reply()), func(out *stateReply, err error) {
		if err != nil {
			replyErrorLater(req, codeUnavailable, "%v", err)
			return
		}
		if !body.Mod {
			respond(req, out, st.at(out.at)...)
			return
		}
		// The answer may come on the output stage, which must not wait on
		// the log's reads: the changes' times and agents are read apart.
		go func() {
			modOf(r, out)
			respond(req, out, st.at(out.at)...)
		}()
	})
}

// modOf sets, on each value of out that exists, the time and the agent of
// the change at its mod_rev, from the event log, which holds it by then
// (the read waited for it to be durable). A change the log no longer holds
// (compacted) leaves them out; so does one no agent made (a reclaim).
func modOf(r readSource, out *stateReply) {
	r.readLog(func(l *eventlog.Log) {
		for p, v := range out.Values {
			if !v.Exists || v.ModRev == 0 {
				continue
			}
			ev, err := l.Event(v.ModRev)
			if err != nil {
				continue
			}
			t := ev.Time
			v.ModTime, v.ModAgent = &t, ev.Agent
			out.Values[p] = v
		}
	})
}

// answerTxnList answers a txn.list from r, its answer stamped with st.
func answerTxnList(r readSource, st stamp, req micro.Request) {
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
	txnList(context.Background(), r, f, r.viewerOf(req.Reply()), func(out any, rev uint64, err error) {
		if err != nil {
			replyErrorLater(req, codeUnavailable, "%v", err)
			return
		}
		respond(req, out, st.at(rev)...)
	})
}

// answerLogQuery answers a log.query from r, its answer stamped with st.
func answerLogQuery(r readSource, st stamp, req micro.Request) {
	var body struct {
		Agent  string `json:"agent"`
		Path   string `json:"path"`
		Type   string `json:"type"`
		Txn    string `json:"txn"`
		Trace  string `json:"trace"`
		Intent string `json:"intent"`
		From   uint64 `json:"from"`
		Limit  int    `json:"limit"`
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
	case body.Intent != "" && !canonicalULID(body.Intent):
		replyError(req, intents.ReasonInvalid, "log.query: intent %q: not a ULID in canonical upper case", body.Intent)
		return
	}
	// A trace is named by its id or by a whole traceparent.
	trace := body.Trace
	if trace != "" {
		var err error
		if trace, err = intents.ParseTraceID(trace); err != nil {
			replyError(req, intents.ReasonInvalid, "log.query: trace %q: %v", body.Trace, err)
			return
		}
	}
	out, rev, err := logQuery(r, eventlog.Query{Agent: body.Agent, Path: body.Path, Type: intents.EventType(body.Type),
		Txn: body.Txn, Trace: trace, Intent: body.Intent, From: body.From, Limit: min(max(body.Limit, 0), 1000)}, r.viewerOf(req.Reply()))
	switch {
	case errors.Is(err, errUnavailable):
		replyError(req, codeUnavailable, "log.query: %v", err)
		return
	case err != nil:
		replyError(req, codeInternal, "log.query: %v", err)
		return
	}
	respond(req, out, st.at(rev)...)
}

// canonicalULID says whether id is an intent id as a valid intent spells
// it: a ULID in canonical upper case.
func canonicalULID(id string) bool {
	_, err := ulid.ParseStrict(id)
	return err == nil && strings.ToUpper(id) == id
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
	if !canonicalULID(body.Intent) {
		replyError(req, intents.ReasonInvalid, "decision.get: intent %q: not a ULID in canonical upper case", body.Intent)
		return
	}
	s.decisionGet(context.Background(), body.Intent, func(d *intents.Decision, err error) {
		if err != nil {
			replyErrorLater(req, codeUnavailable, "%v", err)
			return
		}
		if v := s.viewerOf(req.Reply()); d == nil || !v.all && d.Agent != v.Agent {
			if d == nil && s.forwardDecisionGet(req) {
				return // another shard may have decided it
			}
			replyErrorLater(req, codeNotFound, "decision.get: no decision recorded for intent %s", body.Intent)
			return
		}
		respond(req, d)
	})
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
	settled, err := s.apiResolve(context.Background(), res)
	var refused *engine.ResolveError
	switch {
	case errors.As(err, &refused):
		replyError(req, refused.Reason, "arbiter.resolve: %s", refused.Detail)
	case err != nil:
		replyErrorLater(req, codeUnavailable, "%v", err)
	default:
		// settled is false for a vote a panel counts but that did not
		// settle the case yet.
		respond(req, map[string]bool{"ok": true, "settled": settled})
	}
}

// handleVote records an approver's vote on an approval case (case.vote):
// {"case", "agent", "verdict": "approve"|"deny", "rationale"}. Under
// Options.Auth the voter is the agent whose inbox the reply goes to (see
// viewerOf), and a vote in another's name is refused; without it, agent
// is required. The answer says what the vote did: the case's intent's
// decision, when the vote decided it.
func (s *Service) handleVote(req micro.Request) {
	v, err := intents.DecodeVote(req.Data())
	if err != nil {
		replyError(req, intents.ReasonInvalid, "case.vote: %v", err)
		return
	}
	if s.opts.Auth {
		who := s.viewerOf(req.Reply()).Agent
		switch {
		case who == "":
			replyError(req, intents.ReasonUnauthorized, "case.vote: a client that is no agent (its reply subject is no agent's inbox) may not vote")
			return
		case v.Agent == "":
			v.Agent = who
		case v.Agent != who:
			replyError(req, intents.ReasonUnauthorized, "case.vote: agent %s may not vote as agent %s", who, v.Agent)
			return
		}
	}
	if v.Agent == "" {
		replyError(req, intents.ReasonInvalid, "case.vote: vote field agent: missing")
		return
	}
	d, err := s.apiVote(context.Background(), v)
	var refused *engine.VoteError
	switch {
	case errors.As(err, &refused):
		replyError(req, refused.Reason, "case.vote: %s", refused.Detail)
	case err != nil:
		replyErrorLater(req, codeUnavailable, "%v", err)
	default:
		reply := map[string]any{"ok": true, "case": v.Case, "agent": v.Agent, "verdict": v.Verdict}
		if d != nil {
			reply["decision"] = d
		}
		respond(req, reply)
	}
}

// handleRulesSet puts the request body, a rules file, in force. The reply
// is the rules event's record (hash, source) without the file.
//
// Under Options.Auth only an agent with the role admin may: the reply goes
// to the inbox of the agent asking (see viewerOf), and any other is
// answered unauthorized, naming the role. (The embedded server of `coagent
// serve --auth` lets no one else publish here; this holds as well behind a
// server whose permissions are the operator's.) The roles of
// Options.Roles are merged into the file first, as serve merges them into
// its --rules file, so that a file put in force here keeps the registry's
// roles, the admin's own among them.
func (s *Service) handleRulesSet(req micro.Request) {
	if s.opts.Auth {
		v := s.viewerOf(req.Reply())
		if !v.set.Holds(v.Viewer, rules.RoleAdmin) {
			who := "a client that is no agent (its reply subject is no agent's inbox)"
			if v.Agent != "" {
				who = "agent " + v.Agent
			}
			replyError(req, intents.ReasonUnauthorized, "rules.set: %s may not put rules in force: it needs the role %s", who, rules.RoleAdmin)
			return
		}
	}
	source := req.Headers().Get(HeaderRulesSource)
	if source == "" {
		source = "api"
	}
	file := req.Data()
	if s.opts.Roles != nil {
		var err error
		if file, err = rules.MergeRoles(file, s.opts.Roles()); err != nil {
			replyError(req, intents.ReasonInvalid, "rules.set: %v", err)
			return
		}
	}
	shadow := req.Headers().Get(HeaderRulesShadow)
	var rec *intents.Rules
	var err error
	if shadow != "" {
		rec, err = s.SetShadowRules(context.Background(), file, shadow, source)
	} else {
		rec, err = s.SetRules(context.Background(), file, source)
	}
	var bad *rules.Error
	switch {
	case errors.As(err, &bad):
		replyError(req, intents.ReasonInvalid, "rules.set: %v", err)
	case err != nil:
		replyErrorLater(req, codeUnavailable, "%v", err)
	case shadow != "":
		respond(req, map[string]string{"hash": rec.ShadowHash, "source": rec.Source, "shadow": cmp.Or(rec.ShadowMode, intents.ModeAudit)})
	default:
		respond(req, map[string]string{"hash": rec.Hash, "source": rec.Source})
	}
}

// HeaderRulesSource names where a rules file given to rules.set comes from
// (a path); the default is "api". HeaderRulesShadow, audit or warn, puts
// the file in force in the shadow instead (coagent rules set --shadow):
// decided beside the rules in force, enforced never.
const (
	HeaderRulesSource = "Coagent-Rules-Source"
	HeaderRulesShadow = "Coagent-Rules-Shadow"
)

// handleRulesGet answers the rules in force: {"hash", "source", "file"},
// or {} when none were ever set.
func (s *Service) handleRulesGet(req micro.Request) {
	rec, err := s.Rules(context.Background())
	if err != nil {
		replyErrorLater(req, codeUnavailable, "%v", err)
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
		replyErrorLater(req, codeUnavailable, "%v", err)
		return
	}
	respond(req, map[string]any{"spots": spots})
}

// stateReply is the answer of state.get.
type stateReply struct {
	Rev    uint64                `json:"rev"`
	Values map[string]stateValue `json:"values"`
	// at is the engine's last event when it was read (Rev is its last
	// change's), for the answer's stamp.
	at uint64
}

type stateValue struct {
	Exists  bool   `json:"exists"`
	Value   any    `json:"value,omitempty"`
	Version uint64 `json:"version"`
	ModRev  uint64 `json:"mod_rev,omitempty"`
	// ModTime and ModAgent are when the change at ModRev was made and by
	// whom, so that an agent or a person can tell a stale task.
	ModTime  *time.Time `json:"mod_time,omitempty"`
	ModAgent string     `json:"mod_agent,omitempty"`
	// Redacted lists what the board rules' readers keep from the reader:
	// the path itself (then nothing of it is shown, not even whether it
	// exists) or paths under it, removed from the value.
	Redacted []string `json:"redacted,omitempty"`
}

// stateGet reads paths as v may see them and hands the reply to answer:
// at once, at the durable revision, when none of them has a change in
// flight; else at the engine's revision, once that change is durable.
func stateGet(ctx context.Context, r readSource, paths []string, v viewer, answer func(*stateReply, error)) {
	stateGetBy(ctx, r, paths, v, time.Now().Add(xReadWait), answer)
}

// stateGetBy is stateGet, waiting until deadline at most for the parts of
// cross-shard applies that hold the paths (engine.XHolds) to end.
func stateGetBy(ctx context.Context, r readSource, paths []string, v viewer, deadline time.Time, answer func(*stateReply, error)) {
	out := &stateReply{Values: map[string]stateValue{}}
	var held <-chan struct{}
	r.readEngine(ctx, func(eng *engine.Engine, u *unsynced) uint64 {
		if eng.XHolds(paths) {
			held = r.xended()
			return 0
		}
		t := eng.State()
		until := u.paths(paths)
		if until != 0 {
			out.Rev, out.at = t.Rev(), eng.Seq()
		} else {
			out.Rev, out.at = u.rev, u.seq
		}
		for _, p := range paths {
			e := t.Lookup(p)
			value, hidden := v.value(p, e.Value)
			if len(hidden) == 1 && hidden[0] == p {
				out.Values[p] = stateValue{Redacted: hidden}
				continue
			}
			out.Values[p] = stateValue{Exists: e.Exists, Value: value, Version: e.Version, ModRev: e.ModRev, Redacted: hidden}
		}
		if until != 0 {
			return eng.Seq()
		}
		return 0
	}, func(ok bool) {
		if ok && held != nil {
			go func() {
				wait := time.NewTimer(time.Until(deadline))
				defer wait.Stop()
				select {
				case <-held:
					stateGetBy(ctx, r, paths, v, deadline, answer)
				case <-wait.C:
					answer(nil, fmt.Errorf("%w: a part of a cross-shard apply holds the paths, and its coordinator has not decided it", errUnavailable))
				case <-ctx.Done():
					answer(nil, ctx.Err())
				}
			}()
			return
		}
		if !ok {
			answer(nil, errUnavailable)
			return
		}
		answer(out, nil)
	})
}

// decisionGet hands answer the decision recorded for intent id, nil when
// there is none: the engine's (the latest, interim ones included), once it
// is durable, or, for an id older than its window, the log's record.
func (s *Service) decisionGet(ctx context.Context, id string, answer func(*intents.Decision, error)) {
	var d *intents.Decision
	s.readEngine(ctx, func(eng *engine.Engine, u *unsynced) uint64 {
		d, _ = eng.Decision(id)
		return u.intent(id)
	}, func(ok bool) {
		if !ok {
			answer(nil, errUnavailable)
			return
		}
		if d != nil {
			answer(d, nil)
			return
		}
		var err error
		if !s.logReaders.read(s.core.Log(), func(l *eventlog.Log) { d, err = l.Decision(id) }) {
			answer(nil, errUnavailable)
			return
		}
		if errors.Is(err, eventlog.ErrNotFound) {
			answer(nil, nil)
			return
		}
		answer(d, err)
	})
}

type txnFilter struct {
	Agent string `json:"agent,omitempty"`
	Path  string `json:"path,omitempty"`
	// Claims asks for the task claims under leases besides ("claims" in
	// the answer), which SPEC §6's reply has not: a client that decodes
	// it strictly gets them only when it asks.
	Claims bool `json:"claims,omitempty"`
	// Cases asks for the open arbiter cases besides ("cases" in the
	// answer): each with its escalated intent's agent, its deadline and
	// conflicts, and the case as v may see it.
	Cases bool `json:"cases,omitempty"`
}

// txnList hands answer the transactions in flight and the sequence
// number they are listed at: the durable one, or, when anything is in
// flight, the engine's last event once it is durable. A fence is a capability, and a
// propose's writes may carry values: v sees its own transactions whole,
// and another agent's without its fence and with only the paths and ops of
// its writes (an observer sees everything).
func txnList(ctx context.Context, r readSource, f txnFilter, v viewer, answer func(any, uint64, error)) {
	var out, claims, cases []map[string]any
	var rev uint64
	r.readEngine(ctx, func(eng *engine.Engine, u *unsynced) uint64 {
		until := u.any()
		rev = u.seq
		if until != 0 {
			rev = eng.Seq()
		}
		for _, t := range eng.Txns() {
			if f.Agent != "" && t.Agent != f.Agent {
				continue
			}
			if f.Path != "" && !slices.ContainsFunc(t.Writes, func(w intents.Write) bool { return intents.Overlaps(w.Path, f.Path) }) &&
				!slices.ContainsFunc(t.Reads, func(r intents.Read) bool { return intents.Overlaps(r.Path, f.Path) }) {
				continue
			}
			row := map[string]any{"txn": t.Txn, "agent": t.Agent, "reads": t.Reads, "writes": t.Writes, "lease_expires": t.LeaseExpires}
			if v.all || t.Agent == v.Agent {
				row["fence"] = t.Fence
			} else {
				writes := make([]intents.Write, len(t.Writes))
				for i, w := range t.Writes {
					writes[i] = intents.Write{Path: w.Path, Op: w.Op}
				}
				row["writes"] = writes
			}
			out = append(out, row)
		}
		if f.Claims {
			claims = []map[string]any{}
			for _, c := range eng.Claims() {
				if f.Agent != "" && c.Agent != f.Agent || f.Path != "" && !intents.Overlaps(c.Task, f.Path) || !v.all && !v.set.MayRead(v.Viewer, c.Task) {
					continue
				}
				row := map[string]any{"task": c.Task, "agent": c.Agent, "txn": c.Lease, "lease_expires": c.Expires}
				if v.all || c.Agent == v.Agent {
					row["fence"] = c.Fence // a capability: the owner's own
				}
				claims = append(claims, row)
			}
		}
		if f.Cases {
			cases = []map[string]any{}
			for _, id := range eng.Parked() {
				cs, ok := eng.Case(id)
				if !ok {
					continue
				}
				in := cs.Escalated()
				if in == nil || f.Agent != "" && in.Agent != f.Agent ||
					f.Path != "" && !slices.ContainsFunc(cs.Conflicts, func(c intents.Conflict) bool { return intents.Overlaps(c.Path, f.Path) }) {
					continue
				}
				seen := v.escalation(cs)
				row := map[string]any{"id": cs.ID, "kind": cmp.Or(cs.Kind, intents.CaseConflict), "agent": in.Agent, "intent_kind": in.Kind,
					"deadline": cs.Deadline, "conflicts": seen.Conflicts, "case": seen}
				if a := cs.Approval; a != nil {
					row["by"], row["quorum"], row["approvals"] = a.By, a.Quorum, len(engine.Approvals(a.Votes))
				}
				cases = append(cases, row)
			}
			// The tasks whose claim ended with effects pending wait for a
			// person to declare them: cases too, of kind reconcile.
			for _, r := range eng.Reconciles() {
				if f.Agent != "" || f.Path != "" && !intents.Overlaps(r.Task, f.Path) || !v.all && !v.set.MayRead(v.Viewer, r.Task) {
					continue
				}
				value, _ := eng.State().Get(r.Task)
				seen, _ := v.value(r.Task, value)
				cases = append(cases, map[string]any{"id": r.Task, "kind": "reconcile", "pending": r.Pending, "mod_rev": r.ModRev, "case": seen})
			}
		}
		// A transaction begins and ends with a decision; which ones a
		// filter would show is not worth telling apart.
		if until != 0 {
			return eng.Seq()
		}
		return 0
	}, func(ok bool) {
		if !ok {
			answer(nil, 0, errUnavailable)
			return
		}
		if out == nil {
			out = []map[string]any{}
		}
		reply := map[string]any{"txns": out}
		if claims != nil {
			reply["claims"] = claims
		}
		if cases != nil {
			reply["cases"] = cases
		}
		answer(reply, rev, nil)
	})
}

// logQuery answers log.query as v may see the log (see viewer.event): a
// page may hold fewer events than the query's limit, none even, when some
// are not v's to see; next goes on after them all. rev is the log's last
// event before it was read: the answer saw every event up to it.
func logQuery(r readSource, q eventlog.Query, v viewer) (out any, rev uint64, err error) {
	var evs []*intents.Event
	var next uint64
	if !r.readLog(func(l *eventlog.Log) {
		rev = l.LastSeq()
		evs, next, err = l.Query(q)
	}) {
		return nil, 0, errUnavailable
	}
	if err != nil {
		return nil, 0, err
	}
	shown := make([]*intents.Event, 0, len(evs))
	for _, ev := range evs {
		if ev, ok := v.event(ev); ok {
			shown = append(shown, ev)
		}
	}
	return map[string]any{"events": shown, "next": next}, rev, nil
}

// conflictsTop returns the places with the most conflicts, as v may see
// them: not the boards and documents kept from it whole, and of the pairs of
// agents only those it is one of (an observer sees all).
func (s *Service) conflictsTop(ctx context.Context, limit int, v viewer) ([]conflict.Spot, error) {
	var all []conflict.Spot
	if !s.call(ctx, func() { all = s.hot.Top(s.opts.Now(), 0) }) {
		return nil, errUnavailable
	}
	out := []conflict.Spot{}
	for _, sp := range all {
		if len(out) == limit {
			break
		}
		if !v.all {
			switch sp.Kind {
			case conflict.SpotPair:
				a, b, _ := strings.Cut(sp.Name, "/")
				if a != v.Agent && b != v.Agent {
					continue
				}
			case conflict.SpotPrefix:
				if v.set.Hidden(v.Viewer, sp.Name) {
					continue
				}
			}
		}
		out = append(out, sp)
	}
	return out, nil
}

// apiResolve applies a resolution on the loop and answers once its events
// are durable and published.
func (s *Service) apiResolve(ctx context.Context, res *intents.Resolution) (settled bool, err error) {
	var rerr error
	done := make(chan struct{})
	ok := s.call(ctx, func() {
		var evs []*intents.Event
		evs, rerr = s.core.Resolve(s.opts.Now(), res)
		settled = slices.ContainsFunc(evs, func(ev *intents.Event) bool {
			return ev.Type == intents.EventResolve && ev.Intent == res.Escalation
		})
		s.flushWith(done)
	})
	if !ok {
		return false, errUnavailable
	}
	select {
	case <-done:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if s.broken.Load() {
		return false, errUnavailable
	}
	return settled, rerr
}

// apiVote hands v to the engine and waits until what it did is durable;
// it returns the decision of the case's intent, when the vote made one.
func (s *Service) apiVote(ctx context.Context, v *intents.Vote) (*intents.Decision, error) {
	var verr error
	var d *intents.Decision
	done := make(chan struct{})
	ok := s.call(ctx, func() {
		var evs []*intents.Event
		evs, verr = s.core.Vote(s.opts.Now(), v)
		for _, ev := range evs {
			if ev.Decision != nil && ev.Decision.Intent == v.Case {
				d = ev.Decision
			}
		}
		s.flushWith(done)
	})
	if !ok {
		return nil, errUnavailable
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if s.broken.Load() {
		return nil, errUnavailable
	}
	return d, verr
}

// SetRules puts a rules file in force (see package rules) and returns once
// the change is durable; source says where it came from (a path, "api").
// A file that does not compile is an error (a *rules.Error naming the
// field) and changes nothing. It returns the rules event's record.
func (s *Service) SetRules(ctx context.Context, file []byte, source string) (*intents.Rules, error) {
	return s.setRules(ctx, func() ([]*intents.Event, error) { return s.core.SetRules(s.opts.Now(), file, source) })
}

// SetShadowRules puts a rules file in force in the shadow, as SetRules
// puts one in force (engine.SetShadowRules): mode is audit (or empty) or
// warn; an empty file removes the shadow file.
func (s *Service) SetShadowRules(ctx context.Context, file []byte, mode, source string) (*intents.Rules, error) {
	return s.setRules(ctx, func() ([]*intents.Event, error) { return s.core.SetShadowRules(s.opts.Now(), file, mode, source) })
}

func (s *Service) setRules(ctx context.Context, set func() ([]*intents.Event, error)) (*intents.Rules, error) {
	var rerr error
	var rec *intents.Rules
	if err := s.durably(ctx, func() {
		var evs []*intents.Event
		evs, rerr = set()
		for _, ev := range evs {
			if ev.Rules != nil {
				rec = ev.Rules
			}
		}
	}); err != nil {
		return nil, err
	}
	return rec, rerr
}

// durably runs fn on the loop, which may hand the engine a call whose
// events join the next group, and returns once that group is durable:
// errUnavailable when the loop does not run or the log failed, ctx's
// error when it ends first.
func (s *Service) durably(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	if !s.call(ctx, func() {
		fn()
		s.flushWith(done)
	}) {
		return errUnavailable
	}
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.broken.Load() {
		return errUnavailable
	}
	return nil
}

// Rules returns the rules in force (nil when none were ever set).
func (s *Service) Rules(ctx context.Context) (*intents.Rules, error) {
	var rec *intents.Rules
	if !s.call(ctx, func() { rec, _ = s.core.Engine().Rules() }) {
		return nil, errUnavailable
	}
	return rec, nil
}
