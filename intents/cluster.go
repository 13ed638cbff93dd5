package intents

import "time"

// The roles of a coordinator in a cluster (SPEC §10).
const (
	RoleActive  = "active"  // holds the leadership key: decides, appends the log
	RoleStandby = "standby" // follows the log into its own, ready to take over
)

// MemberStatus is what a coordinator of a cluster says of itself on
// Subjects.Status.
type MemberStatus struct {
	// Node names the coordinator (serve's --name).
	Node string `json:"node"`
	// Role is RoleActive or RoleStandby.
	Role string `json:"role"`
	// Leader is who holds the leadership key, as this coordinator last
	// saw it ("" when nobody does).
	Leader string `json:"leader,omitempty"`
	// Seq is the last event of its local log; LogSeq the message of the
	// replicated log it has folded up to, LogLast the log's last message
	// when it answered.
	Seq     uint64 `json:"seq"`
	LogSeq  uint64 `json:"log_seq"`
	LogLast uint64 `json:"log_last"`
	// LogFirst is the replicated log's first message when it answered:
	// the active coordinator trims the messages before it (see Snapshot).
	LogFirst uint64 `json:"log_first,omitempty"`
	// Snapshot is the last snapshot of the replicated log this
	// coordinator stored (the active one) or loaded (one that joined from
	// it), when there is one.
	Snapshot *SnapshotStatus `json:"snapshot,omitempty"`
	// LagGroups is LogLast − LogSeq; LagSeconds how much older the last
	// group it folded is than the log's last (0 when current).
	LagGroups  uint64  `json:"lag_groups"`
	LagSeconds float64 `json:"lag_seconds"`
	// Since is when it took its role.
	Since time.Time `json:"since"`
}

// SnapshotStatus names a snapshot of the replicated log: the state after
// event Seq, which message LogSeq of the log holds, and when it was
// stored.
type SnapshotStatus struct {
	Seq    uint64    `json:"seq"`
	LogSeq uint64    `json:"log_seq"`
	Stored time.Time `json:"stored"`
}

// SnapshotReply is the active coordinator's answer on
// Subjects.ClusterSnapshot: the snapshot it stored, who stored it, and
// the replicated log's first message once it was trimmed below it
// (lower than the snapshot's message while a coordinator that answers
// the status has folded less).
type SnapshotReply struct {
	SnapshotStatus
	Node     string `json:"node"`
	LogFirst uint64 `json:"log_first"`
}
