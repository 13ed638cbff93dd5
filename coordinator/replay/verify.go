package replay

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/eventlog"
)

// Hash is the hex SHA-256 of a state tree (values, versions, mod_revs, rev).
func Hash(t *state.Tree) string {
	h := t.Hash()
	return hex.EncodeToString(h[:])
}

// MismatchError is what Verify reports: the first path (in path order) where
// the materialized state differs from the fold of the log.
//
// It carries no hash of the materialized state: the store keeps each
// path's entry but neither the rev nor the root, so no such hash exists to
// compare, and Path already says where the two differ.
type MismatchError struct {
	Path        string
	Log, Folded string // each side's entry at Path, described ("nothing" for none)
	// FoldedHash is the hash of the fold (Hash), what Verify returns when
	// the two agree: the state the log says there is.
	FoldedHash string
	// FoldedRev is the fold's rev, and LogLastEvent the last event it
	// folded.
	FoldedRev    uint64
	LogLastEvent uint64
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("materialized state differs from the fold of the log at %s: stored %s, folded %s", e.Path, e.Log, e.Folded)
}

// Verify folds the whole log from its first event (or from the snapshot the
// compaction left) and compares the result with the materialized state,
// path by path. It returns the folded state's hash, or a *MismatchError
// naming the first differing path.
//
// The stored state is compared with the fold to the event it is complete
// to (eventlog.Log.StateSeq): the log's last, unless a crash left it
// behind and no coordinator has opened the log since. The hash is the
// whole log's either way. Nothing may be appended to the log while Verify
// runs: what the state holds would move past the fold it is compared with.
//
// progress, if not nil, is told of each event it folds.
func Verify(log *eventlog.Log, cfg engine.Config, progress eventlog.Progress) (string, error) {
	last, mark := log.LastSeq(), log.StateSeq()
	eng, err := foldTo(log, cfg, mark, last, progress)
	if err != nil {
		return "", fmt.Errorf("verify: %w", err)
	}
	tree := eng.State()
	folded := tree.Paths()
	paths := slices.Sorted(maps.Keys(folded))
	describe := func(e *eventlog.Entry) string {
		if e == nil {
			return "nothing"
		}
		kind := map[eventlog.Kind]string{eventlog.KindAbsent: "absent", eventlog.KindLeaf: "leaf", eventlog.KindObject: "object"}[e.Kind]
		s := fmt.Sprintf("%s version=%d mod_rev=%d", kind, e.Version, e.ModRev)
		if e.Kind == eventlog.KindLeaf {
			s += " value=" + string(e.Value)
		}
		return s
	}
	mismatch := func(path string, stored, want *eventlog.Entry) error {
		return &MismatchError{Path: path, Log: describe(stored), Folded: describe(want), FoldedHash: Hash(tree),
			FoldedRev: tree.Rev(), LogLastEvent: mark}
	}
	i := 0
	err = log.Entries("", func(got eventlog.Entry) error {
		if i < len(paths) && paths[i] < got.Path { // a path the store lacks
			want := Entry(tree, paths[i])
			return mismatch(paths[i], nil, &want)
		}
		if i == len(paths) || paths[i] != got.Path {
			return mismatch(got.Path, &got, nil)
		}
		want := Entry(tree, paths[i])
		i++
		if got.Kind != want.Kind || got.Version != want.Version || got.ModRev != want.ModRev || string(got.Value) != string(want.Value) {
			return mismatch(got.Path, &got, &want)
		}
		return nil
	})
	if err == nil && i < len(paths) {
		want := Entry(tree, paths[i])
		err = mismatch(paths[i], nil, &want)
	}
	if err != nil {
		return "", err
	}
	if mark < last {
		if err := log.Fold(mark+1, last, folding(eng, last, progress)); err != nil {
			return "", fmt.Errorf("verify: %w", err)
		}
	}
	return Hash(tree), nil
}

// foldTo returns an engine folded from the log's first event, or from the
// snapshot compaction left, to event seq. progress is told of each event
// as part of a fold to last.
func foldTo(log *eventlog.Log, cfg engine.Config, seq, last uint64, progress eventlog.Progress) (*engine.Engine, error) {
	if log.FirstSeq() > 1 {
		if seq+1 < log.FirstSeq() { // seq 0 among them
			return nil, fmt.Errorf("the stored state is complete to event %d, which compaction dropped (the log starts at %d): a coordinator opening the log rewrites it", seq, log.FirstSeq())
		}
		eng, _, err := rebuild(log, cfg, seq, progress)
		return eng, err
	}
	eng, err := engine.New(cfg)
	if err == nil && seq > 0 {
		err = log.Fold(1, seq, folding(eng, last, progress))
	}
	return eng, err
}

// Entry is the entry the log's materialized state keeps for path of t:
// what a Core writes for each path a batch touches, and what Verify
// expects to read back. Both use this one definition, so the writer and
// the check cannot drift apart.
func Entry(t *state.Tree, path string) eventlog.Entry {
	st, _ := t.Stat(path)
	e := eventlog.Entry{Path: path, Version: st.Version, ModRev: st.ModRev}
	switch {
	case !st.Exists:
		e.Kind = eventlog.KindAbsent
	case st.Object:
		e.Kind = eventlog.KindObject
	default:
		e.Kind = eventlog.KindLeaf
		e.Value, _ = json.Marshal(st.Value) // values came from JSON
	}
	return e
}
