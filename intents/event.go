package intents

import (
	"encoding/json"
	"time"

	"github.com/oklog/ulid/v2"
)

// EventType names what an event records. The event log indexes by it and
// the public feed publishes on coagent.events.<type>.
type EventType string

// The event types. Each names which payload field of Event is set.
const (
	EventIntent   EventType = "intent"   // an intent was received, valid or not (Received)
	EventDecision EventType = "decision" // a decision was made (Decision)
	EventChange   EventType = "change"   // writes were committed; Seq is their rev (Change)
	EventGrant    EventType = "grant"    // a transaction went in flight (Grant)
	EventRenew    EventType = "renew"    // a lease was extended (Grant, lease fields only)
	EventExpire   EventType = "expire"   // a lease ran out (Release)
	EventRelease  EventType = "release"  // a transaction ended by commit, abort or preemption (Release)
	EventWait     EventType = "wait"     // an intent was parked behind transactions in flight (Wait)
	EventEscalate EventType = "escalate" // an intent was sent to the arbiters (Wait)
	EventNotice   EventType = "notice"   // an advisory to an agent (Notice)
	EventResolve  EventType = "resolve"  // an arbiter's resolution was accepted (Resolution)
	EventRules    EventType = "rules"    // the board rules in force changed (Rules)
	EventVote     EventType = "vote"     // an approver's verdict on an approval case was accepted (Vote)
	EventShadow   EventType = "shadow"   // rules not enforced would have decided an intent otherwise (Shadow)
	EventBoard    EventType = "board"    // a shard joined, or a board left or entered it (Handoff)
	EventXShard   EventType = "xshard"   // a cross-shard apply's part was prepared, committed or aborted (XShard)
)

// EventTypes lists every event type in a stable order.
var EventTypes = []EventType{EventIntent, EventDecision, EventChange, EventGrant, EventRenew,
	EventExpire, EventRelease, EventWait, EventEscalate, EventNotice, EventResolve, EventRules, EventVote, EventShadow, EventBoard, EventXShard}

// Event is one entry of the event-sourced log. The state, the transactions in
// flight, the parked intents and the recorded decisions are a fold of events;
// nothing else is needed to rebuild them.
type Event struct {
	Seq    uint64    `json:"seq"` // position in the log; the rev of a change
	ID     ulid.ULID `json:"id"`
	Time   time.Time `json:"time"`
	Type   EventType `json:"type"`
	Agent  string    `json:"agent,omitempty"` // the agent concerned (a notice's recipient)
	Intent string    `json:"intent,omitempty"`
	Txn    string    `json:"txn,omitempty"`
	// Trace is the W3C trace id (32 lowercase hex digits) of the intent
	// that caused the event, when it came with a traceparent (the header,
	// or meta.traceparent): its own events, the events of its transaction
	// (grant, renew, release, expire and their notices), of its wait or
	// escalation, and the resolution of its case (see docs/wire.md).
	Trace string `json:"trace,omitempty"`

	Received *Received `json:"received,omitempty"`
	Decision *Decision `json:"decision,omitempty"`
	Change   *Change   `json:"change,omitempty"`
	Grant    *Grant    `json:"grant,omitempty"`
	Release  *Release  `json:"release,omitempty"`
	Wait     *Wait     `json:"wait,omitempty"`
	Notice   *Notice   `json:"notice,omitempty"`
	// Resolution is the arbiter's resolution as accepted (EventResolve).
	Resolution *Resolution `json:"resolution,omitempty"`
	// Rules are the board rules in force from this event on (EventRules).
	Rules *Rules `json:"rules,omitempty"`
	// Vote is an approver's verdict as accepted (EventVote).
	Vote *Vote `json:"vote,omitempty"`
	// Shadow is how rules in warn or audit mode would have decided the
	// intent (EventShadow).
	Shadow *Shadow `json:"shadow,omitempty"`
	// Handoff is a shard joining, or a board leaving or entering this
	// shard with its state (EventBoard).
	Handoff *Handoff `json:"handoff,omitempty"`
	// XShard is a step of a cross-shard apply's two-phase commit
	// (EventXShard).
	XShard *XShard `json:"xshard,omitempty"`
}

// Rules records a change of the board rules: the whole rules file in force
// from then on, so that a replay decides with the rules that were in force.
type Rules struct {
	// File is the rules file (JSON, schemas/rules.json); empty means no
	// rules.
	File json.RawMessage `json:"file,omitempty"`
	// Hash is the sha256 of File, hex encoded, to tell versions apart.
	Hash string `json:"hash"`
	// Source says where the rules came from: a file path, or "api".
	Source string `json:"source,omitempty"`
	// Shadow is a rules file evaluated beside File on every intent but
	// not enforced (coagent rules set --shadow): each decision it would
	// have changed is recorded as a shadow event. Empty: none. ShadowHash
	// is its sha256, as Hash is File's.
	// ShadowMode is the mode of the shadow file's rules that name none:
	// ModeAudit (or empty) or ModeWarn.
	Shadow     json.RawMessage `json:"shadow,omitempty"`
	ShadowHash string          `json:"shadow_hash,omitempty"`
	ShadowMode string          `json:"shadow_mode,omitempty"`
}

// The modes of a rule, and of a shadow event: Kubernetes' admission
// policy actions. A rule in ModeEnforce decides; in ModeWarn it is
// evaluated on every intent, each decision it would change is recorded
// and the agent's decision carries a warning; in ModeAudit it is only
// recorded.
const (
	ModeEnforce = "enforce"
	ModeWarn    = "warn"
	ModeAudit   = "audit"
)

// Shadow records a decision the shadow rules (the rules in warn or audit
// mode, or a shadow file) would have made otherwise than the enforced
// ones did, for the event's intent, decided by the decision just before
// it. The decision made stands.
type Shadow struct {
	// Kind is "change" (the decision would differ) or "error" (evaluating
	// the shadow rules failed, Detail says how).
	Kind string `json:"kind"`
	// Mode is the mode of Rule: warn (the agent was told) or audit.
	Mode string `json:"mode"`
	// Rule names what would have changed the decision, as its detail
	// does ("rules[3]", "invariant wip"); empty when the detail names
	// nothing.
	Rule string `json:"rule,omitempty"`
	// Decided is the outcome (and reason, after a colon) the enforced
	// rules gave; WouldBe the one the shadow rules would have, with its
	// reason and detail.
	Decided string  `json:"decided"`
	WouldBe Outcome `json:"would_be"`
	Reason  Reason  `json:"reason,omitempty"`
	Detail  string  `json:"detail,omitempty"`
}

// The kinds of a shadow event.
const (
	ShadowChange = "change"
	ShadowError  = "error"
)

// WouldBeKey is how a shadow event counts its would-be decision: the
// outcome, and the reason after a colon, or "error".
func (s *Shadow) WouldBeKey() string {
	if s.Kind == ShadowError {
		return ShadowError
	}
	if s.Reason != "" {
		return string(s.WouldBe) + ":" + string(s.Reason)
	}
	return string(s.WouldBe)
}

// Received records an intent as it arrived: decoded when it was valid, the
// raw bytes and the error otherwise.
type Received struct {
	Intent *Intent `json:"intent,omitempty"`
	Raw    []byte  `json:"raw,omitempty"`
	Error  string  `json:"error,omitempty"`
	// TraceError says why a traceparent that came with the intent was not
	// used, naming where it came from (the header or meta.traceparent) and
	// its value. It never decides the intent (see intents.Trace).
	TraceError string `json:"trace_error,omitempty"`
}

// Change is the set of writes one intent committed. Merges are expanded into
// the set and delete of each child path, so folding a change needs no
// knowledge of the intent that caused it.
type Change struct {
	Writes     []Applied `json:"writes"`
	MergedWith []string  `json:"merged_with,omitempty"`
	// Redacted, set only on what is sent to a reader (the change feed, a
	// log.query reply), lists the paths whose values the board rules'
	// readers keep from that reader: a write's own path (its value is
	// gone) or paths under it (removed from its value). The log never
	// holds it.
	Redacted []string `json:"redacted,omitempty"`
}

// Applied is one committed write with the version of its path before and
// after.
type Applied struct {
	Path       string          `json:"path"`
	Op         Op              `json:"op"` // set, delete, append or incr
	Value      json.RawMessage `json:"value,omitempty"`
	OldVersion uint64          `json:"old_version"`
	NewVersion uint64          `json:"new_version"`
}

// Grant records a transaction going in flight (and, with only the lease
// fields, a renewal). Reads include the paths the propose's conditions touch.
type Grant struct {
	Txn     string    `json:"txn"`
	Agent   string    `json:"agent"`
	Fence   uint64    `json:"fence"`
	LeaseMS int64     `json:"lease_ms"`
	Expires time.Time `json:"expires"`
	Reads   []Read    `json:"reads,omitempty"`
	Propose *Intent   `json:"propose,omitempty"`
}

// ReleaseCause says how a transaction ended.
type ReleaseCause string

// The ways a transaction leaves flight.
const (
	CauseCommitted ReleaseCause = "committed"
	CauseAborted   ReleaseCause = "aborted"
	CauseExpired   ReleaseCause = "expired"
	CausePreempted ReleaseCause = "preempted"
	// CauseReleased ends a task claim whose owner released the task or
	// handed it over; a claim whose lease ran out ends expired.
	CauseReleased ReleaseCause = "released"
)

// Release records a transaction ending.
type Release struct {
	Txn   string       `json:"txn"`
	Agent string       `json:"agent"`
	Cause ReleaseCause `json:"cause"`
}

// Wait records an intent parked until the transactions it conflicts with end
// (EventWait) or until an arbiter settles it (EventEscalate), and the
// deadline after which it is rejected.
type Wait struct {
	Intent    *Intent    `json:"intent"`
	Deadline  time.Time  `json:"deadline"`
	Conflicts []Conflict `json:"conflicts"`
	// Gate is set on the escalate event of an approval case: the intent
	// waits for approvers, not arbiters.
	Gate *Gate `json:"gate,omitempty"`
	// Panel is set on the escalate event of a case a quorum of arbiters
	// settles.
	Panel *Panel `json:"panel,omitempty"`
}

// NoticeKind says what an advisory is about.
type NoticeKind string

// The advisories sent on coagent.notices.<agent>.
const (
	NoticeWaiting       NoticeKind = "waiting"        // an intent waits on your transaction
	NoticeLeaseExpiring NoticeKind = "lease_expiring" // renew soon or lose the grant
	NoticeLeaseExpired  NoticeKind = "lease_expired"  // the grant is gone
	NoticeReclaimed     NoticeKind = "reclaimed"      // your claim's lease ended: the task went back
	NoticeAssigned      NoticeKind = "assigned"       // an operator gave you a task: its claim is yours (Txn, Fence)
	NoticeRevoked       NoticeKind = "revoked"        // an operator took your task from you: your claim ended
	NoticeApproval      NoticeKind = "approval"       // an intent waits for your approval (Intent, From): case.vote
)

// NoticeKinds are the notice kinds, in the order they were added.
var NoticeKinds = []NoticeKind{NoticeWaiting, NoticeLeaseExpiring, NoticeLeaseExpired, NoticeReclaimed, NoticeAssigned, NoticeRevoked, NoticeApproval}

// Notice is an advisory for one agent; the event's Agent is the recipient.
type Notice struct {
	Kind   NoticeKind `json:"kind"`
	Txn    string     `json:"txn,omitempty"`
	Intent string     `json:"intent,omitempty"` // the waiting intent, for NoticeWaiting
	From   string     `json:"from,omitempty"`   // the waiting intent's agent
	Detail string     `json:"detail"`
	// Fence is the fence of the claim an assigned notice gives its agent,
	// to carry on the task's writes and renewals.
	Fence uint64 `json:"fence,omitempty"`
}
