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
// ErrNotFound. The entries trail the log: Entry has the committer write
// the ones it holds first (a write of its own when any are waiting), so
// it sees every batch appended, unless the state is stale (StateSeq).
func (l *Log) Entry(path string) (Entry, error) {
	l.flushState()
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
// the whole state), in path order, as Entry reads them.
func (l *Log) Entries(root string, fn func(Entry) error) error {
	l.flushState()
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

// flushState has the committer write the state entries it holds. A log
// closed to appends, or whose write fails, has its reads answered with
// what is stored, which their own errors describe if it is damaged.
func (l *Log) flushState() { _ = l.flushIndex() }

// StateSeq returns the event the stored materialized state is complete to,
// after it has the committer write the entries it holds, as Entry does:
// the last event written, unless the state is stale. The committer writes
// the state entries with the index, once a stretch of events
// (Options.IndexEvery), once idle, and at Close. A crash loses those of
// the last stretch, and the log cannot make them again, for only a fold of
// the events knows what they are. The state is then stale: it stays as it
// was, marked complete to StateSeq, before LastSeq, until whoever folds
// the log puts it all back (RewriteState).
func (l *Log) StateSeq() uint64 {
	l.flushState()
	return l.stateSeq.Load()
}

// openState reads the state's mark. A log without one was written with
// every group's entries in the group: its state is complete.
func (l *Log) openState() error {
	seq, found, err := readMeta(l.db, metaState)
	if err != nil {
		return err
	}
	if !found {
		seq = l.LastSeq()
		if err := l.db.Set(metaState, binary.BigEndian.AppendUint64(nil, seq), pebble.Sync); err != nil {
			return err
		}
	}
	l.stateSeq.Store(seq)
	l.stateStale.Store(seq < l.LastSeq())
	return nil
}

// RewriteState writes entries, every path of the materialized state after
// the log's last event, and marks the state complete to that event, in one
// synced batch (a crash during it leaves the state as it was). It is for
// whoever folds the log after Open, when StateSeq is before LastSeq, and
// fails if a batch is being appended: the entries would not be the state
// after the last event.
func (l *Log) RewriteState(entries []Entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.LastSeq()
	switch {
	case l.mu.closed:
		return ErrClosed
	case len(l.mu.queue) > 0 || l.mu.next != last+1:
		return fmt.Errorf("eventlog: rewrite the state: batches up to %d are being appended, and %d is durable", l.mu.next-1, last)
	}
	b := l.db.NewBatch()
	defer b.Close()
	var key, val []byte
	for _, e := range entries {
		key = appendKey(key[:0], famState, e.Path)
		val = appendEntry(val[:0], e)
		if err := b.Set(key, val, nil); err != nil {
			return fmt.Errorf("eventlog: rewrite the state: %w", err)
		}
	}
	err := b.Set(metaState, binary.BigEndian.AppendUint64(nil, last), nil)
	if err == nil {
		err = l.commit(b, pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("eventlog: rewrite the state: %w", l.w.storeErr(err, 0))
	}
	l.stateSeq.Store(last)
	l.stateStale.Store(false)
	return nil
}
