package eventlog

import (
	"context"
	"fmt"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
)

// Batch is what one append makes durable at once: a run of events that
// continues the log, and the materialized state they leave.
type Batch struct {
	Events []*intents.Event
	// State holds the new entry of every path the batch's changes touched,
	// latest last. The engine's state tree says which (Tree.Touched). The
	// log keeps the slice and the entries' values until it has written
	// them, which may be many batches later (see the key space in keys.go).
	State []Entry
	// Records are the decisions of the batch that become their intent
	// ids' idempotency records, in order, a later one of an id replacing
	// an earlier: Decision answers with them. The engine says which (an
	// id belongs to the first agent decided under it); the log writes what
	// it is given.
	Records []*intents.Decision
}

// Pending is an enqueued batch; Wait returns once it is durable.
type Pending struct {
	b     *pebble.Batch // the events
	rest  *pebble.Batch // the idempotency records
	terms *termList     // index terms, written by the committer for the whole group
	state []Entry       // Batch.State, gathered by the committer and written with the index
	last  uint64
	done  chan struct{}
	err   error
	// ready, if set, yields once: nil when the batch may be written, or
	// why it must not be (see EnqueueAfter).
	ready <-chan error
}

// Wait blocks until the batch is durable or ctx ends. A context error does
// not withdraw the batch: it may still be committed.
func (p *Pending) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Last returns the sequence number of the batch's last event.
func (p *Pending) Last() uint64 { return p.last }

// Append makes b durable: Enqueue and Wait.
func (l *Log) Append(ctx context.Context, b *Batch) error {
	p, err := l.Enqueue(b)
	if err != nil {
		return err
	}
	return p.Wait(ctx)
}

// Enqueue queues b for the next group commit and returns at once. Batches
// are committed in the order they are enqueued, and each must continue the
// sequence where the previous one stopped (ErrSequence otherwise), so a
// crash can lose only a suffix of the enqueued batches, never a middle one,
// and never part of a batch. Encoding happens in the caller's goroutine.
func (l *Log) Enqueue(b *Batch) (*Pending, error) { return l.EnqueueAfter(b, nil) }

// EnqueueAfter is Enqueue of a batch that must be stored elsewhere first
// (the replicated log of a cluster): the committer writes it only once
// ready yields nil, so this log is never ahead of the other store. If
// ready yields an error instead, the batch and every one enqueued after
// it fail unwritten with that error, and the log closes to appends, as
// after a failed write: what follows a batch that is not stored cannot
// continue the log. ready must yield exactly one value; nil ready is
// Enqueue.
func (l *Log) EnqueueAfter(b *Batch, ready <-chan error) (*Pending, error) {
	if len(b.Events) == 0 {
		return nil, fmt.Errorf("eventlog: empty batch")
	}
	for i := 1; i < len(b.Events); i++ {
		if b.Events[i].Seq != b.Events[i-1].Seq+1 {
			return nil, fmt.Errorf("%w: event %d follows %d inside the batch", ErrSequence, b.Events[i].Seq, b.Events[i-1].Seq)
		}
	}
	p := &Pending{last: b.Events[len(b.Events)-1].Seq, done: make(chan struct{}), ready: ready}
	if err := l.encode(b, p); err != nil {
		return nil, err
	}
	l.mu.Lock()
	switch {
	case l.mu.closed:
		failed := l.mu.failed
		l.mu.Unlock()
		p.b.Close()
		p.rest.Close()
		if failed != nil {
			return nil, fmt.Errorf("%w: %w", ErrClosed, failed)
		}
		return nil, ErrClosed
	case b.Events[0].Seq != l.mu.next:
		next := l.mu.next
		l.mu.Unlock()
		p.b.Close()
		p.rest.Close()
		return nil, fmt.Errorf("%w: batch starts at %d, the log continues at %d", ErrSequence, b.Events[0].Seq, next)
	}
	l.mu.next = p.last + 1
	l.mu.queue = append(l.mu.queue, p)
	l.mu.Unlock()
	l.kick()
	return p, nil
}

func (l *Log) kick() {
	select {
	case l.mu.wake <- struct{}{}:
	default:
	}
}

// commitLoop is the committer: it takes everything queued and writes it as
// one batch, until Close. With synced writes it does not wait for the sync
// before it writes the next group: Pebble writes the groups to its WAL in
// the order they come and syncs whatever has reached it, so the memtable
// work of one group overlaps the fsync of the one before. syncLoop waits for
// each group's sync, in order, and wakes its waiters. The committer also
// writes the index (writeIndex): in the group that brings the terms it has
// gathered to IndexEvery events, on its own once idle for indexIdle, when
// asked (flushIndex), and at Close.
func (l *Log) commitLoop() {
	defer close(l.done)
	groups := make(chan *group, 16)
	synced := make(chan struct{})
	go l.syncLoop(groups, synced)
	defer func() {
		close(groups)
		<-synced
	}()
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	armed := false
	// After a group failed the terms gathered may name events that are not
	// in the log: the index is left where it is, for Open to complete.
	var failed error
	writeIndex := func(wo *pebble.WriteOptions) error {
		if failed != nil || !l.trailing() {
			return failed
		}
		if err := l.writeIndex(nil, wo); err != nil {
			failed = err
			l.fail()
		} else if l.indexWritten != nil {
			l.indexWritten(l.indexed)
		}
		return failed
	}
	for {
		l.mu.Lock()
		queue, closed, wanted := l.mu.queue, l.mu.closed, l.mu.indexWanted
		l.mu.queue, l.mu.indexWanted = nil, nil
		if failed == nil && l.mu.failed != nil {
			// The store is corrupt or the disk full: what is queued fails
			// unwritten, as after a failed group.
			failed = fmt.Errorf("%w: %w", ErrClosed, l.mu.failed)
		}
		l.mu.Unlock()
		if len(queue) == 0 {
			if len(wanted) > 0 || closed {
				err := writeIndex(l.sync) // at Close, durable as the last group
				for _, w := range wanted {
					w(err)
				}
				if closed {
					return
				}
				continue
			}
			if !armed && l.trailing() {
				// Idle with terms gathered: index them soon rather than
				// leave queries to read the events.
				idle.Reset(l.indexIdle)
				armed = true
			}
			select {
			case <-l.mu.wake:
			case <-idle.C:
				armed = false
				writeIndex(pebble.NoSync)
			}
			continue
		}
		if armed {
			// Not idle: the terms wait for IndexEvery, or the next pause.
			idle.Stop()
			armed = false
		}
		// A batch waiting to be stored elsewhere holds up the ones after
		// it, which go back to the head of the queue.
		var refused error
		var held []*Pending
		if failed == nil {
			queue, held, refused = l.awaitReady(queue)
			if len(held) > 0 && refused == nil {
				l.mu.Lock()
				l.mu.queue = append(held, l.mu.queue...)
				l.mu.Unlock()
				l.kick()
			}
		}
		var g *group
		switch {
		case failed != nil:
			g = &group{queue: queue, batch: queue[0].b, err: failed} // never written
		case len(queue) == 0:
			// The first batch was refused: nothing to write.
		default:
			g = l.write(queue, len(wanted) > 0)
		}
		if refused != nil {
			// What was refused, and everything after it, fails unwritten.
			l.mu.Lock()
			rest := append(held, l.mu.queue...)
			l.mu.queue = nil
			l.mu.Unlock()
			if g != nil {
				for _, w := range wanted {
					w(g.err)
				}
				wanted = nil
				groups <- g
			}
			if failed == nil {
				failed = refused
				l.fail()
			}
			g = &group{queue: rest, batch: rest[0].b, err: refused}
		}
		if g.err != nil && failed == nil {
			// Closed before any waiter hears of it: whoever sees the error
			// finds the log closed.
			failed = g.err
			l.fail()
		}
		for _, w := range wanted {
			w(g.err)
		}
		groups <- g
	}
}

// awaitReady waits until the first batch of queue may be written (see
// EnqueueAfter) and returns the run of batches from the head that may be
// written now, and the rest, held back: the first batch whose ready has
// not yielded yet and everything after it. If a batch is refused, the ones
// before it are returned to be written, the refused one and the rest held,
// with its error.
func (l *Log) awaitReady(queue []*Pending) (ready, held []*Pending, refused error) {
	for i, p := range queue {
		if p.ready == nil {
			continue
		}
		var err error
		if i == 0 {
			err = <-p.ready
		} else {
			select {
			case err = <-p.ready:
			default:
				return queue[:i], queue[i:], nil
			}
		}
		p.ready = nil // it yields once
		if err != nil {
			return queue[:i], queue[i:], err
		}
	}
	return queue, nil, nil
}

// fail closes the log to appends after a group could not be built or
// written (a failure of the WAL itself ends the process: walFailed).
// Whatever followed the group cannot continue the log, so every later
// batch fails rather than leave a hole.
func (l *Log) fail() {
	l.mu.Lock()
	l.mu.closed = true
	l.mu.Unlock()
}

// failWith closes the log to appends because of err, a corruption Pebble
// met or a disk that is full: a store that cannot be read, or written, must
// not go on acknowledging. Later appends fail with ErrClosed and err.
func (l *Log) failWith(err error) {
	l.mu.Lock()
	l.mu.closed = true
	if l.mu.failed == nil {
		l.mu.failed = err
	}
	l.mu.Unlock()
	l.kick()
}

// group is batches written to Pebble together, waiting for their sync.
type group struct {
	queue []*Pending
	batch *pebble.Batch // what was written: the queue's first batch, or one merging them
	err   error
	began time.Time // when its write began, for Options.OnSync
}

// write writes queue as one batch and gathers its index terms and state
// entries, writing them too when they reach IndexEvery events or indexAll
// is set; with synced writes it returns once the batch is in the WAL and
// the memtable, before the sync. The batch holds every event first, then
// the records, then the index and state entries: Pebble inserts a batch
// into its memtable in order, and an insert next to the one before is
// cheap, so the events' consecutive keys cost little (5% more appends at
// 64 writers than batches written one after the other).
func (l *Log) write(queue []*Pending, indexAll bool) *group {
	g := &group{queue: queue, batch: queue[0].b, began: time.Now()}
	if len(queue) > 1 {
		g.batch = l.db.NewBatch()
		for _, p := range queue {
			if err := g.batch.Apply(p.b, nil); err != nil {
				g.err = fmt.Errorf("eventlog: group batch: %w", err)
				return g
			}
		}
	}
	index := l.index
	for _, p := range queue {
		if err := g.batch.Apply(p.rest, nil); err != nil {
			g.err = fmt.Errorf("eventlog: group batch: %w", err)
			return g
		}
		for _, t := range p.terms.terms {
			index.addSeq(t.indexTerm, t.seq)
		}
		l.putTerms(p.terms)
		p.terms = nil
		index.last = p.last
		if !l.stateStale.Load() {
			for _, e := range p.state {
				l.state[e.Path] = e
			}
		}
		p.state = nil
	}
	if indexAll || index.last-l.indexed >= l.indexEvery {
		if g.err = l.writeIndex(g.batch, nil); g.err != nil {
			return g
		}
	}
	if l.sync.Sync {
		g.err = l.db.ApplyNoSyncWait(g.batch, l.sync)
	} else {
		g.err = g.batch.Commit(l.sync)
	}
	return g
}

// syncLoop waits for each group's sync in the order they were written and
// then wakes their waiters. A group that failed (and every one after it,
// which the committer fails unwritten) wakes them with its error.
func (l *Log) syncLoop(groups <-chan *group, done chan<- struct{}) {
	defer close(done)
	for g := range groups {
		if g.err == nil {
			if l.sync.Sync {
				if err := g.batch.SyncWait(); err != nil {
					l.walFailed(err)
				}
			}
			last := g.queue[len(g.queue)-1].last
			l.synced(last-l.last.Load(), g.began)
			l.last.Store(last)
		}
		if g.batch != g.queue[0].b {
			g.batch.Close() // the group's own
		}
		for _, p := range g.queue {
			p.err = g.err
			p.b.Close()
			p.rest.Close()
			close(p.done)
		}
	}
}

// encode writes a batch's events into one Pebble batch (p.b) and its
// idempotency records into another (p.rest), and gathers its index terms,
// for the committer to write with its group's (see write), with the
// batch's state entries.
func (l *Log) encode(b *Batch, p *Pending) error {
	pb, rest := l.db.NewBatch(), l.db.NewBatch()
	sc := l.scratch.Get().(*scratch)
	defer l.scratch.Put(sc)
	buf, key := sc.buf[:0], sc.key[:0]
	defer func() { sc.buf, sc.key = buf, key }()
	fail := func(err error) error {
		pb.Close()
		rest.Close()
		return err
	}
	terms := l.getTerms()
	for _, ev := range b.Events {
		buf = AppendEvent(buf[:0], ev)
		key = appendEventKey(key[:0], ev.Seq)
		if err := pb.Set(key, buf, nil); err != nil {
			return fail(err)
		}
		indexTerms(ev, func(t indexTerm) { terms.terms = append(terms.terms, posting{t, ev.Seq}) })
	}
	// A later record of an id is set after an earlier one: it wins.
	for _, d := range b.Records {
		buf = AppendDecision(buf[:0], d)
		key = appendKey(key[:0], famDecision, d.Intent)
		if err := rest.Set(key, buf, nil); err != nil {
			return fail(err)
		}
	}
	p.b, p.rest, p.terms, p.state = pb, rest, terms, b.State
	return nil
}

// termList is a batch's index terms.
type termList struct{ terms []posting }

// scratch is what encoding a batch writes into before Pebble copies it.
type scratch struct{ buf, key []byte }

// getTerms returns an empty list for a batch's index terms; the committer
// gives it back (putTerms) once it has merged them.
func (l *Log) getTerms() *termList {
	if t, ok := l.terms.Get().(*termList); ok {
		return t
	}
	return &termList{terms: make([]posting, 0, 32)}
}

func (l *Log) putTerms(t *termList) {
	if cap(t.terms) > 4096 {
		return // a huge batch's: let it go
	}
	clear(t.terms) // keep no event's strings alive
	t.terms = t.terms[:0]
	l.terms.Put(t)
}

// commit commits a batch written outside the committer's groups. A synced
// commit that fails has failed in the WAL's sync (a failed WAL write ends
// the process inside Pebble), which ends the process too: see walFailed.
func (l *Log) commit(b *pebble.Batch, wo *pebble.WriteOptions) error {
	err := b.Commit(wo)
	if err != nil && wo.Sync {
		l.walFailed(err)
	}
	return err
}

// walFailed ends the process after a failed write or sync of Pebble's WAL.
// Nothing can be written after it: Pebble's commit pipeline stops at the
// failure and ends the process at the next commit that reaches it, and
// after a failed fsync what the file holds is unknown (the kernel may have
// dropped the pages it could not write, and a later fsync would report
// success). Only a restart, which reads what is durable, can go on; it
// finds every batch that was acknowledged. etcd and PostgreSQL treat a
// failed WAL fsync the same way.
func (l *Log) walFailed(err error) {
	panic(fmt.Sprintf("eventlog %s: write-ahead log failed, restart to recover: %v", l.dir, err))
}
