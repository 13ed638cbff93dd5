package intents

import (
	"encoding/json"
)

// MaxIntentSize is the largest encoded intent accepted (SPEC §2).
const MaxIntentSize = 1 << 20

// Kind says what an intent asks for.
type Kind string

// The kinds of SPEC §2.
const (
	KindApply   Kind = "apply"   // one-shot atomic change
	KindPropose Kind = "propose" // open a transaction
	KindCommit  Kind = "commit"  // write a granted transaction's values and end it
	KindAbort   Kind = "abort"   // end a granted transaction without writing
	KindRenew   Kind = "renew"   // extend a grant's lease
)

// Kinds lists every kind in a stable order.
var Kinds = []Kind{KindApply, KindPropose, KindCommit, KindAbort, KindRenew}

// Op is what a write does at its path.
type Op string

// The write operations of SPEC §2.
const (
	OpSet    Op = "set"
	OpDelete Op = "delete"
	OpMerge  Op = "merge"  // object keys become child paths, one level deep; a null deletes
	OpAppend Op = "append" // one element appended to an array (absent reads as [])
	OpIncr   Op = "incr"   // number added (absent reads as 0, default value 1)
)

// Ops lists every op in a stable order.
var Ops = []Op{OpSet, OpDelete, OpMerge, OpAppend, OpIncr}

// Commutative reports whether two writes with op o on the same path can be
// applied in either order with the same result, so they never conflict.
func (o Op) Commutative() bool { return o == OpAppend || o == OpIncr }

// OnConflict says what to do with an intent that conflicts with a transaction
// in flight.
type OnConflict string

// The conflict policies of SPEC §2.
const (
	OnConflictReject   OnConflict = "reject"
	OnConflictWait     OnConflict = "wait"
	OnConflictEscalate OnConflict = "escalate"
)

// DefaultWaitMS is the bound of an on_conflict=wait intent that gives no wait_ms.
const DefaultWaitMS = 30000

// Intent is what an agent publishes: what it reads, what it will write and the
// conditions around them. The JSON names are the wire contract.
type Intent struct {
	ID         string          `json:"id"`
	Agent      string          `json:"agent"`
	Kind       Kind            `json:"kind"`
	Txn        string          `json:"txn,omitempty"`
	Fence      uint64          `json:"fence,omitempty"`
	Action     string          `json:"action,omitempty"`
	Reads      []Read          `json:"reads,omitempty"`
	Writes     []Write         `json:"writes,omitempty"`
	Pre        []string        `json:"pre,omitempty"`
	Post       []string        `json:"post,omitempty"`
	Priority   int64           `json:"priority,omitempty"`
	LeaseMS    int64           `json:"lease_ms,omitempty"`
	OnConflict OnConflict      `json:"on_conflict,omitempty"`
	WaitMS     int64           `json:"wait_ms,omitempty"`
	Meta       json.RawMessage `json:"meta,omitempty"`
}

// Read is one path a decision depends on. With Version set, a newer version
// of the path makes the intent a stale read.
type Read struct {
	Path    string  `json:"path"`
	Version *uint64 `json:"version,omitempty"`
}

// Write is one change an intent makes. Value holds the exact JSON given;
// nil means absent (a JSON null is the four bytes "null").
type Write struct {
	Path  string          `json:"path"`
	Op    Op              `json:"op"`
	Value json.RawMessage `json:"value,omitempty"`
}

// Policy returns the intent's conflict policy with the default applied.
func (in *Intent) Policy() OnConflict {
	if in.OnConflict == "" {
		return OnConflictReject
	}
	return in.OnConflict
}

// Wait returns the wait bound in milliseconds with the default applied.
func (in *Intent) Wait() int64 {
	if in.WaitMS == 0 {
		return DefaultWaitMS
	}
	return in.WaitMS
}

// Transactional reports whether the intent acts on an existing grant.
func (k Kind) Transactional() bool {
	return k == KindCommit || k == KindAbort || k == KindRenew
}
