package intents

import "time"

// Outcome is what the coordinator did with an intent.
type Outcome string

// The outcomes of SPEC §3. Queued and escalated are interim: a final decision
// for the same intent follows.
const (
	OutcomeApplied   Outcome = "applied"
	OutcomeGranted   Outcome = "granted"
	OutcomeCommitted Outcome = "committed"
	OutcomeAborted   Outcome = "aborted"
	OutcomeRenewed   Outcome = "renewed"
	OutcomeRejected  Outcome = "rejected"
	OutcomeQueued    Outcome = "queued"
	OutcomeEscalated Outcome = "escalated"
)

// Outcomes lists every outcome in a stable order.
var Outcomes = []Outcome{OutcomeApplied, OutcomeGranted, OutcomeCommitted, OutcomeAborted,
	OutcomeRenewed, OutcomeRejected, OutcomeQueued, OutcomeEscalated}

// Final reports whether no other decision follows this one.
func (o Outcome) Final() bool { return o != OutcomeQueued && o != OutcomeEscalated }

// Success reports whether the intent did what it asked (the outcomes for
// which `coagent submit` exits 0).
func (o Outcome) Success() bool {
	return o == OutcomeApplied || o == OutcomeGranted || o == OutcomeCommitted
}

// Reason says why an intent was rejected. At the wire edge these are also the
// error codes of the API.
type Reason string

// The rejection reasons of SPEC §3.
const (
	ReasonInvalid             Reason = "invalid"
	ReasonUnauthorized        Reason = "unauthorized"
	ReasonPreconditionFailed  Reason = "precondition_failed"
	ReasonPostconditionFailed Reason = "postcondition_failed"
	ReasonConflict            Reason = "conflict"
	ReasonStaleRead           Reason = "stale_read"
	ReasonOutOfScope          Reason = "out_of_scope"
	ReasonFenced              Reason = "fenced"
	ReasonLeaseExpired        Reason = "lease_expired"
	ReasonWaitTimeout         Reason = "wait_timeout"
	ReasonArbiterRejected     Reason = "arbiter_rejected"
	ReasonDeadlock            Reason = "deadlock"
	ReasonRateLimited         Reason = "rate_limited"
	ReasonIllegalTransition   Reason = "illegal_transition"
)

// Reasons lists every reason in a stable order.
var Reasons = []Reason{ReasonInvalid, ReasonUnauthorized, ReasonPreconditionFailed,
	ReasonPostconditionFailed, ReasonConflict, ReasonStaleRead, ReasonOutOfScope, ReasonFenced,
	ReasonLeaseExpired, ReasonWaitTimeout, ReasonArbiterRejected, ReasonDeadlock,
	ReasonRateLimited, ReasonIllegalTransition}

// Retryable reports whether the same intent (with a fresh id, perhaps fresh
// versions) may succeed later without the agent changing what it wants.
func (r Reason) Retryable() bool {
	switch r {
	case ReasonConflict, ReasonStaleRead, ReasonWaitTimeout, ReasonDeadlock, ReasonRateLimited:
		return true
	}
	return false
}

// ConflictKind classifies a conflict (SPEC §4).
type ConflictKind string

// The conflict kinds of SPEC §3–4, named from the side of the transaction in
// flight first: read-write means it reads what the new intent writes,
// write-read that it writes what the new intent reads.
const (
	ConflictWriteWrite ConflictKind = "write-write"
	ConflictReadWrite  ConflictKind = "read-write"
	ConflictWriteRead  ConflictKind = "write-read"
	ConflictStale      ConflictKind = "stale"
	// ConflictContradiction: the intent states a fact that contradicts the
	// fact in force on the same subject (board rules' record kinds); it
	// goes to the arbiter. WithTxn and WithAgent are empty.
	ConflictContradiction ConflictKind = "contradiction"
	// ConflictPrecondition: a precondition no longer holds because another
	// agent changed what it reads first — the race of two agents claiming
	// one task. It names the path the condition read that changed last and
	// WithAgent, who changed it; on a precondition_failed rejection only.
	ConflictPrecondition ConflictKind = "precondition"
	// ConflictApproval: the intent writes a path a board rule gates behind
	// approval (Rule.approve); it is the one conflict of an approval case.
	// WithTxn and WithAgent are empty.
	ConflictApproval ConflictKind = "approval"
)

// Conflict names one path an intent collided on and with whom. WithTxn and
// WithAgent are empty for a stale read, which collides with history.
type Conflict struct {
	Path      string       `json:"path"`
	Kind      ConflictKind `json:"kind"`
	WithTxn   string       `json:"with_txn,omitempty"`
	WithAgent string       `json:"with_agent,omitempty"`
}

// Decision is the coordinator's answer to an intent.
type Decision struct {
	Intent       string            `json:"intent"`
	Agent        string            `json:"agent"`
	Outcome      Outcome           `json:"outcome"`
	Reason       Reason            `json:"reason,omitempty"`
	Detail       string            `json:"detail,omitempty"`
	Txn          string            `json:"txn,omitempty"`
	Fence        uint64            `json:"fence,omitempty"`
	LeaseExpires *time.Time        `json:"lease_expires,omitempty"`
	Conflicts    []Conflict        `json:"conflicts,omitempty"`
	Versions     map[string]uint64 `json:"versions,omitempty"`
	Rev          uint64            `json:"rev,omitempty"`
	Retryable    bool              `json:"retryable"`
	MergedWith   []string          `json:"merged_with,omitempty"`
	Duplicate    bool              `json:"duplicate,omitempty"`
	// Warnings say how rules in warn mode would have decided otherwise.
	// They are not part of the decision's record (the shadow event after
	// it is), so a duplicate's recorded decision has none.
	Warnings []Warning `json:"warnings,omitempty"`
}

// Warning is a rule in warn mode that would have decided an intent
// otherwise: the rule, the outcome it would have given (and its reason
// after a colon), and its detail.
type Warning struct {
	Rule    string `json:"rule"`
	WouldBe string `json:"would_be"`
	Detail  string `json:"detail,omitempty"`
}
