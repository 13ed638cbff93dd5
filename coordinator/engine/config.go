package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/bugs"
	"github.com/oklog/ulid/v2"
)

// Config tunes the engine. The zero value works: every field documents its
// default, applied by EnsureDefaults.
type Config struct {
	// NewID returns a fresh unique ULID for an event or a transaction at
	// time t. The default is a deterministic ULID made of t
	// and a counter, so that tests and replays need no randomness; the
	// coordinator passes one with random entropy.
	NewID func(t time.Time) ulid.ULID
	// DefaultLease is the lease of a propose that gives no lease_ms. The
	// default is 30s.
	DefaultLease time.Duration
	// MaxLease bounds lease_ms. The default is 10m.
	MaxLease time.Duration
	// LeaseWarning is how long before its lease ends an agent is told on its
	// notices subject, capped at half the lease. The default is 5s.
	LeaseWarning time.Duration
	// MaxWait bounds wait_ms. The default is 10m.
	MaxWait time.Duration
	// ArbiterTimeout is how long an escalated intent waits for an arbiter
	// before the fallback rejects it with arbiter_rejected. The default is 60s.
	ArbiterTimeout time.Duration
	// MaxTxnsPerAgent bounds the transactions one agent holds in flight; a
	// propose past it is rejected with rate_limited. The default is 1000.
	MaxTxnsPerAgent int
	// MaxParkedPerAgent bounds the intents one agent has waiting or
	// escalated; one more is rejected with rate_limited. The default is 1000.
	MaxParkedPerAgent int
	// DedupWindow is how many recent intent ids the engine remembers the
	// decision of (and how many ended transactions it remembers the end
	// of), the oldest forgotten first. A duplicate within it gets the
	// recorded decision from the engine itself; an older one from Recorded,
	// the event log's records. A larger window costs memory and, through the
	// garbage collector, throughput (see docs/performance.md).
	// The default is 10,000.
	DedupWindow int
	// Fallback, if set, settles an escalated intent no arbiter resolved by
	// its deadline, as a rule arbiter would (see package arbiter); the
	// resolution is recorded as made by FallbackArbiter. A nil Fallback, or
	// a resolution the engine refuses, rejects the intent with
	// arbiter_rejected. The default is nil.
	Fallback func(*intents.Escalation) *intents.Resolution
	// Panel, with a Quorum above 1, asks that many arbiters (of Panel.Of,
	// when given) to agree on every conflict case a rule's arbiters does
	// not settle otherwise. The default (0) takes the first resolution.
	Panel intents.Panel
	// Recorded, if set, looks up the recorded decision of an intent id the
	// engine no longer remembers (older than DedupWindow): the event log's
	// idempotency record. It must answer from what is durable and never
	// change its answer for an id, so replays stay exact.
	Recorded func(id string) (*intents.Decision, bool)
	// RecordedMax, if set, is the greatest intent id Recorded has a
	// record of when the engine starts (canonical ULIDs sort by their
	// time). An id that sorts after it and after every id the engine's
	// window has forgotten since cannot have a record, so the engine does
	// not ask Recorded: a new intent, whose id is younger than every id
	// forgotten, costs no lookup. The default ("") asks for every id.
	RecordedMax string
	// WhatIf, if set, is a rules file decided in the shadow of every
	// intent, in audit mode, in place of whatever shadow rules the log's
	// rules events name: coagent whatif's isolated mode.
	WhatIf []byte
	// Conditions bounds expression compilation and evaluation; see
	// cond.Options for its defaults.
	Conditions cond.Options
	// Bugs plants deliberate bugs for the robustness suite
	// (internal/bugs: nothing outside this module can set it). The zero
	// value plants none.
	Bugs bugs.Set
}

// FallbackArbiter is the arbiter name of resolutions made by Config.Fallback.
const FallbackArbiter = "fallback"

// EnsureDefaults fills every zero field with its default.
func (c *Config) EnsureDefaults() {
	if c.NewID == nil {
		c.NewID = newCounterIDs()
	}
	if c.DefaultLease == 0 {
		c.DefaultLease = 30 * time.Second
	}
	if c.MaxLease == 0 {
		c.MaxLease = 10 * time.Minute
	}
	if c.LeaseWarning == 0 {
		c.LeaseWarning = 5 * time.Second
	}
	if c.MaxWait == 0 {
		c.MaxWait = 10 * time.Minute
	}
	if c.ArbiterTimeout == 0 {
		c.ArbiterTimeout = 60 * time.Second
	}
	if c.MaxTxnsPerAgent == 0 {
		c.MaxTxnsPerAgent = 1000
	}
	if c.MaxParkedPerAgent == 0 {
		c.MaxParkedPerAgent = 1000
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = 10000
	}
	c.Conditions.EnsureDefaults()
}

// Validate reports every problem of the configuration at once.
func (c *Config) Validate() error {
	var errs []error
	neg := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("engine config: %s is negative (%s)", name, d))
		}
	}
	neg("DefaultLease", c.DefaultLease)
	neg("MaxLease", c.MaxLease)
	neg("LeaseWarning", c.LeaseWarning)
	neg("MaxWait", c.MaxWait)
	neg("ArbiterTimeout", c.ArbiterTimeout)
	if c.MaxLease > 0 && c.DefaultLease > c.MaxLease {
		errs = append(errs, fmt.Errorf("engine config: DefaultLease %s is above MaxLease %s", c.DefaultLease, c.MaxLease))
	}
	if c.MaxTxnsPerAgent < 0 {
		errs = append(errs, fmt.Errorf("engine config: MaxTxnsPerAgent is negative (%d)", c.MaxTxnsPerAgent))
	}
	if c.DedupWindow < 0 {
		errs = append(errs, fmt.Errorf("engine config: DedupWindow is negative (%d)", c.DedupWindow))
	}
	if c.Panel.Quorum < 0 || c.Panel.Quorum > 100 {
		errs = append(errs, fmt.Errorf("engine config: Panel.Quorum %d: want 0 to 100", c.Panel.Quorum))
	}
	if c.Panel.Of != "" && !intents.ValidSegment(strings.TrimPrefix(c.Panel.Of, "role:")) {
		errs = append(errs, fmt.Errorf("engine config: Panel.Of %q: want an agent name or role:NAME", c.Panel.Of))
	}
	if c.MaxParkedPerAgent < 0 {
		errs = append(errs, fmt.Errorf("engine config: MaxParkedPerAgent is negative (%d)", c.MaxParkedPerAgent))
	}
	return errors.Join(errs...)
}

// newCounterIDs returns a deterministic ULID source: the time's milliseconds
// and a counter as entropy. Unique within one engine.
func newCounterIDs() func(time.Time) ulid.ULID {
	var n uint64
	return func(t time.Time) ulid.ULID {
		n++
		var id ulid.ULID
		_ = id.SetTime(ulid.Timestamp(t))
		binary.BigEndian.PutUint64(id[8:], n)
		return id
	}
}
