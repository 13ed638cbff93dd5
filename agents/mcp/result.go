package mcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Result is what a tool that sends an intent returns: the coordinator's
// decision, in the words a model acts on. A rejection is a Result with ok
// false in a tool error (isError), never a protocol error: reason and
// detail say why, conflicts and versions what stood in the way, and next
// what to do about it.
type Result struct {
	OK      bool   `json:"ok" jsonschema:"true when the coordinator did what was asked"`
	Outcome string `json:"outcome" jsonschema:"applied, granted, committed, aborted or rejected"`
	Reason  string `json:"reason,omitempty" jsonschema:"why it was rejected: invalid, unauthorized, precondition_failed, postcondition_failed, conflict, stale_read, out_of_scope, fenced, lease_expired, wait_timeout, arbiter_rejected, deadlock, rate_limited or illegal_transition"`
	Detail  string `json:"detail,omitempty" jsonschema:"one sentence: which condition failed and the values it saw, which path conflicted with whom"`
	// Next is what to do now, from the reason.
	Next      string            `json:"next,omitempty" jsonschema:"what to do next"`
	Retryable bool              `json:"retryable,omitempty" jsonschema:"the same request may succeed later or with fresh versions"`
	Conflicts []Conflict        `json:"conflicts,omitempty" jsonschema:"the paths in conflict and whose transaction holds them"`
	Versions  map[string]uint64 `json:"versions,omitempty" jsonschema:"current versions of the paths involved (after the change when ok): pass them as expect to write again without a read"`
	Rev       uint64            `json:"rev,omitempty" jsonschema:"the revision of the change"`
	Txn       string            `json:"txn,omitempty" jsonschema:"the transaction id (begin, commit, abort), or the id of a claim's lease (claim, release)"`
	// Fence is the fencing token of a claim's lease, which the server adds
	// to the session's writes to the task.
	Fence uint64 `json:"fence,omitempty" jsonschema:"the fencing token of a claim's lease: the server adds it to this session's writes to the task"`
	// LeaseExpires is when the transaction's or claim's lease ends unless
	// renewed; the server renews it while the session lives.
	LeaseExpires *time.Time `json:"lease_expires,omitempty" jsonschema:"when the transaction's or claim's lease ends unless renewed (the server renews it while this session lives)"`
	MergedWith   []string   `json:"merged_with,omitempty" jsonschema:"intents of other agents whose disjoint or commutative edits were merged with this one"`
	// HeldBy is the agent holding a task a claim lost, or a release found
	// not ours.
	HeldBy string `json:"held_by,omitempty" jsonschema:"the agent that holds the task (claim, release)"`
	// Task is the task claim_next claimed.
	Task   string `json:"task,omitempty" jsonschema:"the task claim_next claimed for you"`
	Intent string `json:"intent,omitempty" jsonschema:"the intent id, for history"`
}

// Conflict is one path in conflict.
type Conflict struct {
	Path      string `json:"path"`
	Kind      string `json:"kind" jsonschema:"write-write, read-write, write-read or stale"`
	WithTxn   string `json:"with_txn,omitempty"`
	WithAgent string `json:"with_agent,omitempty"`
}

// fromDecision is the Result of decision d.
func fromDecision(d *intents.Decision) *Result {
	r := &Result{OK: d.Outcome != intents.OutcomeRejected, Outcome: string(d.Outcome), Reason: string(d.Reason),
		Detail: d.Detail, Retryable: d.Retryable, Versions: d.Versions, Rev: d.Rev, Txn: d.Txn,
		LeaseExpires: d.LeaseExpires, MergedWith: d.MergedWith, Intent: d.Intent}
	for _, c := range d.Conflicts {
		r.Conflicts = append(r.Conflicts, Conflict{Path: c.Path, Kind: string(c.Kind), WithTxn: c.WithTxn, WithAgent: c.WithAgent})
	}
	if !r.OK {
		r.Next = advice(d.Reason, d)
	}
	return r
}

// invalid is the Result of a request refused before it reached the
// coordinator (a bad path, op or expression): reason invalid, the detail
// naming the field and value.
func invalid(detail string) *Result {
	return &Result{Outcome: string(intents.OutcomeRejected), Reason: string(intents.ReasonInvalid), Detail: detail,
		Next: advice(intents.ReasonInvalid, nil)}
}

// fromError is the Result of a call that ended in err with no decision to
// show, or nil if err is not one a model can act on (the coordinator could
// not be reached): then the tool fails with err.
func fromError(err error) *Result {
	var rej *agents.RejectedError
	switch {
	case errors.As(err, &rej):
		return fromDecision(rej.Decision)
	case errors.Is(err, agents.ErrInvalid):
		return invalid(strings.TrimPrefix(strings.TrimPrefix(err.Error(), "agents: "), "invalid: "))
	case errors.Is(err, agents.ErrLeaseExpired):
		return &Result{Outcome: string(intents.OutcomeRejected), Reason: string(intents.ReasonLeaseExpired),
			Detail: err.Error(), Next: advice(intents.ReasonLeaseExpired, nil)}
	case errors.Is(err, agents.ErrFenced), errors.Is(err, agents.ErrPreempted):
		return &Result{Outcome: string(intents.OutcomeRejected), Reason: string(intents.ReasonFenced),
			Detail: err.Error(), Next: advice(intents.ReasonFenced, nil)}
	}
	return nil
}

// advice is what a model should do after a rejection for reason r.
func advice(r intents.Reason, d *intents.Decision) string {
	holders := ""
	if d != nil {
		var who []string
		for _, c := range d.Conflicts {
			if c.WithAgent != "" && !strings.Contains(strings.Join(who, ","), c.WithAgent) {
				who = append(who, c.WithAgent)
			}
		}
		if len(who) > 0 {
			holders = " (held by " + strings.Join(who, ", ") + ")"
		}
	}
	switch r {
	case intents.ReasonInvalid:
		return "Fix the field the detail names and call again; nothing was written."
	case intents.ReasonUnauthorized:
		return "This agent may not write these paths under the board rules; leave them to an agent that may, or ask an operator."
	case intents.ReasonPreconditionFailed:
		return "The state is not what your pre condition expects: read the paths it names, decide whether your goal still makes sense, and try again with conditions that match the current state (or give up)."
	case intents.ReasonPostconditionFailed:
		return "Your writes would break the post condition, so nothing was written: change the values and call again. A commit rejected for this keeps the transaction open: commit again with corrected writes, or abort."
	case intents.ReasonConflict:
		return "Another agent's transaction holds these paths" + holders + ". Do other work and try again later, or call again with on_conflict \"wait\" to queue behind it, or \"escalate\" to let an arbiter decide."
	case intents.ReasonStaleRead:
		return "A path changed since you read it: versions has its current version. Read it again, redo your work on the new value, and write with the new version in expect."
	case intents.ReasonOutOfScope:
		return "A commit may write only the paths given to begin; the transaction is still open. Commit only those paths, or abort and begin again with the writes you need."
	case intents.ReasonFenced:
		return "The transaction is no longer yours (it expired or an arbiter preempted it); nothing was written. Read the state again and begin a new transaction."
	case intents.ReasonLeaseExpired:
		return "The transaction's lease ran out, so it is gone and nothing was written. Read the state again and begin a new transaction."
	case intents.ReasonWaitTimeout:
		return "The transaction you waited on" + holders + " held its paths longer than wait_ms. Try again later, or with a longer wait_ms."
	case intents.ReasonArbiterRejected:
		return "An arbiter decided against this intent (the detail says why). Read the state again and reconsider; do not resend it as it was."
	case intents.ReasonDeadlock:
		return "You and another agent were waiting on each other's transactions. Abort your open transaction (or let it commit) and try again."
	case intents.ReasonRateLimited:
		return "This agent sent more than the board allows for now. Wait a moment, then try again."
	case intents.ReasonIllegalTransition:
		return "The board rules do not allow this change of value (the detail names the allowed ones). Choose an allowed value."
	}
	return "Read the detail; the request was not carried out."
}

// failure is an output that may say the request was not carried out.
type failure interface{ failed() bool }

func (r *Result) failed() bool        { return !r.OK }
func (r *ResolveOutput) failed() bool { return !r.OK }

// toolResult is r as a tool's content: a one-line summary a model reads
// first, then r as JSON (the structured content carries r too). A failed
// r is a tool error (isError), as the MCP specification has tool
// execution errors reported, business rejections included: a host that
// looks only at isError must not take a lost claim for a success.
func toolResult(summary string, r any) *sdk.CallToolResult {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		data = []byte(fmt.Sprintf("%q", err.Error()))
	}
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: summary + "\n" + string(data)}}}
	if f, ok := r.(failure); ok && f.failed() {
		res.IsError = true
	}
	return res
}

// summary is the one line of a Result.
func (r *Result) summary(what string) string {
	if r.OK {
		s := what + ": " + r.Outcome
		if r.Rev > 0 {
			s += fmt.Sprintf(" at rev %d", r.Rev)
		}
		return s
	}
	s := what + ": rejected (" + r.Reason + ")"
	if r.Detail != "" {
		s += ": " + r.Detail
	}
	return s + ". " + r.Next
}
