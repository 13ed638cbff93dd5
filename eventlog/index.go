package eventlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
)

// How the index trails the log, and why, is told with the key space in
// keys.go.

// postings gathers the posting lists of the events after the index, from
// group to group until the committer writes them (writeIndex). It keeps
// its map and lists when reset, so they are allocated once.
type postings struct {
	at    map[indexTerm]int // the term's place in terms and seqs
	terms []indexTerm
	seqs  [][]uint64 // ascending; only the first len(terms) are in use
	last  uint64     // the last event whose terms are in
}

func newPostings() *postings { return &postings{at: map[indexTerm]int{}} }

// reset empties ps, keeping its memory but no reference to a term.
func (ps *postings) reset() {
	clear(ps.at)
	clear(ps.terms)
	ps.terms = ps.terms[:0]
}

// A posting is one event of an index term.
type posting struct {
	indexTerm
	seq uint64
}

// addSeq records an event of t; seq is not before any added.
func (ps *postings) addSeq(t indexTerm, seq uint64) {
	i, ok := ps.at[t]
	if !ok {
		i = len(ps.terms)
		ps.at[t] = i
		ps.terms = append(ps.terms, t)
		if i == len(ps.seqs) {
			ps.seqs = append(ps.seqs, nil)
		}
		ps.seqs[i] = ps.seqs[i][:0]
	}
	if seqs := ps.seqs[i]; len(seqs) == 0 || seqs[len(seqs)-1] != seq {
		ps.seqs[i] = append(seqs, seq)
	}
}

// indexIdle is how long the committer waits, idle, before it indexes the
// terms it has gathered.
const indexIdle = 50 * time.Millisecond

// trailing reports whether the committer holds index terms or state
// entries it has not written.
func (l *Log) trailing() bool { return len(l.index.terms) > 0 || len(l.state) > 0 }

// writeIndex writes the posting lists of the terms gathered and the seq
// the index is now complete to, and the state entries gathered and the
// seq the state is complete to: into b, the batch of the group that
// brings them there, or, with b nil, a batch of their own committed with
// wo (a lost index batch is made again by Open, a lost state by whoever
// folds the log: RewriteState). The committer writes them after the
// groups of their events, so that no index key or state entry comes from
// an event a crash could lose.
func (l *Log) writeIndex(b *pebble.Batch, wo *pebble.WriteOptions) error {
	if !l.trailing() {
		return nil
	}
	own := b == nil
	if own {
		b = l.db.NewBatch()
		defer b.Close()
	}
	stale := l.stateStale.Load()
	key, gaps := l.key[:0], l.gaps[:0]
	for i, t := range l.index.terms {
		seqs := l.index.seqs[i]
		key = indexKey(key[:0], t.kind, t.term, seqs[0])
		gaps = appendGaps(gaps[:0], seqs)
		if err := b.Set(key, gaps, nil); err != nil {
			return fmt.Errorf("eventlog: index: %w", err)
		}
	}
	last := l.index.last
	mark := binary.BigEndian.AppendUint64(nil, last)
	if err := errors.Join(b.Set(metaIndexed, mark, nil), b.Set(metaIntents, mark, nil)); err != nil {
		return fmt.Errorf("eventlog: index: %w", err)
	}
	// A state that trails by more than the stretch gathered (a crash lost
	// the stretch before it) stays marked where it was, entries and all,
	// until RewriteState puts the whole of it back.
	if !stale {
		for _, e := range l.state {
			key = appendKey(key[:0], famState, e.Path)
			gaps = appendEntry(gaps[:0], e)
			if err := b.Set(key, gaps, nil); err != nil {
				return fmt.Errorf("eventlog: state: %w", err)
			}
		}
		if err := b.Set(metaState, mark, nil); err != nil {
			return fmt.Errorf("eventlog: state: %w", err)
		}
	}
	l.key, l.gaps = key, gaps
	if own {
		if err := l.commit(b, wo); err != nil {
			return fmt.Errorf("eventlog: index: %w", err)
		}
	}
	l.index.reset()
	l.indexed = last
	if !stale {
		l.stateSeq.Store(last)
	}
	clear(l.state)
	return nil
}

// flushIndex waits until the index and the state are complete to the last
// batch written.
func (l *Log) flushIndex() error {
	done := make(chan error, 1)
	if err := l.afterIndex(func(err error) { done <- err }); err != nil {
		return err
	}
	return <-done
}

// afterIndex has the committer write the index and the state to the last
// batch written and then call fn, on its own goroutine, with the error of
// that write, before it writes anything else.
func (l *Log) afterIndex(fn func(error)) error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.mu.indexWanted = append(l.mu.indexWanted, fn)
	l.mu.Unlock()
	l.kick()
	return nil
}

// catchUpIndex indexes the events a crash left after the index, before the
// committer starts. A log without the mark of where its index ends was
// written with every group indexed, so its index is complete.
func (l *Log) catchUpIndex() error {
	indexed, found, err := readMeta(l.db, metaIndexed)
	switch {
	case err != nil:
		return err
	case !found:
		l.indexed = l.LastSeq()
		if err := l.db.Set(metaIndexed, binary.BigEndian.AppendUint64(nil, l.indexed), pebble.Sync); err != nil {
			return err
		}
		return l.indexIntents()
	}
	l.indexed = indexed
	if err := l.indexIntents(); err != nil {
		return err
	}
	if l.indexed >= l.LastSeq() {
		return nil
	}
	from := max(l.indexed+1, l.FirstSeq())
	err = l.Scan(from, l.LastSeq(), func(ev *intents.Event) error {
		indexTerms(ev, func(t indexTerm) { l.index.addSeq(t, ev.Seq) })
		l.index.last = ev.Seq
		return nil
	})
	if err != nil {
		return fmt.Errorf("index events from %d: %w", from, err)
	}
	b := l.db.NewBatch()
	defer b.Close()
	if err := l.writeIndex(b, nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

// intentBatch is how many events Open indexes by intent in one batch when
// the intent index lacks them (see the key space in keys.go): one batch
// for all of a large log would hold a posting list of every intent in
// memory.
const intentBatch = 1 << 16

// indexIntents indexes by intent the events from the intent index's mark
// to l.indexed, which the other indexes hold and it lacks: a log written
// before it, or appended to by a build from before it.
func (l *Log) indexIntents() error {
	done, _, err := readMeta(l.db, metaIntents)
	if err != nil {
		return err
	}
	from := max(done+1, l.FirstSeq())
	if from > l.indexed {
		return nil
	}
	ps := newPostings()
	var key, gaps []byte
	flush := func(last uint64) error {
		b := l.db.NewBatch()
		defer b.Close()
		for i, t := range ps.terms {
			key = indexKey(key[:0], t.kind, t.term, ps.seqs[i][0])
			gaps = appendGaps(gaps[:0], ps.seqs[i])
			if err := b.Set(key, gaps, nil); err != nil {
				return err
			}
		}
		if err := b.Set(metaIntents, binary.BigEndian.AppendUint64(nil, last), nil); err != nil {
			return err
		}
		ps.reset()
		return l.commit(b, pebble.Sync)
	}
	n := 0
	// Fold keeps the event's strings, the intent among them, valid after
	// the call.
	err = l.Fold(from, l.indexed, func(ev *intents.Event) error {
		if ev.Intent != "" {
			ps.addSeq(indexTerm{idxIntent, ev.Intent}, ev.Seq)
		}
		if n++; n == l.intentBatch && ev.Seq < l.indexed {
			n = 0
			return flush(ev.Seq)
		}
		return nil
	})
	if err == nil {
		err = flush(l.indexed)
	}
	if err != nil {
		return fmt.Errorf("index by intent the events from %d: %w", from, err)
	}
	return nil
}
