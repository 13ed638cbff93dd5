package eventlog

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
)

// Kind is what a path holds in the materialized state.
type Kind uint8

// The kinds of a materialized path. An object's members are the paths under
// it; only leaves carry a value.
const (
	KindAbsent Kind = iota // deleted: the version keeps counting
	KindLeaf               // a JSON scalar or array
	KindObject             // a JSON object
)

// Entry is the materialized state of one path: what a state.get answers
// from without the engine, and what Verify compares with a fold of the log.
type Entry struct {
	Path    string
	Kind    Kind
	Value   json.RawMessage // leaves only
	Version uint64
	ModRev  uint64
}

func appendEntry(dst []byte, e Entry) []byte {
	dst = append(dst, byte(e.Kind))
	dst = binary.AppendUvarint(dst, e.Version)
	dst = binary.AppendUvarint(dst, e.ModRev)
	return append(dst, e.Value...)
}

func decodeEntry(path string, v []byte) (Entry, error) {
	e := Entry{Path: path}
	if len(v) < 1 || v[0] > byte(KindObject) {
		return e, fmt.Errorf("state entry %s: %w: bad kind", path, ErrCorrupt)
	}
	e.Kind = Kind(v[0])
	v = v[1:]
	var n int
	if e.Version, n = binary.Uvarint(v); n <= 0 {
		return e, fmt.Errorf("state entry %s: %w: bad version", path, ErrCorrupt)
	}
	v = v[n:]
	if e.ModRev, n = binary.Uvarint(v); n <= 0 {
		return e, fmt.Errorf("state entry %s: %w: bad mod_rev", path, ErrCorrupt)
	}
	if v = v[n:]; len(v) > 0 {
		e.Value = append(json.RawMessage(nil), v...)
	}
	return e, nil
}

// Entry returns the materialized entry of path; a path never written is
// ErrNotFound.
func (l *Log) Entry(path string) (Entry, error) {
	v, closer, err := l.db.Get(stateKey(path))
	if errors.Is(err, pebble.ErrNotFound) {
		return Entry{Path: path}, fmt.Errorf("state of %s: %w", path, ErrNotFound)
	}
	if err != nil {
		return Entry{Path: path}, fmt.Errorf("state of %s: %w", path, l.w.storeErr(err, 0))
	}
	defer closer.Close()
	return decodeEntry(path, v)
}

// Entries calls fn with the entry of root and of every path under it ("" for
// the whole state), in path order.
func (l *Log) Entries(root string, fn func(Entry) error) error {
	lower, upper := []byte{famState}, []byte{famState + 1}
	if root != "" {
		lower = stateKey(root)
		upper = stateKey(root + "/") // '/' sorts right after '.', so this bounds root and root.*
	}
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return l.w.storeErr(err, 0)
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		path := string(it.Key()[1:])
		if root != "" && !intents.Within(path, root) {
			continue // a sibling such as root-x or rootx
		}
		e, err := decodeEntry(path, it.Value())
		if err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return l.w.storeErr(it.Error(), 0)
}
