package eventlog

import (
	"errors"
	"fmt"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
)

// Event returns the event at seq.
func (l *Log) Event(seq uint64) (*intents.Event, error) {
	if seq < l.FirstSeq() {
		return nil, fmt.Errorf("event %d: %w (the log starts at %d)", seq, ErrCompacted, l.FirstSeq())
	}
	v, closer, err := l.db.Get(eventKey(seq))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("event %d: %w", seq, ErrNotFound)
	}
	if err != nil {
		return nil, l.w.storeErr(err, seq)
	}
	defer closer.Close()
	return decodeAt(seq, v, nil)
}

func decodeAt(seq uint64, v []byte, shell *receivedEvent) (*intents.Event, error) {
	ev, err := decodeEvent(v, shell)
	if err != nil {
		return nil, &CorruptError{Seq: seq, Err: err}
	}
	if ev.Seq != seq {
		return nil, &CorruptError{Seq: seq, Err: fmt.Errorf("%w: the record says it is event %d", ErrCorrupt, ev.Seq)}
	}
	return ev, nil
}

// Scan calls fn with every event from seq from through until (0: the
// last), in order. It fails with ErrCompacted if from precedes FirstSeq, and
// with a *CorruptError naming the first record it cannot read, after fn has
// had every event before it.
//
// Reading and decoding run in goroutines of their own, a few chunks of
// events ahead of fn, which is called from the caller's goroutine.
func (l *Log) Scan(from, until uint64, fn func(*intents.Event) error) error {
	return l.scan(from, until, false, fn)
}

// Fold is Scan for folding the log into state, as replay and Open do, with
// two differences that make it faster and allocate less than half as much:
//
//   - The intent of an intent event (its Received payload) keeps only its
//     ID, Agent, Kind and Txn; the rest is checked but not decoded. What an
//     intent asked for is folded from the events that decided it (its
//     change, grant, wait), never from the intent event; the engine's
//     fold is held to it by coordinator/replay's TestFoldReadsOnlyTheEnvelope.
//   - The event and an intent event's Received payload and intent are
//     reused once fn returns: fn must not keep them (it may keep the other
//     payloads, and any string or slice).
func (l *Log) Fold(from, until uint64, fn func(*intents.Event) error) error {
	return l.scan(from, until, true, fn)
}

// ScanRaw is Scan without decoding: fn gets each record's bytes, valid only
// during the call. It is the floor replay is measured against.
func (l *Log) ScanRaw(from uint64, fn func(seq uint64, rec []byte) error) error {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: eventKey(max(from, 1)), UpperBound: []byte{famEvent + 1}})
	if err != nil {
		return l.w.storeErr(err, 0)
	}
	defer it.Close()
	last := max(from, 1) - 1
	for valid := it.First(); valid; valid = it.Next() {
		last = seqOf(it.Key())
		if err := fn(last, it.Value()); err != nil {
			return err
		}
	}
	return l.w.storeErr(it.Error(), last+1)
}

// Decision returns the recorded decision of an intent id (ErrNotFound if
// none): the idempotency record, kept even when the events are compacted.
func (l *Log) Decision(id string) (*intents.Decision, error) {
	v, closer, err := l.db.Get(decisionKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("decision of %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("decision of %s: %w", id, l.w.storeErr(err, 0))
	}
	defer closer.Close()
	d, err := DecodeDecision(v)
	if err != nil {
		return nil, fmt.Errorf("decision of %s: %w", id, err)
	}
	return d, nil
}

// LastRecorded returns the greatest intent id the log holds a decision
// record of ("" when none): since canonical ULIDs sort by their time, no
// record is of a younger id.
func (l *Log) LastRecorded() (string, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famDecision}, UpperBound: []byte{famDecision + 1}})
	if err != nil {
		return "", fmt.Errorf("last decision record: %w", l.w.storeErr(err, 0))
	}
	defer it.Close()
	if !it.Last() {
		if err := it.Error(); err != nil {
			return "", fmt.Errorf("last decision record: %w", l.w.storeErr(err, 0))
		}
		return "", nil
	}
	return string(it.Key()[1:]), nil
}
