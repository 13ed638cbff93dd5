package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/intents"
)

// A shard's boards (docs/sharding.md): the log says which boards its
// engine decides. A log that never joined a shard is the default shard's,
// which owns every board it did not release; any other shard owns only
// the boards it adopted. An intent that names a board the shard does not
// own is refused out_of_scope before anything is decided, and so is one
// whose boards the shard knows to be owned by two shards: the detail
// names each board's owner as far as this log knows it.

// ErrHandoff is returned (wrapped) for a board move the engine refuses:
// nothing is recorded.
var ErrHandoff = errors.New("engine: board handoff refused")

// Shard is the name of the shard this engine's log is of.
func (e *Engine) Shard() string {
	if e.shard == "" {
		return intents.DefaultShard
	}
	return e.shard
}

// Owners returns, for each board that this shard released or adopted,
// the shard that owns it as far as this log knows.
func (e *Engine) Owners() map[string]string { return maps.Clone(e.owners) }

// KnowsTxn says whether txn is this shard's: a transaction in flight, a
// task claim under a lease, or one that ended recently. A commit, abort
// or renew of one it does not know may be another shard's.
func (e *Engine) KnowsTxn(txn string) bool {
	if e.txns[txn] != nil || e.claimIDs[txn] != "" {
		return true
	}
	_, ended := e.ended.get(txn)
	return ended
}

// owner is the shard that owns board as far as this log knows.
func (e *Engine) owner(board string) string {
	if o, ok := e.owners[board]; ok {
		return o
	}
	return intents.DefaultShard
}

// Join records that this log is of shard. Only an empty log joins, and a
// log joins once; joining the shard it is of already records nothing.
func (e *Engine) Join(now time.Time, shard string, out []*intents.Event) (Ready, error) {
	if err := intents.CheckShard(shard); err != nil && shard != intents.DefaultShard {
		return Ready{Events: out}, fmt.Errorf("%w: %v", ErrHandoff, err)
	}
	switch {
	case shard == e.Shard():
		return Ready{Events: out}, nil
	case e.seq > 0:
		return Ready{Events: out}, fmt.Errorf("%w: the log is shard %s's, not %s's (%d events)", ErrHandoff, e.Shard(), shard, e.seq)
	}
	e.begin(now, out)
	e.emit(intents.Event{Type: intents.EventBoard, Handoff: &intents.Handoff{Kind: intents.HandoffJoin, Shard: shard}})
	return e.end(), nil
}

// Release gives board to shard to: from its event on, this shard refuses
// the board's intents, and the event carries the board's state. A board
// released to to already is answered with the seq of the event that did
// it, and no handoff: the event is the log's to read. Refused: a board this shard does not own, and one a
// transaction in flight, a parked intent, a claim under a lease or an
// invariant over another board still holds here.
func (e *Engine) Release(now time.Time, board, to string, out []*intents.Event) (Ready, uint64, *intents.Handoff, error) {
	fail := func(format string, args ...any) (Ready, uint64, *intents.Handoff, error) {
		return Ready{Events: out}, 0, nil, fmt.Errorf("%w: %s", ErrHandoff, fmt.Sprintf(format, args...))
	}
	if err := intents.CheckShard(to); err != nil && to != intents.DefaultShard {
		return fail("%v", err)
	}
	if !intents.ValidSegment(board) {
		return fail("board %q: not a path segment", board)
	}
	if seq, ok := e.released[board]; ok && e.owner(board) == to {
		return Ready{Events: out}, seq, nil, nil
	}
	switch {
	case !e.owns(board):
		return fail("board %s belongs to shard %s, not to %s", board, e.owner(board), e.Shard())
	case to == e.Shard():
		return fail("board %s is shard %s's already", board, to)
	}
	// Timers due by now fire first: a claim's lease that ends now changes
	// the board (its reclaim), and must be in the state the board takes.
	e.begin(now, out)
	e.advance()
	refuse := func(format string, args ...any) (Ready, uint64, *intents.Handoff, error) {
		return e.end(), 0, nil, fmt.Errorf("%w: %s", ErrHandoff, fmt.Sprintf(format, args...))
	}
	if what := e.holding(board); what != "" {
		return refuse("board %s: %s; release it once that ends", board, what)
	}
	nodes, err := json.Marshal(e.tree.ExportBoard(board))
	if err != nil {
		return refuse("board %s: %v", board, err)
	}
	h := &intents.Handoff{Kind: intents.HandoffRelease, Board: board, Shard: to, Nodes: nodes}
	e.emit(intents.Event{Type: intents.EventBoard, Handoff: h})
	r := e.end()
	return r, e.seq, h, nil
}

// Adopt takes board from shard from, with the state its release event
// (seq, in from's log) carried. Refused: a board this shard owns already,
// and nodes that are not the board's.
func (e *Engine) Adopt(now time.Time, board, from string, seq uint64, nodes json.RawMessage, out []*intents.Event) (Ready, error) {
	fail := func(format string, args ...any) (Ready, error) {
		return Ready{Events: out}, fmt.Errorf("%w: %s", ErrHandoff, fmt.Sprintf(format, args...))
	}
	if !intents.ValidSegment(board) {
		return fail("board %q: not a path segment", board)
	}
	if e.owns(board) {
		return fail("board %s is shard %s's already", board, e.Shard())
	}
	if from == e.Shard() {
		return fail("board %s cannot come from shard %s itself", board, from)
	}
	// Checked as the fold will graft them, on a tree of their own: a
	// board event the engine emits must fold.
	if ns, err := decodeNodes(board, nodes); err != nil {
		return fail("%v", err)
	} else if err := state.New().Graft(1, state.Stamp{}, board, ns); err != nil {
		return fail("%v", err)
	}
	e.begin(now, out)
	e.advance()
	e.emit(intents.Event{Type: intents.EventBoard, Handoff: &intents.Handoff{Kind: intents.HandoffAdopt, Board: board,
		Shard: from, Seq: seq, Nodes: nodes}})
	return e.end(), nil
}

// decodeNodes reads the nodes a release carried; Tree.Graft checks them.
func decodeNodes(board string, raw json.RawMessage) ([]state.Node, error) {
	var nodes []state.Node
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &nodes); err != nil {
			return nil, fmt.Errorf("board %s: nodes: %v", board, err)
		}
	}
	return nodes, nil
}

// owns says whether this shard decides board's intents.
func (e *Engine) owns(board string) bool { return e.owner(board) == e.Shard() }

// outOfScope says why in may not be decided by this shard, naming each
// board it touches that another shard owns, or "" when it may. boards
// are its boards, of every path it reads, writes, or its conditions name.
func (e *Engine) outOfScope(paths ...[]string) string {
	if e.owners == nil && e.shard == "" {
		return "" // the default shard that never gave a board away
	}
	// Every intent of a shard passes here: the detail is made only for
	// one that is refused.
	mine := true
	for _, ps := range paths {
		for _, p := range ps {
			mine = mine && e.owns(intents.Board(p))
		}
	}
	if mine {
		return ""
	}
	boards := intents.Boards(paths...)
	var parts []string
	foreign, shards := false, map[string]bool{}
	for _, b := range boards {
		o := e.owner(b)
		shards[o] = true
		foreign = foreign || o != e.Shard()
		parts = append(parts, fmt.Sprintf("%s (shard %s)", b, o))
	}
	switch {
	case !foreign:
		return ""
	case len(shards) > 1 && !shards[e.Shard()]:
		return fmt.Sprintf("the intent touches %s, none of them this shard's (%s)%s", strings.Join(parts, " and "), e.Shard(), intents.NotThisShard)
	case len(shards) > 1:
		return fmt.Sprintf("the intent touches %s; an intent may touch one shard's boards: split it, or move the boards to one shard",
			strings.Join(parts, " and "))
	}
	return fmt.Sprintf("the intent touches %s, not this shard's (%s)%s", strings.Join(parts, " and "), e.Shard(), intents.NotThisShard)
}

// holding says what keeps board here, or "".
func (e *Engine) holding(board string) string {
	on := func(paths ...string) bool {
		for _, p := range paths {
			if intents.Board(p) == board {
				return true
			}
		}
		return false
	}
	for _, id := range slices.Sorted(maps.Keys(e.txns)) {
		t := e.txns[id]
		for _, w := range t.propose.Writes {
			if on(w.Path) {
				return fmt.Sprintf("transaction %s of %s holds %s", id, t.Agent, w.Path)
			}
		}
		for _, r := range t.reads {
			if on(r.Path) {
				return fmt.Sprintf("transaction %s of %s read %s", id, t.Agent, r.Path)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(e.xparts)) {
		p := e.xparts[id]
		for _, path := range slices.Concat(writePaths(p.in.Writes), p.Reads) {
			if on(path) {
				return fmt.Sprintf("the prepared part of cross-shard intent %s holds %s", id, path)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(e.parked)) {
		for _, w := range e.parked[id].in.Writes {
			if on(w.Path) {
				return fmt.Sprintf("intent %s waits to write %s", id, w.Path)
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(e.claims)) {
		if on(p) {
			return fmt.Sprintf("task %s is claimed by %s under a lease", p, e.claims[p].owner)
		}
	}
	if e.rules != nil {
		for _, inv := range e.rules.AllInvariants() {
			bs := intents.Boards(inv.Cond.Paths)
			if slices.Contains(bs, board) && len(bs) > 1 {
				return fmt.Sprintf("invariant %s reads boards %s together", inv.Name, strings.Join(bs, ", "))
			}
		}
	}
	return ""
}

// foldHandoff folds a board event.
func (e *Engine) foldHandoff(ev *intents.Event) error {
	h := ev.Handoff
	stamp := state.Stamp{Time: ev.Time, Agent: ev.Agent}
	switch h.Kind {
	case intents.HandoffJoin:
		e.shard = h.Shard
		if h.Shard == intents.DefaultShard {
			e.shard = ""
		}
	case intents.HandoffRelease:
		if err := e.tree.Cut(ev.Seq, stamp, h.Board); err != nil {
			return err
		}
		e.setOwner(h.Board, h.Shard)
		if e.released == nil {
			e.released = map[string]uint64{}
		}
		e.released[h.Board] = ev.Seq
	case intents.HandoffAdopt:
		nodes, err := decodeNodes(h.Board, h.Nodes)
		if err != nil {
			return err
		}
		if err := e.tree.Graft(ev.Seq, stamp, h.Board, nodes); err != nil {
			return err
		}
		e.setOwner(h.Board, e.Shard())
		delete(e.released, h.Board)
	default:
		return fmt.Errorf("board event of kind %q", h.Kind)
	}
	return nil
}

func (e *Engine) setOwner(board, shard string) {
	if e.owners == nil {
		e.owners = map[string]string{}
	}
	e.owners[board] = shard
}

// checkHandoff checks a board event before it is folded.
func (e *Engine) checkHandoff(h *intents.Handoff) error {
	switch {
	case h == nil:
		return fmt.Errorf("board event without handoff")
	case h.Kind == intents.HandoffJoin:
		if e.seq > 0 {
			return fmt.Errorf("join of shard %s after %d events", h.Shard, e.seq)
		}
	case h.Kind == intents.HandoffRelease:
		if !e.owns(h.Board) {
			return fmt.Errorf("release of board %q, which shard %s does not own", h.Board, e.Shard())
		}
	case h.Kind == intents.HandoffAdopt:
		if e.owns(h.Board) {
			return fmt.Errorf("adoption of board %q, which shard %s owns already", h.Board, e.Shard())
		}
	default:
		return fmt.Errorf("board event of kind %q", h.Kind)
	}
	return nil
}
