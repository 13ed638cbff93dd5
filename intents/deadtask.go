package intents

import (
	"encoding/json"
	"time"
)

// HeaderDeadTask names the task of a dead letter that is a dead task
// (DeadTask) rather than an arbiter's case: the dead-letter stream keeps
// both.
const HeaderDeadTask = "Coagent-Dead-Task"

// Why a task's last try ended, in DeadTask.Why.
const (
	TryLeaseEnded = "lease_ended" // its owner's lease ran out
	TryReleased   = "released"    // its owner gave it back to the pool
)

// DeadTask is a task whose tries went past its rule's max_retries: its
// status is the rule's dead_to, nobody claims it, and the dead-letter
// stream keeps this letter of it until an operator retries it (puts it
// back in the pool, Pool, with its tries at 0) or removes it.
type DeadTask struct {
	Task       string `json:"task"`
	Status     string `json:"status"` // the rule's dead_to
	Pool       string `json:"pool"`   // the rule's reclaim_to: where a retry puts it
	Tries      int    `json:"tries"`
	MaxRetries int    `json:"max_retries"`
	// Owner, Lease and Fence are its last claim's.
	Owner string `json:"owner"`
	Lease string `json:"lease"`
	Fence uint64 `json:"fence"`
	Why   string `json:"why"` // TryLeaseEnded or TryReleased
	// Error is the task's field "error" as its last owner left it: what
	// the try that failed said of itself, if anything.
	Error json.RawMessage `json:"error,omitempty"`
	// Rev is the change that made it dead, Time that change's time.
	Rev  uint64    `json:"rev"`
	Time time.Time `json:"time"`
}
