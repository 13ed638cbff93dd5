package eventlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
)

// Compact drops the events before seq before, as etcd compacts revisions:
// afterwards Scan, Event and replays that need them fail with ErrCompacted.
// A snapshot of the state after event before-1 must have been saved first
// (SaveSnapshot), since it is where every later replay starts; older
// snapshots go with the events. If archive is not nil the dropped events
// are written to it first, one JSON object per line, and synced if it can
// be (an *os.File) before anything is dropped. Idempotency records and the
// materialized state are kept.
func (l *Log) Compact(before uint64, archive io.Writer) error {
	return l.CompactProgress(before, archive, nil)
}

// Progress is told how far long work on the log has come: seq is the
// event just done and last the one the work ends at, so that the work is
// done when seq is last (a query that reaches its limit ends sooner). It
// is called once an event, from the goroutine doing the work, and must be
// cheap; a nil Progress is not called, and the work costs what it does
// without one.
type Progress func(seq, last uint64)

// CompactProgress is Compact telling progress of each event it reads
// before dropping it (to archive it and find its index terms).
func (l *Log) CompactProgress(before uint64, archive io.Writer, progress Progress) error {
	first := l.FirstSeq()
	switch {
	case before <= first:
		return nil // nothing before it is kept
	case before > l.LastSeq()+1:
		return fmt.Errorf("compact before %d: the log ends at %d", before, l.LastSeq())
	}
	if _, err := l.snapshotAt(before - 1); err != nil {
		return fmt.Errorf("compact before %d: %w", before, err)
	}
	// The index must hold every event dropped, to drop them from it too.
	if err := l.flushIndex(); err != nil {
		return fmt.Errorf("compact before %d: %w", before, err)
	}
	b := l.db.NewBatch()
	defer b.Close()
	terms := map[indexTerm]bool{}
	var enc *json.Encoder
	if archive != nil {
		enc = json.NewEncoder(archive)
	}
	err := l.Scan(first, before-1, func(ev *intents.Event) error {
		if enc != nil {
			if err := enc.Encode(ev); err != nil {
				return fmt.Errorf("archive event %d: %w", ev.Seq, err)
			}
		}
		indexTerms(ev, func(t indexTerm) { terms[t] = true })
		if progress != nil {
			progress(ev.Seq, before-1)
		}
		return nil
	})
	if err == nil {
		err = l.compactIndex(b, terms, before)
	}
	if err != nil {
		return fmt.Errorf("compact before %d: %w", before, err)
	}
	// The archive must be safe before anything is dropped.
	if s, ok := archive.(interface{ Sync() error }); ok {
		if err := s.Sync(); err != nil {
			return fmt.Errorf("compact before %d: archive: %w", before, err)
		}
	}
	err = errors.Join(
		b.DeleteRange(eventKey(0), eventKey(before), nil),
		b.DeleteRange(snapshotKey(0), snapshotKey(before-1), nil),
		b.Set(metaFirst, eventKey(before)[1:], nil),
	)
	if err == nil {
		err = l.commit(b, pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("compact before %d: %w", before, err)
	}
	l.first.Store(before)
	return nil
}

// compactIndex drops from the posting lists of terms the events before
// seq before, in b: a list that ends before it goes; one that straddles it
// (its group had events on both sides) is written again from its first
// event kept.
func (l *Log) compactIndex(b *pebble.Batch, terms map[indexTerm]bool, before uint64) error {
	var seqs []uint64
	var gaps []byte
	for t := range terms {
		prefix := indexPrefix(t.kind, t.term)
		it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: indexKey(nil, t.kind, t.term, before)})
		if err != nil {
			return l.w.storeErr(err, 0)
		}
		for valid := it.First(); valid && err == nil; valid = it.Next() {
			if seqs, err = readPostings(seqs[:0], it.Key(), it.Value()); err != nil {
				break
			}
			err = b.Delete(it.Key(), nil)
			if i, _ := slices.BinarySearch(seqs, before); err == nil && i < len(seqs) {
				kept := seqs[i:]
				err = b.Set(indexKey(nil, t.kind, t.term, kept[0]), appendGaps(gaps[:0], kept), nil)
			}
		}
		err = errors.Join(err, l.w.storeErr(it.Error(), 0), it.Close())
		if err != nil {
			return fmt.Errorf("index of %q: %w", t.term, err)
		}
	}
	return nil
}

// snapshotAt checks that a snapshot was taken exactly at seq.
func (l *Log) snapshotAt(seq uint64) ([]byte, error) {
	at, data, err := l.Snapshot(seq)
	if err != nil || at != seq {
		return nil, fmt.Errorf("no snapshot at %d to start replays from: %w", seq, ErrNotFound)
	}
	return data, nil
}
