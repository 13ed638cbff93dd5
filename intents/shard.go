package intents

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// DefaultShard names the shard of a deployment that names none: it owns
// every board no other shard took, and serves under the bare prefix, so a
// deployment of one shard stores and speaks exactly as before shards.
const DefaultShard = "default"

// shardName is what a shard's name may be: one subject token, lower case,
// so that it reads the same in a stream's name (upper-cased) and a subject.
var shardName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// reservedShards are the tokens that follow the prefix in the default
// shard's own subjects: a shard of one of these names would serve inside
// them.
var reservedShards = []string{"api", "intents", "decisions", "notices", "events", "arbiter", "log", "cluster", "shards"}

// CheckShard says what is wrong with a shard's name, or nil.
func CheckShard(name string) error {
	switch {
	case !shardName.MatchString(name):
		return fmt.Errorf("shard %q: want 1 to 32 of a-z, 0-9, _ and -, starting with a letter or digit", name)
	case slices.Contains(reservedShards, name):
		return fmt.Errorf("shard %q: a word of the coordinator's own subjects", name)
	}
	return nil
}

// Shard returns the subjects of shard name, a shard of the deployment
// whose default shard speaks under s: the same subjects, streams, lease
// key and replicated log as s's, under the prefix <prefix>.<name>
// (COAGENT_S1_INTENTS for shard s1 under the default prefix). The
// default shard's are s's own.
func (s Subjects) Shard(name string) Subjects {
	if name == "" || name == DefaultShard {
		return s
	}
	return Subjects{Prefix: s.p() + "." + name}
}

// ShardsBucket is the key-value bucket of the shard map: a key per board
// taken from the default shard, whose value is the shard that owns it
// now. It is what clients route by; each shard's own log, not the
// bucket, says which boards it decides (see Handoff).
func (s Subjects) ShardsBucket() string { return s.Stream("SHARDS") }

// The kinds of a board event.
const (
	// HandoffJoin is the first event of a shard's log other than the
	// default shard's: it names the shard the log is of.
	HandoffJoin = "join"
	// HandoffRelease gives a board away: from this event on the shard
	// refuses the board's intents, and Nodes is the board's state as it
	// left it.
	HandoffRelease = "release"
	// HandoffAdopt takes a board in, with the state and versions the
	// releasing shard's event carried.
	HandoffAdopt = "adopt"
)

// Handoff is the payload of a board event (EventBoard): a shard joining,
// or a board leaving one shard or entering another.
type Handoff struct {
	Kind string `json:"kind"`
	// Board is the board released or adopted ("" for a join).
	Board string `json:"board,omitempty"`
	// Shard is the shard joined, the one the board is released to, or
	// the one it is adopted from.
	Shard string `json:"shard"`
	// Nodes is the board's state as the releasing shard left it: every
	// path at and under the board, deleted ones included, with its
	// version (a JSON array of state nodes, coordinator/state.Node).
	Nodes json.RawMessage `json:"nodes,omitempty"`
	// Seq is, on an adopt, the seq of the release event it continues in
	// the releasing shard's log.
	Seq uint64 `json:"seq,omitempty"`
}

// HandoffRequest is the body of the API's shard.release and shard.adopt
// requests (coagent shards move): the board, and the other shard. An
// adopt carries the release event's payload and seq as the releasing
// shard answered them.
type HandoffRequest struct {
	Board string   `json:"board"`
	Shard string   `json:"shard"`
	From  *Handoff `json:"from,omitempty"`
	Seq   uint64   `json:"seq,omitempty"`
}

// HandoffReply answers a shard.release or shard.adopt: the event's seq in
// the shard's log and its payload. A release repeated for a board already
// released to the same shard answers the first release again, so a move
// cut short is finished by running it again.
type HandoffReply struct {
	Seq     uint64   `json:"seq"`
	Handoff *Handoff `json:"handoff"`
}

// The API endpoints of a shard's board moves (admin only under auth).
const (
	APIShardRelease = "shard.release"
	APIShardAdopt   = "shard.adopt"
	APIShardInfo    = "shard.info" // the shard's name and the boards it gave away or took
)

// ShardInfo answers shard.info: the shard's name and what its log says
// of boards: each board it released or adopted, and to or from whom it
// last went (the boards it owns are those adopted, or, for the default
// shard, all but those released).
type ShardInfo struct {
	Shard  string            `json:"shard"`
	Owners map[string]string `json:"owners,omitempty"`
	Rev    uint64            `json:"rev"`
	// InDoubt is how many parts of other shards' cross-shard applies are
	// prepared here, holding their paths until their coordinator's
	// decision; Unanswered how many cross-shard applies this shard began
	// and has not answered.
	InDoubt    int `json:"in_doubt,omitempty"`
	Unanswered int `json:"unanswered,omitempty"`
}

// HeaderShard names the shard that answered a read (state.get,
// log.query, txn.list), on the answers of a coordinator started with a
// shard's name (serve --shard); an answer without it is the default
// shard's.
const HeaderShard = "Coagent-Shard"

// NotThisShard ends the detail of an out_of_scope refusal of an intent
// whose boards one other shard owns: a client that routes by the shard
// map reads its map again and sends the intent there.
const NotThisShard = ": send it there"

// Misrouted says whether d refuses its intent as another shard's (one
// other shard owns its boards): the client sends the same intent there.
// Such a refusal does not take the intent's id, so the intent is decided
// afresh if it comes back once the board has.
func Misrouted(d *Decision) bool {
	return d.Outcome == OutcomeRejected && d.Reason == ReasonOutOfScope && strings.HasSuffix(d.Detail, NotThisShard)
}

// Boards returns the boards of the paths, each once, in order of first
// appearance.
func Boards(paths ...[]string) []string {
	var out []string
	for _, ps := range paths {
		for _, p := range ps {
			if b := Board(p); b != "" && !slices.Contains(out, b) {
				out = append(out, b)
			}
		}
	}
	return out
}
