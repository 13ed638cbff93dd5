package engine

import (
	"cmp"
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/conflict"
	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/intents"
)

// ErrCorruptSnapshot is returned (wrapped) by Restore for a snapshot that no
// engine could have been in.
var ErrCorruptSnapshot = errors.New("engine: corrupt snapshot")

// Snapshot is the engine's whole state right after the event at Seq: with
// it, Restore rebuilds an engine that carries on exactly as this one would —
// the same events, ids aside, for the same calls — so a restarted
// coordinator folds only the events after Seq. It encodes to JSON and back
// exactly (encoding/json); the intents' raw JSON values travel base64
// encoded for that, since encoding/json would compact them.
//
// What it leaves out is derived, and Restore recomputes it: the conflict
// index (from Txns), the agents' wait-for graph (from Waits), each agent's
// load (from Txns and Parked), and the compiled conditions (a cache).
//
// A snapshot shares intents and decisions with the engine; they never
// change, but the snapshot must be treated as read-only.
type Snapshot struct {
	Seq   uint64    `json:"seq"`   // the last event folded
	Fence uint64    `json:"fence"` // the last fencing token issued
	Now   time.Time `json:"now"`   // the engine's clock, which never runs back
	// Rev and Tree are the state tree (state.Tree.Export).
	Rev  uint64       `json:"rev"`
	Tree []state.Node `json:"tree"`
	// Txns are the transactions in flight, sorted by id.
	Txns []SnapshotTxn `json:"txns"`
	// Parked are the intents waiting or escalated, sorted by id.
	Parked []SnapshotParked `json:"parked"`
	// Claims are the task claims under leases, sorted by task path.
	Claims []SnapshotClaim `json:"claims,omitempty"`
	// Waits are the waiting intents' queues behind each transaction.
	Waits conflict.WaitsState `json:"waits"`
	// Decided holds the latest decision per intent id, and Ended how each
	// recently ended transaction ended, in the two generations the engine
	// keeps (see Config.DedupWindow): which one a key is in decides when it
	// is forgotten.
	Decided Window[*intents.Decision]    `json:"decided"`
	Ended   Window[intents.ReleaseCause] `json:"ended"`
	// Timers are the pending timers, in firing order, and TimerCount is how
	// many timers the engine ever set: the next gets TimerCount+1. Timers
	// due at the same instant fire in the order they were set, so both are
	// kept as they were. Of the stale timers (a lease renewed since, an
	// intent decided), which the engine skips, only those due after Now are
	// kept: a renewal can move a lease's end back to one of them and make
	// it live again.
	Timers     []SnapshotTimer `json:"timers"`
	TimerCount uint64          `json:"timer_count"`
	// Rules is the rules event in force, if any, and Buckets the agents'
	// token buckets under their rate quotas.
	Rules   *intents.Rules            `json:"rules,omitempty"`
	Buckets map[string]SnapshotBucket `json:"buckets,omitempty"`
	// Shard is the shard the log is of ("" for the default shard), Owners
	// the owner of each board it released or adopted, and Released the
	// seq of the event that released each board it has not taken back.
	Shard    string            `json:"shard,omitempty"`
	Owners   map[string]string `json:"owners,omitempty"`
	Released map[string]uint64 `json:"released,omitempty"`
	// XShard are the cross-shard applies this shard coordinates and has
	// not decided (their begin events), and the parts prepared here for
	// other shards' (their prepare events), sorted by intent id.
	XShard []SnapshotXShard `json:"xshard,omitempty"`
}

// SnapshotXShard is the event that began a cross-shard apply this shard
// coordinates, or prepared a part of another shard's, with its time.
type SnapshotXShard struct {
	Event *intents.XShard `json:"event"`
	At    time.Time       `json:"at"`
	// Decided is, for one this shard committed and has not answered, the
	// decision its commit point logged.
	Decided *intents.Decision `json:"decided,omitempty"`
}

// MarshalJSON encodes the event with its parts' values exact.
func (x SnapshotXShard) MarshalJSON() ([]byte, error) {
	type part struct {
		Shard  string       `json:"shard"`
		Intent *exactIntent `json:"intent"`
	}
	var parts []part
	if x.Event != nil {
		for _, p := range x.Event.Parts {
			parts = append(parts, part{p.Shard, toExact(p.Intent)})
		}
		ev := *x.Event
		ev.Parts = nil // they go exact, beside it
		x.Event = &ev
	}
	type plain SnapshotXShard
	return json.Marshal(struct {
		plain
		Parts []part `json:"parts"`
	}{plain(x), parts})
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (x *SnapshotXShard) UnmarshalJSON(b []byte) error {
	type plain SnapshotXShard
	var v struct {
		plain
		Parts []struct {
			Shard  string       `json:"shard"`
			Intent *exactIntent `json:"intent"`
		} `json:"parts"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*x = SnapshotXShard(v.plain)
	if x.Event != nil {
		x.Event.Parts = nil
		for _, p := range v.Parts {
			x.Event.Parts = append(x.Event.Parts, intents.XPart{Shard: p.Shard, Intent: fromExact(p.Intent)})
		}
	}
	return nil
}

// SnapshotBucket is one agent's token bucket: its tokens as of At.
type SnapshotBucket struct {
	Tokens float64   `json:"tokens"`
	At     time.Time `json:"at"`
}

// SnapshotTxn is a transaction in flight.
type SnapshotTxn struct {
	ID      string          `json:"id"`
	Agent   string          `json:"agent"`
	Fence   uint64          `json:"fence"`
	LeaseMS int64           `json:"lease_ms"`
	Expires time.Time       `json:"expires"`
	Propose *intents.Intent `json:"propose"`
	// Reads are the grant's reads: the propose's declared reads and the
	// paths its conditions touch.
	Reads []intents.Read `json:"reads,omitempty"`
	// Merged are the intents that committed beside it, for merged_with.
	Merged []string `json:"merged,omitempty"`
	// Warned says the agent was told its lease is about to end.
	Warned bool `json:"warned,omitempty"`
	// Trace is its propose's trace id, if it had one.
	Trace string `json:"trace,omitempty"`
}

// SnapshotClaim is a task claim under a lease (see claims.go).
type SnapshotClaim struct {
	Path      string        `json:"path"`
	Owner     string        `json:"owner"`
	ID        string        `json:"id"`
	Fence     uint64        `json:"fence"`
	Lease     time.Duration `json:"lease"`
	ReclaimTo string        `json:"reclaim_to,omitempty"`
	Expires   time.Time     `json:"expires"`
	Warned    bool          `json:"warned,omitempty"`
	Trace     string        `json:"trace,omitempty"`
}

// SnapshotParked is an intent waiting on transactions or on an arbiter.
type SnapshotParked struct {
	Intent    *intents.Intent    `json:"intent"`
	Deadline  time.Time          `json:"deadline"`
	Escalated bool               `json:"escalated,omitempty"`
	Conflicts []intents.Conflict `json:"conflicts"`
	// Trace is the intent's trace id, if it had one.
	Trace string `json:"trace,omitempty"`
	// Gate, Votes and Approved are an approval case's.
	Gate     *intents.Gate  `json:"gate,omitempty"`
	Votes    []intents.Vote `json:"votes,omitempty"`
	Approved bool           `json:"approved,omitempty"`
	Answered bool           `json:"answered,omitempty"`
	Panel    *intents.Panel `json:"panel,omitempty"`
}

// Window is the two generations of a map that forgets its oldest keys.
type Window[V any] struct {
	Cur  map[string]V `json:"cur"`
	Prev map[string]V `json:"prev"`
	// Carried is how many of Cur's keys the last turn carried over: the
	// next turn comes after as many new keys as a generation holds.
	Carried int `json:"carried,omitempty"`
}

// SnapshotTimer is a pending timer. Kind is "lease_warning", "lease_end"
// (ID is a txn), "deadline" (ID is a parked intent), "claim_warning" or
// "claim_end" (ID is a claimed task's path); N is its place in the order
// timers were set.
type SnapshotTimer struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	ID   string    `json:"id"`
	N    uint64    `json:"n"`
}

var timerKinds = [...]string{timerLeaseWarn: "lease_warning", timerLeaseEnd: "lease_end", timerDeadline: "deadline",
	timerClaimWarn: "claim_warning", timerClaimEnd: "claim_end"}

// Snapshot returns the engine's state after its last event. It must not be
// called during another call (the engine is not safe for concurrent use). It
// changes nothing.
func (e *Engine) Snapshot() *Snapshot {
	s := &Snapshot{
		Seq:        e.seq,
		Fence:      e.fence,
		Now:        e.now,
		Rev:        e.tree.Rev(),
		Tree:       e.tree.Export(),
		Txns:       make([]SnapshotTxn, 0, len(e.txns)),
		Parked:     make([]SnapshotParked, 0, len(e.parked)),
		Waits:      e.waits.Export(),
		Decided:    Window[*intents.Decision]{Cur: maps.Clone(e.decided.cur), Prev: maps.Clone(e.decided.prev), Carried: e.decided.carried},
		Ended:      Window[intents.ReleaseCause]{Cur: maps.Clone(e.ended.cur), Prev: maps.Clone(e.ended.prev), Carried: e.ended.carried},
		Timers:     []SnapshotTimer{},
		TimerCount: e.timers.n,
		Rules:      e.rulesEvent,
		Shard:      e.shard,
		Owners:     maps.Clone(e.owners),
	}
	if len(e.released) > 0 {
		s.Released = maps.Clone(e.released)
	}
	for _, id := range slices.Sorted(maps.Keys(e.xparts)) {
		if p := e.xparts[id]; e.xcoords[id] == nil {
			s.XShard = append(s.XShard, SnapshotXShard{At: p.at, Event: &intents.XShard{Phase: intents.XShardPrepare, Intent: id,
				Coord: p.coord, Parts: []intents.XPart{{Shard: e.Shard(), Intent: p.in}}}})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(e.xcoords)) {
		c := e.xcoords[id]
		s.XShard = append(s.XShard, SnapshotXShard{Event: c.begin, At: c.at, Decided: c.decided})
	}
	slices.SortStableFunc(s.XShard, func(a, b SnapshotXShard) int { return strings.Compare(a.Event.Intent, b.Event.Intent) })
	for agent, b := range e.buckets {
		if s.Buckets == nil {
			s.Buckets = map[string]SnapshotBucket{}
		}
		s.Buckets[agent] = SnapshotBucket{Tokens: b.tokens, At: b.at}
	}
	for _, t := range e.txns {
		s.Txns = append(s.Txns, SnapshotTxn{ID: t.ID, Agent: t.Agent, Fence: t.fence, LeaseMS: t.leaseMS,
			Expires: t.expires, Propose: t.propose, Reads: t.reads, Merged: slices.Clone(t.merged), Warned: t.warned, Trace: t.trace})
	}
	slices.SortFunc(s.Txns, func(a, b SnapshotTxn) int { return strings.Compare(a.ID, b.ID) })
	for _, p := range e.parked {
		s.Parked = append(s.Parked, SnapshotParked{Intent: p.in, Deadline: p.deadline, Escalated: p.escalated,
			Conflicts: p.conflicts, Trace: p.trace, Gate: p.gate, Votes: p.votes, Approved: p.approved, Answered: p.answered, Panel: p.panel})
	}
	slices.SortFunc(s.Parked, func(a, b SnapshotParked) int { return strings.Compare(a.Intent.ID, b.Intent.ID) })
	for _, c := range e.claims {
		s.Claims = append(s.Claims, SnapshotClaim{Path: c.path, Owner: c.owner, ID: c.id, Fence: c.fence, Lease: c.lease,
			ReclaimTo: c.reclaimTo, Expires: c.expires, Warned: c.warned, Trace: c.trace})
	}
	slices.SortFunc(s.Claims, func(a, b SnapshotClaim) int { return strings.Compare(a.Path, b.Path) })
	// Stale timers never fire (see timer), so only the live ones are kept.
	for _, tm := range e.timers.h {
		if e.live(tm) {
			s.Timers = append(s.Timers, SnapshotTimer{At: tm.at, Kind: timerKinds[tm.kind], ID: tm.id, N: tm.n})
		}
	}
	slices.SortFunc(s.Timers, func(a, b SnapshotTimer) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return cmp.Compare(a.N, b.N)
	})
	return s
}

// Restore returns an engine in exactly the state s was taken in, configured
// by cfg as New is; for it to carry on exactly as the engine s was taken
// from, cfg must be the same (its NewID aside, which only makes the ids).
// Restore keeps parts of s, which must not change afterwards. It returns
// cfg's validation error, or an error wrapping ErrCorruptSnapshot for a
// snapshot that does not describe a state the engine can be in — never a
// panic.
func Restore(cfg Config, s *Snapshot) (*Engine, error) {
	e, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("%w: nil", ErrCorruptSnapshot)
	}
	if err := e.restore(s); err != nil {
		return nil, fmt.Errorf("%w at seq %d: %w", ErrCorruptSnapshot, s.Seq, err)
	}
	return e, nil
}

func (e *Engine) restore(s *Snapshot) error {
	tree, err := state.Import(s.Rev, s.Tree)
	if err != nil {
		return err
	}
	if s.Rev > s.Seq {
		return fmt.Errorf("the state is at rev %d, after the last event", s.Rev)
	}
	e.tree, e.seq, e.fence, e.now = tree, s.Seq, s.Fence, s.Now
	if s.Shard != "" {
		if err := intents.CheckShard(s.Shard); err != nil {
			return err
		}
	}
	e.shard, e.owners = s.Shard, maps.Clone(s.Owners)
	for board, seq := range s.Released {
		if seq == 0 || seq > s.Seq || !intents.ValidSegment(board) {
			return fmt.Errorf("released board %q: at event %d, not one of the %d before", board, seq, s.Seq)
		}
	}
	e.released = maps.Clone(s.Released)
	if s.Rules != nil {
		if err := e.foldRules(s.Rules); err != nil {
			return fmt.Errorf("rules: %w", err)
		}
	}
	for agent, b := range s.Buckets {
		if !intents.ValidSegment(agent) || b.Tokens < 0 || b.Tokens != b.Tokens {
			return fmt.Errorf("bucket of %q: %v tokens", agent, b.Tokens)
		}
		e.buckets[agent] = &bucket{tokens: b.Tokens, at: b.At}
	}

	for _, st := range s.Txns {
		switch {
		case st.ID == "" || st.Agent == "":
			return fmt.Errorf("txn %q of agent %q: empty id or agent", st.ID, st.Agent)
		case e.txns[st.ID] != nil:
			return fmt.Errorf("txn %s listed twice", st.ID)
		case st.Propose == nil:
			return fmt.Errorf("txn %s without its propose", st.ID)
		case st.Fence > s.Fence:
			return fmt.Errorf("txn %s has fence %d, after the last one issued, %d", st.ID, st.Fence, s.Fence)
		}
		if err := checkIntent(st.Propose); err != nil {
			return fmt.Errorf("txn %s: propose: %w", st.ID, err)
		}
		// As the fold of its grant builds it, with what happened since.
		t := newTxn(&intents.Grant{Txn: st.ID, Agent: st.Agent, Fence: st.Fence, LeaseMS: st.LeaseMS,
			Expires: st.Expires, Reads: st.Reads, Propose: st.Propose})
		t.merged, t.warned, t.trace = slices.Clone(st.Merged), st.Warned, st.Trace
		e.txns[t.ID] = t
		e.loadOf(t.Agent).txns++
	}
	// The index answers in sorted order, whatever order it was built in.
	for _, id := range slices.Sorted(maps.Keys(e.txns)) {
		e.index.Add(&e.txns[id].Txn)
	}

	for _, sx := range s.XShard {
		x := sx.Event
		if x == nil || x.Phase != intents.XShardBegin && x.Phase != intents.XShardPrepare {
			return fmt.Errorf("cross-shard entry: want a begin or prepare event")
		}
		if err := e.checkXShard(x); err != nil {
			return err
		}
		for _, p := range x.Parts {
			if p.Intent == nil || p.Intent.ID != x.Intent {
				return fmt.Errorf("cross-shard intent %s: a part of another id", x.Intent)
			}
		}
		e.foldXShard(&intents.Event{Time: sx.At, XShard: x})
		if d := sx.Decided; d != nil {
			// Committed: its own part applied and freed, its answer
			// waiting for the other shards.
			if x.Phase != intents.XShardBegin || d.Intent != x.Intent {
				return fmt.Errorf("cross-shard intent %s: a decision without its begin", x.Intent)
			}
			p := e.xparts[x.Intent]
			e.index.Remove(&p.Txn)
			delete(e.xparts, x.Intent)
			e.xcoords[x.Intent].decided = d
		}
	}

	for _, sp := range s.Parked {
		in := sp.Intent
		switch {
		case in == nil || in.ID == "":
			return fmt.Errorf("parked intent without an id")
		case e.parked[in.ID] != nil:
			return fmt.Errorf("intent %s parked twice", in.ID)
		case !sp.Escalated && len(sp.Conflicts) == 0:
			return fmt.Errorf("intent %s waits on no conflict", in.ID)
		}
		if err := checkIntent(in); err != nil {
			return fmt.Errorf("parked intent %s: %w", in.ID, err)
		}
		e.parked[in.ID] = &parked{in: in, deadline: sp.Deadline, escalated: sp.Escalated, conflicts: sp.Conflicts, trace: sp.Trace,
			gate: sp.Gate, votes: sp.Votes, approved: sp.Approved, answered: sp.Answered, panel: sp.Panel}
		e.loadOf(in.Agent).parked++
	}

	for _, sc := range s.Claims {
		switch {
		case sc.Path == "" || sc.Owner == "" || sc.ID == "":
			return fmt.Errorf("claim on %q of %q: empty path, owner or id", sc.Path, sc.Owner)
		case e.claims[sc.Path] != nil || e.claimIDs[sc.ID] != "":
			return fmt.Errorf("claim %s on %s listed twice", sc.ID, sc.Path)
		case sc.Fence == 0 || sc.Fence > s.Fence:
			return fmt.Errorf("claim %s has fence %d, not one issued (the last is %d)", sc.ID, sc.Fence, s.Fence)
		case sc.Lease <= 0:
			return fmt.Errorf("claim %s has lease %s", sc.ID, sc.Lease)
		case ownerOf(e.tree, sc.Path) != sc.Owner:
			return fmt.Errorf("claim %s on %s of %s, which the state says %s owns", sc.ID, sc.Path, sc.Owner, ownerOf(e.tree, sc.Path))
		}
		e.claims[sc.Path] = &claim{path: sc.Path, owner: sc.Owner, id: sc.ID, fence: sc.Fence, lease: sc.Lease,
			reclaimTo: sc.ReclaimTo, expires: sc.Expires, warned: sc.Warned, trace: sc.Trace}
		e.claimIDs[sc.ID] = sc.Path
		e.noteAbove(sc.Path, 1)
	}

	if e.waits, err = conflict.ImportWaits(s.Waits); err != nil {
		return err
	}
	for _, w := range s.Waits.Parked {
		p := e.parked[w.ID]
		if p == nil || p.in.Agent != w.Agent {
			return fmt.Errorf("intent %s of agent %s waits but is not parked", w.ID, w.Agent)
		}
		for _, h := range w.Holders {
			if t := e.txns[h.Txn]; (t == nil || t.Agent != h.Agent) && (e.xparts[h.Txn] == nil || e.xparts[h.Txn].Agent != h.Agent) {
				return fmt.Errorf("intent %s waits on txn %s of agent %s, which is not in flight", w.ID, h.Txn, h.Agent)
			}
		}
	}
	for id, p := range e.parked {
		if !p.escalated && !e.waits.Parked(id) {
			return fmt.Errorf("intent %s is parked waiting but waits on nothing", id)
		}
	}

	if err := restoreWindow(e.decided, s.Decided, func(d *intents.Decision) bool { return d != nil }); err != nil {
		return fmt.Errorf("decided: %w", err)
	}
	if err := restoreWindow(e.ended, s.Ended, func(intents.ReleaseCause) bool { return true }); err != nil {
		return fmt.Errorf("ended: %w", err)
	}

	return e.restoreTimers(s)
}

// checkIntent verifies that an intent the engine kept is one it could have
// accepted: the engine decides and commits parked intents and proposes'
// writes later, and trusts them to be valid then.
func checkIntent(in *intents.Intent) error {
	raw, err := json.Marshal(in)
	if err != nil {
		return err
	}
	_, err = intents.Decode(raw)
	return err
}

func restoreWindow[V any](r *recent[V], w Window[V], ok func(V) bool) error {
	for _, m := range []map[string]V{w.Cur, w.Prev} {
		for k, v := range m {
			if !ok(v) {
				return fmt.Errorf("key %q without a value", k)
			}
		}
	}
	if w.Carried < 0 || w.Carried > len(w.Cur) {
		return fmt.Errorf("carried %d of the %d keys of cur", w.Carried, len(w.Cur))
	}
	r.cur, r.prev, r.carried = maps.Clone(w.Cur), maps.Clone(w.Prev), w.Carried
	if r.cur == nil {
		r.cur = make(map[string]V)
	}
	if r.prev == nil {
		r.prev = make(map[string]V)
	}
	return nil
}

func (e *Engine) restoreTimers(s *Snapshot) error {
	h := make([]timer, 0, len(s.Timers))
	seen := make(map[uint64]bool, len(s.Timers))
	for _, st := range s.Timers {
		kind := slices.Index(timerKinds[:], st.Kind)
		switch {
		case kind < 0:
			return fmt.Errorf("timer %d: unknown kind %q", st.N, st.Kind)
		case st.N == 0 || st.N > s.TimerCount:
			return fmt.Errorf("timer %d: not among the %d set", st.N, s.TimerCount)
		case seen[st.N]:
			return fmt.Errorf("timer %d listed twice", st.N)
		}
		seen[st.N] = true
		h = append(h, timer{at: st.At, kind: timerKind(kind), id: st.ID, n: st.N})
	}
	e.timers = timers{h: h, n: s.TimerCount}
	heap.Init(&e.timers)
	// Each lease and deadline takes the number of its timer back.
	for _, tm := range h {
		switch tm.kind {
		case timerLeaseWarn:
			if t := e.txns[tm.id]; t != nil && !t.warned && tm.at.Equal(e.warnAt(t)) {
				t.warnN = max(t.warnN, tm.n)
			}
		case timerLeaseEnd:
			if t := e.txns[tm.id]; t != nil && tm.at.Equal(t.expires) {
				t.endN = max(t.endN, tm.n)
			}
		case timerDeadline:
			if p := e.parked[tm.id]; p != nil && tm.at.Equal(p.deadline) {
				p.deadlineN = max(p.deadlineN, tm.n)
			}
		case timerClaimWarn:
			if c := e.claims[tm.id]; c != nil && !c.warned && tm.at.Equal(e.claimWarnAt(c)) {
				c.warnN = max(c.warnN, tm.n)
			}
		case timerClaimEnd:
			if c := e.claims[tm.id]; c != nil && tm.at.Equal(c.expires) {
				c.endN = max(c.endN, tm.n)
			}
		}
	}
	// What is in flight must end some day: every lease has its timer, and
	// so has every parked intent's deadline.
	type key struct {
		sec  int64
		nsec int
		kind timerKind
		id   string
	}
	keyOf := func(at time.Time, kind timerKind, id string) key { return key{at.Unix(), at.Nanosecond(), kind, id} }
	has := make(map[key]bool, len(h))
	for _, tm := range h {
		has[keyOf(tm.at, tm.kind, tm.id)] = true
	}
	for _, t := range e.txns {
		if !has[keyOf(t.expires, timerLeaseEnd, t.ID)] {
			return fmt.Errorf("txn %s has no timer for its lease ending at %s", t.ID, t.expires.Format(time.RFC3339Nano))
		}
	}
	for _, c := range e.claims {
		if !has[keyOf(c.expires, timerClaimEnd, c.path)] {
			return fmt.Errorf("claim %s on %s has no timer for its lease ending at %s", c.id, c.path, c.expires.Format(time.RFC3339Nano))
		}
	}
	for id, p := range e.parked {
		if !has[keyOf(p.deadline, timerDeadline, id)] {
			return fmt.Errorf("intent %s has no timer for its deadline at %s", id, p.deadline.Format(time.RFC3339Nano))
		}
	}
	return nil
}

// The intents travel with their raw JSON values base64 encoded: encoding/json
// compacts a json.RawMessage it encodes (and escapes <, > and &), and the
// bytes of a propose's values come back in the change of its commit.

type exactWrite struct {
	Path  string     `json:"path"`
	Op    intents.Op `json:"op"`
	Value []byte     `json:"value,omitempty"`
}

type exactIntent struct {
	*intents.Intent
	Writes []exactWrite `json:"writes,omitempty"`
	Meta   []byte       `json:"meta,omitempty"`
}

func toExact(in *intents.Intent) *exactIntent {
	if in == nil {
		return nil
	}
	x := &exactIntent{Intent: in, Meta: in.Meta}
	if in.Writes != nil {
		x.Writes = make([]exactWrite, len(in.Writes))
		for i, w := range in.Writes {
			x.Writes[i] = exactWrite{Path: w.Path, Op: w.Op, Value: w.Value}
		}
	}
	return x
}

func fromExact(x *exactIntent) *intents.Intent {
	if x == nil {
		return nil
	}
	in := x.Intent
	if in == nil {
		in = new(intents.Intent)
	}
	in.Writes, in.Meta = nil, x.Meta
	if x.Writes != nil {
		in.Writes = make([]intents.Write, len(x.Writes))
		for i, w := range x.Writes {
			in.Writes[i] = intents.Write{Path: w.Path, Op: w.Op, Value: w.Value}
		}
	}
	return in
}

// MarshalJSON encodes the transaction with its propose's values exact.
func (t SnapshotTxn) MarshalJSON() ([]byte, error) {
	type plain SnapshotTxn
	return json.Marshal(struct {
		plain
		Propose *exactIntent `json:"propose"`
	}{plain(t), toExact(t.Propose)})
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (t *SnapshotTxn) UnmarshalJSON(b []byte) error {
	type plain SnapshotTxn
	var v struct {
		plain
		Propose *exactIntent `json:"propose"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*t = SnapshotTxn(v.plain)
	t.Propose = fromExact(v.Propose)
	return nil
}

// MarshalJSON encodes the parked intent with its values exact.
func (p SnapshotParked) MarshalJSON() ([]byte, error) {
	type plain SnapshotParked
	return json.Marshal(struct {
		plain
		Intent *exactIntent `json:"intent"`
	}{plain(p), toExact(p.Intent)})
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (p *SnapshotParked) UnmarshalJSON(b []byte) error {
	type plain SnapshotParked
	var v struct {
		plain
		Intent *exactIntent `json:"intent"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = SnapshotParked(v.plain)
	p.Intent = fromExact(v.Intent)
	return nil
}
