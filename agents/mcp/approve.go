package mcp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ApprovalsInput is the input of approvals.
type ApprovalsInput struct{}

// Approval is an approval case as approvals shows it: the case, and what
// its approvers need beside it.
type Approval struct {
	Case
	Kind     string                       `json:"kind" jsonschema:"approval (a rule holds the intent), review (a rule took its refusal), or input (the agent asks a question: answer it)"`
	Path     string                       `json:"path" jsonschema:"the write the rule gates, or where the answer goes"`
	Review   string                       `json:"review,omitempty" jsonschema:"on a review: what the intent was refused for, which approving waives"`
	Refusal  string                       `json:"refusal,omitempty"`
	Ask      *intents.Ask                 `json:"ask,omitempty" jsonschema:"on an input case: the question, and the JSON Schema of its answer"`
	By       []string                     `json:"by" jsonschema:"who may approve or deny (agents and role:NAMEs); on an input case, who may answer (none: any agent but the asker)"`
	Quorum   int                          `json:"quorum" jsonschema:"how many approvals apply the intent"`
	Fallback string                       `json:"fallback" jsonschema:"what the deadline does without them: reject or apply"`
	Votes    []intents.Vote               `json:"votes" jsonschema:"the votes so far"`
	After    map[string]intents.PathState `json:"after,omitempty" jsonschema:"the value and version each written path would have if applied now; state has them now"`
}

// ApprovalsOutput is the output of approvals.
type ApprovalsOutput struct {
	Cases []Approval `json:"cases"`
	Next  string     `json:"next"`
}

// VoteInput is the input of approve and deny.
type VoteInput struct {
	Case string `json:"case" jsonschema:"the approval case's id (the intent's id), from approvals"`
	Why  string `json:"why,omitempty" jsonschema:"why, recorded with the vote and told to the intent's agent (required to deny)"`
}

// AnswerInput is the input of answer.
type AnswerInput struct {
	Case   string `json:"case" jsonschema:"the input case's id, from approvals"`
	Answer any    `json:"answer" jsonschema:"the answer: any JSON value the question's schema allows; it is written where the asking agent said"`
	Why    string `json:"why,omitempty" jsonschema:"why, recorded with the answer"`
}

// VoteOutput is the output of approve, deny and answer.
type VoteOutput struct {
	OK       bool              `json:"ok"`
	Reason   string            `json:"reason,omitempty"`
	Detail   string            `json:"detail,omitempty"`
	Decision *intents.Decision `json:"decision,omitempty" jsonschema:"the intent's decision when this vote decided it"`
	Next     string            `json:"next"`
}

func (r *VoteOutput) failed() bool { return !r.OK }

func (s *Server) addApproverTools() {
	addTool(s, &sdk.Tool{Name: "approvals", Title: "List the intents waiting for approval or an answer",
		Description: "As an approver: the open approval cases — intents a board rule holds until enough approvers approve, refusals a rule sends to review, and agents' questions waiting for an answer — " +
			"each with the intent, the values its paths have now (state) and would have (after), who may vote, how many must, and the votes so far.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, s.approvals)
	addTool(s, &sdk.Tool{Name: "approve", Title: "Approve an intent",
		Description: "As an approver: approve the approval case `case`. Once its quorum has approved, the intent is decided against the state of that moment " +
			"(it may still be rejected, say if its preconditions no longer hold); the result carries that decision."}, s.approve)
	addTool(s, &sdk.Tool{Name: "answer", Title: "Answer an agent's question",
		Description: "As an approver: answer the input case `case` (an agent's question: approvals lists it with kind input and its ask). " +
			"The answer must satisfy the question's schema; it is written where the agent said, and the result carries its decision."}, s.answer)
	addTool(s, &sdk.Tool{Name: "deny", Title: "Deny an intent",
		Description: "As an approver: deny the approval case `case`, saying why. One denial rejects the intent (arbiter_rejected), naming you and why."}, s.deny)
}

func (s *Server) approvals(ctx context.Context, _ *sdk.CallToolRequest, _ ApprovalsInput) (*sdk.CallToolResult, *ApprovalsOutput, error) {
	cases, err := s.c.ApprovalCases(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("approvals: %w", err)
	}
	out := &ApprovalsOutput{Cases: []Approval{}}
	for _, c := range cases {
		a := c.Approval
		by := a.By
		if by == nil {
			by = []string{} // never null where the output schema says an array
		}
		out.Cases = append(out.Cases, Approval{Case: *caseOf(c), Kind: c.Kind, Path: a.Path, Review: string(a.Review), Refusal: a.Refusal, Ask: a.Ask,
			By: by, Quorum: a.Quorum, Fallback: a.Fallback, Votes: a.Votes, After: a.After})
	}
	out.Next = "Read each case's intent, state and after; approve or deny the ones you may vote on, with why; answer the questions (kind input)."
	if len(out.Cases) == 0 {
		out.Next = "No intent waits for approval: call approvals again later."
	}
	return toolResult(fmt.Sprintf("%d intents wait for approval", len(out.Cases)), out), out, nil
}

func (s *Server) approve(ctx context.Context, _ *sdk.CallToolRequest, in VoteInput) (*sdk.CallToolResult, *VoteOutput, error) {
	return s.vote(ctx, in, intents.VerdictApprove)
}

func (s *Server) answer(ctx context.Context, _ *sdk.CallToolRequest, in AnswerInput) (*sdk.CallToolResult, *VoteOutput, error) {
	return s.voteWith(ctx, in.Case, intents.VerdictAnswer, func(ctx context.Context) (*agents.VoteResult, error) {
		return s.c.Answer(ctx, in.Case, in.Answer, in.Why)
	})
}

func (s *Server) deny(ctx context.Context, _ *sdk.CallToolRequest, in VoteInput) (*sdk.CallToolResult, *VoteOutput, error) {
	if in.Why == "" {
		out := &VoteOutput{Reason: string(intents.ReasonInvalid), Detail: "why: missing", Next: "Say why you deny it, for the intent's agent and the log."}
		return toolResult("deny "+in.Case+": refused: why is missing", out), out, nil
	}
	return s.vote(ctx, in, intents.VerdictDeny)
}

func (s *Server) vote(ctx context.Context, in VoteInput, verdict string) (*sdk.CallToolResult, *VoteOutput, error) {
	vote := s.c.Approve
	if verdict == intents.VerdictDeny {
		vote = s.c.Deny
	}
	return s.voteWith(ctx, in.Case, verdict, func(ctx context.Context) (*agents.VoteResult, error) { return vote(ctx, in.Case, in.Why) })
}

// voteWith casts a vote with send and says what it did.
func (s *Server) voteWith(ctx context.Context, id, verdict string, send func(context.Context) (*agents.VoteResult, error)) (*sdk.CallToolResult, *VoteOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := send(ctx)
	var api *agents.APIError
	switch {
	case errors.As(err, &api):
		out := &VoteOutput{Reason: api.Code, Detail: api.Description, Next: "The vote was not recorded: read the detail; approvals lists the cases open to you."}
		return toolResult(fmt.Sprintf("%s %s: refused (%s): %s", verdict, id, api.Code, api.Description), out), out, nil
	case err != nil:
		return nil, nil, fmt.Errorf("%s %s: %w", verdict, id, err)
	}
	out := &VoteOutput{OK: true, Decision: r.Decision, Next: "The case waits for more approvals."}
	summary := fmt.Sprintf("%s %s: recorded", verdict, id)
	if d := r.Decision; d != nil {
		out.Next = "Settled: the intent's agent has its decision."
		summary += fmt.Sprintf("; the intent was %s", d.Outcome)
		if d.Reason != "" {
			summary += fmt.Sprintf(" (%s: %s)", d.Reason, d.Detail)
		}
	}
	return toolResult(summary, out), out, nil
}
