package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// Identity is who a person using the console is, under serve --auth: the
// agent whose HTTP token their browser gave, and its roles. The console
// acts as that agent, and never as another.
type Identity struct {
	Agent string   `json:"agent"`
	Roles []string `json:"roles,omitempty"`
}

// ReadOnly reports whether the identity may only look: nobody's (the
// token of --http-token), or an agent whose only role is observer.
func (id Identity) ReadOnly() bool {
	return id.Agent == "" || len(id.Roles) > 0 && !slices.ContainsFunc(id.Roles, func(r string) bool { return r != rules.RoleObserver })
}

// me answers who the page acts as: {"known", "agent", "roles",
// "read_only"}. Unknown (no Config.Identity) means the person names the
// agent they act as, which the coordinator takes as given: there is no
// --auth.
func (b *backend) me(_ context.Context, r *http.Request) (any, error) {
	if b.cfg.Identity == nil {
		return map[string]any{"known": false, "read_only": false}, nil
	}
	id := b.cfg.Identity(r)
	return map[string]any{"known": true, "agent": id.Agent, "roles": id.Roles, "read_only": id.ReadOnly()}, nil
}

// cases answers the open cases, as txn.list lists them with "cases": true
// for whom the console reads as: escalations, approvals, tasks to
// reconcile.
func (b *backend) cases(ctx context.Context, _ *http.Request) (any, error) {
	var reply struct {
		Cases []json.RawMessage `json:"cases"`
	}
	if err := b.request(ctx, intents.APITxnList, map[string]bool{"cases": true}, &reply); err != nil {
		return nil, err
	}
	if reply.Cases == nil {
		reply.Cases = []json.RawMessage{}
	}
	return map[string]any{"now": b.cfg.Now(), "cases": reply.Cases}, nil
}

// maxActionBody bounds what an action's request may carry: a rationale
// and a few intent ids.
const maxActionBody = 64 << 10

// actor returns the agent r acts as, and the connection to ask through:
// under Config.Identity its identity (a read-only one may not act) and a
// connection whose replies come to its inbox (Config.ActAs), so that the
// coordinator knows the person as that agent; without, the agent the page
// named, through the console's own connection.
func (b *backend) actor(r *http.Request, named string) (string, *nats.Conn, []string, error) {
	if b.cfg.Identity == nil {
		if !intents.ValidSegment(named) {
			return "", nil, nil, badRequest("agent = %q: name the agent you act as (letters, digits, '_' or '-')", clipped(named))
		}
		return named, b.conn.Load().nc, nil, nil
	}
	id := b.cfg.Identity(r)
	if id.ReadOnly() {
		who := "this token is nobody's (--http-token)"
		if id.Agent != "" {
			who = "agent " + id.Agent + " is an observer"
		}
		return "", nil, nil, &httpError{status: http.StatusForbidden, msg: "the console shows this token no action: " + who + "; act with the token of an agent the rules let approve or arbitrate"}
	}
	if named != "" && named != id.Agent {
		return "", nil, nil, &httpError{status: http.StatusForbidden, msg: fmt.Sprintf("agent %s may not act as agent %s", id.Agent, clipped(named))}
	}
	if b.cfg.ActAs == nil {
		return id.Agent, b.conn.Load().nc, id.Roles, nil
	}
	nc, err := b.cfg.ActAs(id.Agent)
	if err != nil {
		return "", nil, nil, fmt.Errorf("act as %s: %w", id.Agent, err)
	}
	return id.Agent, nc, id.Roles, nil
}

// readAction decodes an action's JSON body into v, strictly.
func readAction(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxActionBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("the request's body: %v", err)
	}
	return nil
}

// actionRequest calls endpoint with a JSON body on nc and decodes the
// reply into out; an error reply is an *apiError.
func (b *backend) actionRequest(ctx context.Context, nc *nats.Conn, endpoint string, body, out any) error {
	return b.actionRequestOn(ctx, nc, b.subj.API(endpoint), endpoint, body, out)
}

// actionRequestOn asks subject, the endpoint's, on nc.
func (b *backend) actionRequestOn(ctx context.Context, nc *nats.Conn, subject, endpoint string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("%s: %w", endpoint, err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	reply, err := nc.RequestWithContext(ctx, subject, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%s: no coordinator answers on %s: %w", endpoint, subject, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", endpoint, err)
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		return fmt.Errorf("%s: %w", endpoint, &apiError{code: code, description: reply.Header.Get("Nats-Service-Error")})
	}
	if err := json.Unmarshal(reply.Data, out); err != nil {
		return fmt.Errorf("%s: the coordinator answered %q: %w", endpoint, intents.Clip(string(reply.Data), 200), err)
	}
	return nil
}

// voteAction is the body of POST /api/vote.
type voteAction struct {
	Case      string          `json:"case"`
	Verdict   string          `json:"verdict"`
	Rationale string          `json:"rationale"`
	Answer    json.RawMessage `json:"answer"` // an input case's
	Agent     string          `json:"agent"`  // without --auth: whom the person acts as
}

// vote sends a person's approval or denial of an approval case, or answer
// to an input case (case.vote),
// as the agent they act as, and answers what it did.
func (b *backend) vote(ctx context.Context, r *http.Request) (any, error) {
	var v voteAction
	if err := readAction(r, &v); err != nil {
		return nil, err
	}
	if v.Verdict == intents.VerdictDeny && strings.TrimSpace(v.Rationale) == "" {
		return nil, badRequest("rationale: missing; say why you deny it, for the intent's agent and the log")
	}
	agent, nc, _, err := b.actor(r, v.Agent)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	err = b.actionRequest(ctx, nc, intents.APICaseVote, intents.Vote{Case: v.Case, Agent: agent, Verdict: v.Verdict, Rationale: v.Rationale, Answer: v.Answer}, &out)
	return out, err
}

// resolveAction is the body of POST /api/resolve.
type resolveAction struct {
	Case      string   `json:"case"`
	Winners   []string `json:"winners"`
	Losers    []string `json:"losers"`
	Rationale string   `json:"rationale"`
	Agent     string   `json:"agent"`
}

// resolve sends a person's resolution of an escalation (arbiter.resolve)
// as the agent they act as. Under Config.Identity that agent needs the
// role arbiter: the coordinator leaves the check to the server's
// permissions, which the console's connection does not have.
func (b *backend) resolve(ctx context.Context, r *http.Request) (any, error) {
	var a resolveAction
	if err := readAction(r, &a); err != nil {
		return nil, err
	}
	if strings.TrimSpace(a.Rationale) == "" {
		return nil, badRequest("rationale: missing; say why, for the agents involved and the log")
	}
	agent, nc, roles, err := b.actor(r, a.Agent)
	if err != nil {
		return nil, err
	}
	if b.cfg.Identity != nil && !slices.Contains(roles, rules.RoleArbiter) {
		return nil, &httpError{status: http.StatusForbidden, msg: fmt.Sprintf("agent %s may not resolve a case: it needs the role %s", agent, rules.RoleArbiter)}
	}
	var out map[string]any
	err = b.actionRequest(ctx, nc, intents.APIArbiterResolve,
		intents.Resolution{Escalation: a.Case, Arbiter: agent, Winners: a.Winners, Losers: a.Losers, Rationale: a.Rationale}, &out)
	return out, err
}

// reconcileAction is the body of POST /api/reconcile.
type reconcileAction struct {
	Task    string            `json:"task"`
	Effects map[string]string `json:"effects"` // key → confirmed, failed or compensated
	Why     string            `json:"why"`
	Agent   string            `json:"agent"`
}

// effectStatuses are what a person may declare of a pending effect.
var effectStatuses = []string{"confirmed", "failed", "compensated"}

// reconcile declares, as the agent the person acts as, what became of the
// effects a task's last owner left pending — one apply, as `coagent task
// reconcile` sends — and answers its decision.
func (b *backend) reconcile(ctx context.Context, r *http.Request) (any, error) {
	var a reconcileAction
	if err := readAction(r, &a); err != nil {
		return nil, err
	}
	if err := intents.CheckPath(a.Task); err != nil {
		return nil, badRequest("task = %q: %v", clipped(a.Task), err)
	}
	if strings.TrimSpace(a.Why) == "" {
		return nil, badRequest("why: missing; say how you know, for the log")
	}
	if len(a.Effects) == 0 {
		return nil, badRequest("effects: missing; declare each effect pending as confirmed, failed or compensated")
	}
	agent, nc, _, err := b.actor(r, a.Agent)
	if err != nil {
		return nil, err
	}
	var writes []intents.Write
	for _, key := range slices.Sorted(maps.Keys(a.Effects)) {
		status := a.Effects[key]
		if !intents.ValidSegment(key) || !slices.Contains(effectStatuses, status) {
			return nil, badRequest("effects.%s = %q: want confirmed, failed or compensated", clipped(key), clipped(status))
		}
		v, _ := json.Marshal(status)
		writes = append(writes, intents.Write{Path: a.Task + ".effects." + key + ".status", Op: intents.OpSet, Value: v})
	}
	meta, _ := json.Marshal(map[string]string{"why": a.Why})
	in := &intents.Intent{ID: ulid.Make().String(), Agent: agent, Kind: intents.KindApply, Action: "reconcile", Writes: writes, Meta: meta}
	var d intents.Decision
	if err := b.actionRequestOn(ctx, nc, b.subj.Submit(agent), "submit", in, &d); err != nil {
		return nil, err
	}
	return &d, nil
}
