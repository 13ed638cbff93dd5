package intents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Escalation is an arbiter's case (SPEC §5): an intent that conflicted with
// on_conflict=escalate, what it conflicted with, the current values and
// versions of the paths involved, and the deadline for a resolution. Its id
// is the escalated intent's id.
type Escalation struct {
	ID string `json:"id"`
	// Intents are the escalated intent (see Escalated) and the proposes
	// that opened the transactions in flight it conflicts with (see
	// Proposes). The coordinator puts the escalated intent first, but a
	// reader finds it by its id.
	Intents   []*Intent            `json:"intents"`
	Holder    *Holder              `json:"holder,omitempty"`
	State     map[string]PathState `json:"state"`
	Conflicts []Conflict           `json:"conflicts"`
	Deadline  time.Time            `json:"deadline"`
	// Redacted lists the paths whose values the board rules' readers keep
	// from the arbiters (a path is shown to them only when its readers
	// admit role:arbiter): their values are gone from State and from the
	// intents' and the holder's writes.
	Redacted []string `json:"redacted,omitempty"`
	// Kind is CaseApproval for an intent a board rule holds for approval;
	// empty for a conflict, which goes to the arbiters.
	Kind string `json:"kind,omitempty"`
	// Approval is what an approval case's approvers need beside the state
	// of its paths now: who may approve, how many must, the votes so far
	// and the values the intent would leave.
	Approval *Approval `json:"approval,omitempty"`
	// Panel, on a conflict case a quorum of arbiters settles, says how
	// many must agree and who may vote; Votes are their votes so far (a
	// resolution each). An arbiter sends its resolution as ever; the case
	// is settled when Panel.Quorum of them agree.
	Panel *Panel `json:"panel,omitempty"`
	Votes []Vote `json:"votes,omitempty"`
	// Trace is the escalated intent's trace id, when it came with one: its
	// story (coagent log --trace) for whoever settles the case.
	Trace string `json:"trace,omitempty"`
}

// Panel asks a quorum of arbiters for a case: Quorum resolutions that
// agree (the same winners and losers, or replacements that write the
// same) settle it, each by an agent Of names ("" any arbiter).
type Panel struct {
	Quorum int    `json:"quorum"`
	Of     string `json:"of,omitempty"`
}

// The kinds of case beside a conflict's.
const (
	CaseConflict = "conflict"
	CaseApproval = "approval"
	CaseReview   = "review"
	CaseInput    = "input"
)

// Gate is what a board rule's approve asks of an intent that writes under
// it, as recorded on its escalate event: a replay settles the case by the
// gate it was opened under, whatever the rules say later.
type Gate struct {
	// Rule is the index of the rule in the rules file, Path the write it
	// matched.
	Rule int    `json:"rule"`
	Path string `json:"path"`
	// By are the agents and "role:NAME"s who may approve or deny.
	By []string `json:"by"`
	// Quorum is how many approvals apply the intent; one denial rejects it.
	Quorum int `json:"quorum"`
	// Fallback is what its deadline does without a quorum: FallbackReject
	// or FallbackApply.
	Fallback string `json:"fallback"`
	// Review, on a review case, is the reason the intent was refused for
	// (illegal_transition, precondition_failed), and Refusal the detail of
	// that refusal: approved, the intent is decided with that check
	// waived; denied or unanswered, it is refused for it.
	Review  Reason `json:"review,omitempty"`
	Refusal string `json:"refusal,omitempty"`
	// Ask, on an input case, is the question its agent asked (the
	// intent's meta.ask): the answer is the value of its one write.
	Ask *Ask `json:"ask,omitempty"`
}

// Ask is an input request: a question for a person, the JSON Schema its
// answer must satisfy, who may answer it and for how long it waits. An
// agent asks it as the meta.ask of an apply of one set, whose value is
// null until someone answers.
type Ask struct {
	Question string          `json:"question"`
	Schema   json.RawMessage `json:"schema,omitempty"`
	// By are the agents and "role:NAME"s who may answer; none: any agent
	// but the one asking.
	By []string `json:"by,omitempty"`
	// TimeoutMS is how long it waits for an answer, in milliseconds; none:
	// DefaultAskTimeout.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// MetaAsk is the key of Intent.Meta that makes an apply an input request.
const MetaAsk = "ask"

// DefaultAskTimeout is how long an input request waits when it names no
// timeout, and MaxAskTimeout the longest it may; MaxQuestion bounds a
// question.
const (
	DefaultAskTimeout = 30 * time.Minute
	MaxAskTimeout     = 7 * 24 * time.Hour
	MaxQuestion       = 4096
)

// The fallbacks of a Gate.
const (
	FallbackReject = "reject"
	FallbackApply  = "apply"
)

// Approval is an approval case's gate, votes and diff.
type Approval struct {
	Gate
	Votes []Vote `json:"votes"`
	// After holds the value and version each path the intent writes would
	// have if it were applied now (an apply's; a propose's values come
	// with its commit), beside the case's State, the values now.
	After map[string]PathState `json:"after,omitempty"`
}

// Vote is one approver's verdict on an approval case (case.vote, and the
// vote event that records it), or one of a quorum of arbiters'.
type Vote struct {
	Case      string `json:"case"`
	Agent     string `json:"agent"`
	Verdict   string `json:"verdict"` // VerdictApprove, VerdictDeny or VerdictAnswer
	Rationale string `json:"rationale,omitempty"`
	// Answer is the value an answer gives an input case.
	Answer json.RawMessage `json:"answer,omitempty"`
	// Resolution is an arbiter's resolution, its vote on a case a panel
	// settles (verdict resolve).
	Resolution *Resolution `json:"resolution,omitempty"`
}

// The verdicts of a Vote: an answer is an input case's, and carries
// the value.
const (
	VerdictApprove = "approve"
	VerdictDeny    = "deny"
	VerdictAnswer  = "answer"
	VerdictResolve = "resolve"
)

// Holder is the transaction in flight an escalated intent conflicts with.
type Holder struct {
	Txn    string  `json:"txn"`
	Agent  string  `json:"agent"`
	Fence  uint64  `json:"fence"`
	Intent string  `json:"intent"` // the propose that opened it
	Writes []Write `json:"writes"`
}

// PathState is a path's value and version when a case was opened.
type PathState struct {
	Exists  bool   `json:"exists"`
	Value   any    `json:"value,omitempty"`
	Version uint64 `json:"version"`
}

// Resolution is an arbiter's answer to a case: the intents that win (the
// escalated one and/or the holder's propose), the ones that lose, or a
// replacement intent that supersedes the escalated one, and why.
type Resolution struct {
	Escalation  string   `json:"escalation"`
	Arbiter     string   `json:"arbiter"`
	Winners     []string `json:"winners,omitempty"`
	Losers      []string `json:"losers,omitempty"`
	Replacement *Intent  `json:"replacement,omitempty"`
	Rationale   string   `json:"rationale"`
}

// Escalated returns the escalated intent: the one of c.Intents whose id is
// the case's. It is nil only in a malformed case, which does not carry it.
func (c *Escalation) Escalated() *Intent {
	for _, in := range c.Intents {
		if in != nil && in.ID == c.ID {
			return in
		}
	}
	return nil
}

// Proposes returns the other intents of the case, in their order: the
// proposes that opened the transactions in flight the escalated intent
// conflicts with. c.Holder is the first of those transactions.
func (c *Escalation) Proposes() []*Intent {
	var out []*Intent
	for _, in := range c.Intents {
		if in != nil && in.ID != c.ID {
			out = append(out, in)
		}
	}
	return out
}

// AskOf returns the input request an intent's meta carries (meta.ask),
// nil when it carries none; an ask that is not an object of the fields of
// Ask is an error naming the field.
func AskOf(meta json.RawMessage) (*Ask, error) {
	if !bytes.Contains(meta, []byte(`"`+MetaAsk+`"`)) {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(meta, &m) != nil {
		return nil, nil
	}
	raw, ok := m[MetaAsk]
	if !ok {
		return nil, nil
	}
	ask := new(Ask)
	if err := strictUnmarshal(raw, ask); err != nil || firstByte(raw) != '{' {
		return nil, fmt.Errorf("intent field meta.ask: want an object {question, schema, by, timeout_ms}, not %s", Clip(string(raw), 80))
	}
	switch {
	case strings.TrimSpace(ask.Question) == "":
		return nil, errors.New("intent field meta.ask.question: missing: ask something")
	case len(ask.Question) > MaxQuestion:
		return nil, fmt.Errorf("intent field meta.ask.question: %d bytes, above %d", len(ask.Question), MaxQuestion)
	case ask.TimeoutMS < 0 || ask.TimeoutMS > MaxAskTimeout.Milliseconds():
		return nil, fmt.Errorf("intent field meta.ask.timeout_ms = %d: want 0 (%s) to %d", ask.TimeoutMS, DefaultAskTimeout, MaxAskTimeout.Milliseconds())
	}
	for i, p := range ask.By {
		name, _ := strings.CutPrefix(p, "role:")
		if !ValidSegment(name) {
			return nil, fmt.Errorf("intent field meta.ask.by[%d] = %q: want an agent name or role:NAME", i, Clip(p, 80))
		}
	}
	return ask, nil
}

// Timeout is how long the ask waits for an answer.
func (a *Ask) Timeout() time.Duration {
	if a.TimeoutMS == 0 {
		return DefaultAskTimeout
	}
	return time.Duration(a.TimeoutMS) * time.Millisecond
}
