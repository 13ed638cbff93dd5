package eventlog

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// SaveSnapshot stores an opaque snapshot of the state after event seq,
// synced.
func (l *Log) SaveSnapshot(seq uint64, data []byte) error {
	b := l.db.NewBatch()
	defer b.Close()
	err := b.Set(snapshotKey(seq), data, nil)
	if err == nil {
		err = l.commit(b, pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("save snapshot at %d: %w", seq, err)
	}
	return nil
}

// Snapshot returns the latest snapshot taken at or before seq (0: the
// latest of all), and the seq it was taken at. ErrNotFound if there is
// none.
func (l *Log) Snapshot(atOrBefore uint64) (uint64, []byte, error) {
	upper := []byte{famSnapshot + 1}
	if atOrBefore != 0 {
		upper = snapshotKey(atOrBefore + 1)
	}
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famSnapshot}, UpperBound: upper})
	if err != nil {
		return 0, nil, l.w.storeErr(err, 0)
	}
	defer it.Close()
	if !it.Last() {
		if err := it.Error(); err != nil {
			return 0, nil, fmt.Errorf("snapshot at or before %d: %w", atOrBefore, l.w.storeErr(err, 0))
		}
		return 0, nil, fmt.Errorf("snapshot at or before %d: %w", atOrBefore, ErrNotFound)
	}
	return seqOf(it.Key()), bytes.Clone(it.Value()), nil
}
