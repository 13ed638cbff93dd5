package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// VoteResult is what a vote on an approval case did.
type VoteResult struct {
	Case    string `json:"case"`
	Agent   string `json:"agent"`
	Verdict string `json:"verdict"`
	// Decision is the intent's decision when this vote decided it (the
	// quorum's last approval, or a denial); nil while the case waits for
	// more approvals.
	Decision *intents.Decision `json:"decision,omitempty"`
}

// Approve approves the approval case id as this client's agent, with why
// recorded beside it. A vote the coordinator refuses — the agent is not
// one the rule's approve names, the intent is its own, it has voted
// already, the case is not open — is an *APIError naming why.
func (c *Client) Approve(ctx context.Context, id, why string) (*VoteResult, error) {
	return c.vote(ctx, id, intents.VerdictApprove, why)
}

// Deny denies the approval case id as this client's agent: its intent is
// rejected (arbiter_rejected) with this agent's name and why.
func (c *Client) Deny(ctx context.Context, id, why string) (*VoteResult, error) {
	return c.vote(ctx, id, intents.VerdictDeny, why)
}

func (c *Client) vote(ctx context.Context, id, verdict, why string) (*VoteResult, error) {
	var r VoteResult
	if err := c.request(ctx, intents.APICaseVote, intents.Vote{Case: id, Agent: c.name, Verdict: verdict, Rationale: why}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// ApprovalCases lists the open approval and review cases, as this client's agent may
// see them (txn.list with its cases): each with its intent, the state of
// the paths it writes, the values it would leave, its gate and the votes so
// far.
func (c *Client) ApprovalCases(ctx context.Context) ([]*intents.Escalation, error) {
	var reply struct {
		Cases []struct {
			Kind string              `json:"kind"`
			Case *intents.Escalation `json:"case"`
		} `json:"cases"`
	}
	if err := c.request(ctx, intents.APITxnList, map[string]bool{"cases": true}, &reply); err != nil {
		return nil, err
	}
	var out []*intents.Escalation
	for _, r := range reply.Cases {
		if r.Case != nil && r.Case.Approval != nil {
			out = append(out, r.Case)
		}
	}
	return out, nil
}

// Approver is an approver written as a function: given an approval case,
// it returns its verdict (intents.VerdictApprove or VerdictDeny) and why.
// An error means "no answer now": the case is asked again at the next
// look.
type Approver func(ctx context.Context, c *intents.Escalation) (verdict, why string, err error)

// approverResync is how often RunApprover looks at the open cases besides
// its notices: a notice sent while it was away is not sent again.
const approverResync = 30 * time.Second

// RunApprover votes as this client's agent on the approval cases it may
// vote on, with decide, until ctx ends; then it returns nil. It looks at
// the open cases when it starts, at each approval notice the coordinator
// sends the agent, and every 30 seconds (notices are not kept for an agent
// away), and asks decide about each case it has not voted on and whose
// intent is not its own. A vote the coordinator refuses for the agent
// (the gate does not name it) is not tried again for that case.
func (c *Client) RunApprover(ctx context.Context, decide Approver) error {
	// Its own subscription: Notices belongs to the program.
	wake := make(chan struct{}, 1)
	sub, err := c.nc.Subscribe(c.subj.Notices(c.name), func(m *nats.Msg) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return fmt.Errorf("agents: approver %s: subscribe to %s: %w", c.name, c.subj.Notices(c.name), err)
	}
	defer sub.Unsubscribe()
	done := map[string]bool{} // cases voted on, or refused to this agent
	tick := time.NewTicker(approverResync)
	defer tick.Stop()
	for {
		cases, err := c.ApprovalCases(ctx)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("approver: cannot list the open cases", "err", err)
		}
		for _, cs := range cases {
			if ctx.Err() != nil {
				return nil
			}
			if done[cs.ID] || c.votedOn(cs) {
				continue
			}
			verdict, why, err := decide(ctx, cs)
			if err != nil {
				c.log.Info("approver: no verdict now", "case", cs.ID, "err", err)
				continue
			}
			r, err := c.vote(ctx, cs.ID, verdict, why)
			var api *APIError
			switch {
			case err == nil:
				done[cs.ID] = true
				c.log.Info("approver: voted", "case", cs.ID, "verdict", verdict, "decided", r.Decision != nil)
			case errors.As(err, &api) && (api.Code == string(intents.ReasonUnauthorized) || api.Code == string(intents.ReasonInvalid)):
				done[cs.ID] = true // not this agent's to vote on, or not open any more
				c.log.Info("approver: vote refused", "case", cs.ID, "err", err)
			default:
				c.log.Warn("approver: vote not sent", "case", cs.ID, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-tick.C:
		}
	}
}

// votedOn reports whether the case is this agent's own intent, or it has
// voted on it already.
func (c *Client) votedOn(cs *intents.Escalation) bool {
	if in := cs.Escalated(); in != nil && in.Agent == c.name {
		return true
	}
	for _, v := range cs.Approval.Votes {
		if v.Agent == c.name {
			return true
		}
	}
	return false
}

// Answer answers the input case id as this client's agent: answer (any
// value JSON can hold) is written where the asking agent said, once it
// satisfies the question's schema.
func (c *Client) Answer(ctx context.Context, id string, answer any, why string) (*VoteResult, error) {
	raw, err := json.Marshal(answer)
	if err != nil {
		return nil, fmt.Errorf("agents: answer %s: %w", id, err)
	}
	var r VoteResult
	v := intents.Vote{Case: id, Agent: c.name, Verdict: intents.VerdictAnswer, Rationale: why, Answer: raw}
	if err := c.request(ctx, intents.APICaseVote, v, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Ask asks a person (or any agent the ask names) the question q, and waits
// until ctx ends for the answer, which the coordinator writes at path: an
// input case (kind input) that coagent case answer, the console, the MCP
// tool answer or Answer settles. It returns the answer as written; a
// refusal (nobody answered by q's timeout: wait_timeout; denied:
// arbiter_rejected) is a *RejectedError. Calling it again after ctx ended
// asks again; to come back for an answer, read path.
func (c *Client) Ask(ctx context.Context, path string, q intents.Ask) (json.RawMessage, error) {
	in, err := intents.Apply("ask").Set(path, nil).Meta(intents.MetaAsk, q).Build()
	if err != nil {
		return nil, fmt.Errorf("agents: ask: %w", err)
	}
	d, err := c.Submit(ctx, in)
	if err != nil {
		return nil, err
	}
	if err := expect(d, intents.OutcomeApplied); err != nil {
		return nil, err
	}
	st, err := c.Read(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("agents: ask: read the answer at %s: %w", path, err)
	}
	return json.RawMessage(st.Values[path].Value), nil
}
