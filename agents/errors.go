package agents

import (
	"errors"
	"fmt"

	"github.com/coagent/coagent/intents"
)

// The rejection reasons of SPEC §3 as errors, so that callers branch with
// errors.Is(err, agents.ErrConflict). A rejected intent comes back as a
// *RejectedError, which matches the sentinel of its reason and carries the
// whole decision (conflicts, current versions, detail).
var (
	ErrInvalid             = errors.New("invalid")
	ErrUnauthorized        = errors.New("unauthorized")
	ErrPreconditionFailed  = errors.New("precondition failed")
	ErrPostconditionFailed = errors.New("postcondition failed")
	ErrConflict            = errors.New("conflict")
	ErrStaleRead           = errors.New("stale read")
	ErrOutOfScope          = errors.New("out of scope")
	ErrFenced              = errors.New("fenced")
	ErrLeaseExpired        = errors.New("lease expired")
	ErrWaitTimeout         = errors.New("wait timeout")
	ErrArbiterRejected     = errors.New("arbiter rejected")
	ErrDeadlock            = errors.New("deadlock")
	ErrRateLimited         = errors.New("rate limited")
	ErrIllegalTransition   = errors.New("illegal transition")
)

// ErrUnknownReason is what a rejection with a reason this SDK does not
// know (a newer coordinator's) matches.
var ErrUnknownReason = errors.New("rejected for a reason unknown to this client")

var reasonErrs = map[intents.Reason]error{
	intents.ReasonInvalid:             ErrInvalid,
	intents.ReasonUnauthorized:        ErrUnauthorized,
	intents.ReasonPreconditionFailed:  ErrPreconditionFailed,
	intents.ReasonPostconditionFailed: ErrPostconditionFailed,
	intents.ReasonConflict:            ErrConflict,
	intents.ReasonStaleRead:           ErrStaleRead,
	intents.ReasonOutOfScope:          ErrOutOfScope,
	intents.ReasonFenced:              ErrFenced,
	intents.ReasonLeaseExpired:        ErrLeaseExpired,
	intents.ReasonWaitTimeout:         ErrWaitTimeout,
	intents.ReasonArbiterRejected:     ErrArbiterRejected,
	intents.ReasonDeadlock:            ErrDeadlock,
	intents.ReasonRateLimited:         ErrRateLimited,
	intents.ReasonIllegalTransition:   ErrIllegalTransition,
}

// ReasonError returns the sentinel error of a rejection reason.
func ReasonError(r intents.Reason) error {
	if err, ok := reasonErrs[r]; ok {
		return err
	}
	return ErrUnknownReason
}

// RejectedError is a rejected intent: its final decision says why.
type RejectedError struct {
	Decision *intents.Decision
}

func (e *RejectedError) Error() string {
	d := e.Decision
	msg := fmt.Sprintf("agents: intent %s rejected: %s", d.Intent, d.Reason)
	if d.Detail != "" {
		msg += ": " + d.Detail
	}
	return msg
}

// Unwrap returns the sentinel of the reason, so errors.Is matches it.
func (e *RejectedError) Unwrap() error { return ReasonError(e.Decision.Reason) }

// Retryable reports whether the same intent may succeed if tried again
// (with fresh versions, after the conflict ends).
func (e *RejectedError) Retryable() bool { return e.Decision.Retryable }

// ErrPreempted is what a transaction's methods return after an arbiter
// preempted it: the coordinator aborted it for another intent.
var ErrPreempted = errors.New("preempted")

// ErrTxnEnded is returned by a transaction's methods once it has ended:
// committed, aborted, or lost with its lease.
var ErrTxnEnded = errors.New("agents: transaction has ended")

// UnexpectedError is a final decision whose outcome the call did not ask
// for, such as "aborted" for an apply: a coordinator that breaks the
// contract, reported rather than taken for success.
type UnexpectedError struct {
	Decision *intents.Decision
	Want     intents.Outcome
}

func (e *UnexpectedError) Error() string {
	return fmt.Sprintf("agents: intent %s: outcome %q, want %q", e.Decision.Intent, e.Decision.Outcome, e.Want)
}
