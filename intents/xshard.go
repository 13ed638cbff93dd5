package intents

import "fmt"

// A cross-shard apply (docs/sharding.md) commits on every shard whose
// boards it touches or on none, by two-phase commit between the shards'
// coordinators. The shard that receives it coordinates: it splits the
// intent into a part per shard, prepares its own, and asks each other
// shard to prepare its part. A prepared part holds its paths as a
// transaction in flight does, with no lease: only the coordinator's
// decision ends it. The coordinator's decision of the intent, logged in
// its own log, is the commit point; each participant then applies or
// drops its part.

// The phases of a cross-shard event (EventXShard).
const (
	// XShardBegin, in the coordinating shard's log: it prepared its own
	// part, and asks the others for theirs. Parts are every shard's.
	XShardBegin = "begin"
	// XShardPrepare, in a participant's log: its part (the one of Parts)
	// is prepared; its paths are held until the coordinator's decision.
	XShardPrepare = "prepare"
	// XShardCommit: the part was applied (the change event before it) and
	// its paths are free. In the coordinating shard's log it is the
	// commit point, and carries the intent's decision.
	XShardCommit = "commit"
	// XShardAbort: the part was dropped and its paths are free.
	XShardAbort = "abort"
)

// XShard is the payload of a cross-shard event.
type XShard struct {
	Phase string `json:"phase"`
	// Intent is the cross-shard intent's id, which each part carries.
	Intent string `json:"intent"`
	// Coord is the shard that coordinates it: where its decision is.
	Coord string `json:"coord"`
	// Parts are, on begin, every shard's part, and on prepare this
	// shard's.
	Parts []XPart `json:"parts,omitempty"`
	// Decision is, on the coordinating shard's commit (its commit point),
	// the decision it answers once every other shard has applied its
	// part.
	Decision *Decision `json:"decision,omitempty"`
}

// XPart is a shard's part of a cross-shard intent: the reads, writes and
// conditions of the intent that name that shard's boards, as an apply of
// the intent's id.
type XPart struct {
	Shard  string  `json:"shard"`
	Intent *Intent `json:"intent"`
}

// Part returns the part of shard, or nil.
func (x *XShard) Part(shard string) *Intent {
	for _, p := range x.Parts {
		if p.Shard == shard {
			return p.Intent
		}
	}
	return nil
}

// Check says what is wrong with x as a request of phase, or nil: a prepare
// carries one part of the intent's id, an apply; a commit or abort none.
func (x *XShard) Check(phase string) error {
	switch {
	case x.Phase != phase:
		return fmt.Errorf("field phase = %q: want %q", x.Phase, phase)
	case x.Intent == "":
		return fmt.Errorf("field intent: missing")
	case CheckShard(x.Coord) != nil && x.Coord != DefaultShard:
		return fmt.Errorf("field coord: %v", CheckShard(x.Coord))
	case phase != XShardPrepare:
		return nil
	case len(x.Parts) != 1 || x.Parts[0].Intent == nil:
		return fmt.Errorf("field parts: want the one part of this shard, got %d", len(x.Parts))
	}
	p := x.Parts[0].Intent
	if p.ID != x.Intent || p.Kind != KindApply {
		return fmt.Errorf("field parts[0].intent: want an apply of id %s, got a %s of id %s", x.Intent, p.Kind, p.ID)
	}
	return p.Validate()
}

// XVote answers a shard.prepare request: the part is prepared, with the
// versions its paths will have once it is applied (nothing merges into a
// prepared part, so they are exact), or the decision that refuses it.
type XVote struct {
	Shard    string            `json:"shard"`
	Prepared bool              `json:"prepared"`
	Versions map[string]uint64 `json:"versions,omitempty"`
	Decision *Decision         `json:"decision,omitempty"`
}

// The API endpoints coordinators of different shards call on each other
// for a cross-shard apply. Under auth no agent may: only the
// coordinators' own user publishes there.
const (
	APIShardPrepare = "shard.prepare" // body XShard (phase prepare); answer XVote
	APIShardFinish  = "shard.finish"  // body XShard (phase commit or abort); answer {}
	// APIShardDecided asks the coordinating shard for its decision of a
	// cross-shard intent: body {"intent": id}, answer the durable
	// decision, queued while it is not decided (decision.get's answer,
	// for the coordinators' own user, which is no agent).
	APIShardDecided = "shard.decided"
)
