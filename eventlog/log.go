package eventlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Errors callers branch on.
var (
	ErrClosed    = errors.New("eventlog: closed")
	ErrSequence  = errors.New("eventlog: batch does not continue the log")
	ErrCompacted = errors.New("eventlog: required events have been compacted")
	ErrNotFound  = errors.New("eventlog: not found")
)

// Options tunes a log. The zero value works: every field documents its
// default, applied by EnsureDefaults, and Open refuses options Validate
// finds wrong.
type Options struct {
	// NoSync leaves commits unsynced: for tests and benchmarks that measure
	// everything but the disk. The default syncs every commit.
	NoSync bool
	// IndexEvery is how far the index may trail the log, in events. The
	// committer gathers the index terms of the groups it writes and writes
	// their posting lists with the group that brings them to IndexEvery
	// events, or on its own once the log has been idle for a moment, or at
	// Close. Fewer, longer posting lists are what lets many writers scale
	// (see BenchmarkAppendSynced). Queries read the events after the index
	// from the log itself, so they see every event either way, and Open
	// indexes the ones a crash left behind. The default is 4096; 1 indexes
	// every group as it is written.
	IndexEvery int
	// OnSync, if set, is called by the committer after each group commit is
	// durable, with how many events it made durable and how long it took,
	// from the start of its write to the end of its sync (the write alone
	// with NoSync): a metric of the disk. It runs on the goroutine that
	// wakes the group's waiters, so it must be quick. The default is nil.
	OnSync func(events int, took time.Duration)
	// indexIdle, if set, replaces indexIdle, and indexWritten is called
	// after each index batch of its own the committer writes (for tests).
	indexIdle    time.Duration
	indexWritten func(seq uint64)
	// retryPause, if set, replaces retryPause (for tests).
	retryPause time.Duration
	// intentBatch, if set, replaces intentBatch (for tests).
	intentBatch int
	// Pebble, if set, is used to open the store (its Logger is replaced by a
	// quiet one unless set, a zero MemTableSize and FormatMajorVersion by
	// the log's defaults, and its EventListener is teed with the log's
	// own); Pebble validates it when the store opens. The default (nil) is
	// Pebble's defaults with a 64 MB memtable and FormatWALSyncChunks.
	Pebble *pebble.Options
}

// EnsureDefaults fills every zero field with its default. Pebble stays as
// it is: Open applies the log's defaults to a copy of it.
func (o *Options) EnsureDefaults() {
	if o.IndexEvery == 0 {
		o.IndexEvery = 4096
	}
	if o.indexIdle == 0 {
		o.indexIdle = indexIdle
	}
	if o.retryPause == 0 {
		o.retryPause = retryPause
	}
	if o.intentBatch == 0 {
		o.intentBatch = intentBatch
	}
}

// Validate reports every problem of the options at once, each naming the
// field and its value. Open calls EnsureDefaults, then Validate.
func (o *Options) Validate() error {
	var errs []error
	if o.IndexEvery < 0 {
		errs = append(errs, fmt.Errorf("eventlog options: IndexEvery is negative (%d)", o.IndexEvery))
	}
	if o.indexIdle < 0 {
		errs = append(errs, fmt.Errorf("eventlog options: indexIdle is negative (%s)", o.indexIdle))
	}
	if o.retryPause < 0 {
		errs = append(errs, fmt.Errorf("eventlog options: retryPause is negative (%s)", o.retryPause))
	}
	return errors.Join(errs...)
}

// Log is the event log in a Pebble directory. Appends go through one
// committer goroutine that writes every batch queued since its last commit
// in one synced Pebble batch (group commit). Reads are safe concurrently
// with appends and with each other. A failed write or sync of the store's
// write-ahead log ends the process, before any batch it could not make
// durable is acknowledged (see walFailed): a restart recovers the log to
// its last acknowledged batch. Damage met by any read, or by Pebble in the
// background, and a disk too full for Pebble's tables close the log to
// appends instead (failWith): reads fail with a *CorruptError or a
// *DiskFullError, and appends with ErrClosed and that error.
type Log struct {
	db   *pebble.DB
	dir  string
	sync *pebble.WriteOptions
	w    *watcher

	last  atomic.Uint64 // the last durable seq
	first atomic.Uint64 // the first event kept (1 unless compacted)

	mu struct {
		sync.Mutex
		closed  bool // to appends: by Close, or by a group that failed
		closing bool // Close was called
		// failed is why the log closed to appends without Close: the
		// store is corrupt, or the disk full (see failWith).
		failed error
		next   uint64 // the seq the next enqueued batch must start at
		queue  []*Pending
		wake   chan struct{}
		// indexWanted are callers of flushIndex waiting for the index to
		// be complete to the last batch written.
		indexWanted []chan error
	}
	done chan struct{}

	// The committer's: the terms of the events after the index (indexed,
	// the seq the index is complete to), and buffers for its keys.
	index      *postings
	indexed    uint64
	indexEvery uint64
	indexIdle  time.Duration
	// indexWritten is Options.indexWritten, onSync Options.OnSync.
	indexWritten func(seq uint64)
	intentBatch  int // Options.intentBatch
	onSync       func(events int, took time.Duration)
	key, gaps    []byte

	scratch sync.Pool // of *scratch, for encoding
	terms   sync.Pool // of *termList, handed from the writers to the committer
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

// Batch is what one append makes durable at once: a run of events that
// continues the log, and the materialized state they leave.
type Batch struct {
	Events []*intents.Event
	// State holds the new entry of every path the batch's changes touched,
	// latest last. The engine's state tree says which (Tree.Touched).
	State []Entry
}

// Pending is an enqueued batch; Wait returns once it is durable.
type Pending struct {
	b     *pebble.Batch // the events
	rest  *pebble.Batch // the idempotency records and state entries
	terms *termList     // index terms, written by the committer for the whole group
	// records are the idempotency records in rest, by intent id; cond are
	// the invalid decisions whose record depends on the log's (see write).
	records map[string]*intents.Decision
	cond    []*intents.Decision
	last    uint64
	done    chan struct{}
	err     error
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

// Open opens (or creates) the log in dir. It fails with a *CorruptError
// if the store is damaged where Open reads it (a write-ahead log it
// replays, the tables that hold what it reads), and with a *DiskFullError
// if the disk has no room for the tables Open writes from the write-ahead
// log (see watcher.openStore: Open then returns at once, and the store
// recovers in the background once there is room), and with a
// *LockedError (ErrLocked) if another process has the log open.
func Open(dir string, opts *Options) (*Log, error) {
	o := Options{}
	if opts != nil {
		o = *opts // the caller's stay as they are
	}
	opts = &o
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("eventlog: open %s: %w", dir, err)
	}
	// A larger memtable than Pebble's 4 MB default: every decision writes
	// several keys, and with small memtables flushes and compactions take
	// most of the CPU (twice the append throughput at 64 writers, measured).
	po := &pebble.Options{}
	if opts.Pebble != nil {
		po = opts.Pebble.Clone()
	}
	if po.MemTableSize == 0 {
		po.MemTableSize = 64 << 20
	}
	if po.FormatMajorVersion == pebble.FormatDefault {
		// WAL chunks that say how far the log was synced: with them a
		// damaged chunk in the newest WAL is corruption, which Open reports,
		// rather than the torn end a crash leaves, which Open cuts the log
		// at without a word (the acknowledged events after the damage would
		// be lost). A store in an older format is upgraded when it opens.
		po.FormatMajorVersion = pebble.FormatWALSyncChunks
	}
	if po.Logger == nil && po.LoggerAndTracer == nil {
		po.Logger = quiet{dir: dir}
	}
	if po.FS == nil {
		po.FS = vfs.Default
	}
	w := newWatcher(dir, po.FS, opts.retryPause)
	po.FS = walWatchFS{FS: po.FS, w: w}
	po.EventListener = w.listener(po.EventListener)
	db, err := w.openStore(po)
	if le := lockErr(dir, err); le != nil {
		w.close()
		return nil, le
	}
	if err != nil {
		return nil, openErr(dir, err)
	}
	l := &Log{db: db, dir: dir, sync: pebble.Sync, w: w, done: make(chan struct{}), index: newPostings()}
	fail := func(err error) (*Log, error) {
		w.close()
		db.Close()
		return nil, openErr(dir, w.storeErr(err, 0))
	}
	l.scratch.New = func() any { return &scratch{buf: make([]byte, 0, 512), key: make([]byte, 0, 64)} }
	if opts.NoSync {
		l.sync = pebble.NoSync
	}
	first, _, err := readMeta(db, metaFirst)
	if err != nil {
		return fail(err)
	}
	l.first.Store(max(first, 1))
	last, err := l.lastEventSeq()
	if err != nil {
		return fail(err)
	}
	if last < first { // everything before first was compacted away
		last = first - 1
	}
	// The events are consecutive from first: a log that starts later has
	// lost tables (a damaged MANIFEST can make Pebble open without them).
	if oldest, err := l.firstEventSeq(); err != nil {
		return fail(err)
	} else if oldest != 0 && oldest != l.first.Load() {
		return fail(&CorruptError{File: dir, Err: fmt.Errorf("its first event is %d, not %d: the store has lost the tables that held the events before it",
			oldest, l.first.Load())})
	}
	l.last.Store(last)
	l.mu.next = last + 1
	l.mu.wake = make(chan struct{}, 1)
	l.indexEvery = uint64(opts.IndexEvery)
	l.indexIdle, l.indexWritten, l.onSync = opts.indexIdle, opts.indexWritten, opts.OnSync
	l.intentBatch = opts.intentBatch
	if err := l.catchUpIndex(); err != nil {
		return fail(err)
	}
	// A corruption Pebble met in the background while the log opened
	// (loading a table's stats, say) is as much a reason not to open.
	if ce := w.corrupt.Load(); ce != nil {
		return fail(ce)
	}
	w.log.Store(l)
	go l.commitLoop()
	return l, nil
}

// retryPause is how long Pebble waits before it retries a background write
// that failed while the log opened, or for want of space (see
// watcher.backgroundError).
const retryPause = time.Second

// openErr is the error of Open: a corrupt store or a full disk names the
// file or directory itself.
func openErr(dir string, err error) error {
	var ce *CorruptError
	var de *DiskFullError
	if errors.As(err, &ce) || errors.As(err, &de) {
		return fmt.Errorf("open event log: %w", err)
	}
	return fmt.Errorf("open event log %s: %w", dir, err)
}

// readMeta reads the seq held by metadata key; found is false if r holds
// none.
func readMeta(r pebble.Reader, key []byte) (seq uint64, found bool, err error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, false, fmt.Errorf("%w: metadata %q is %d bytes, want 8", ErrCorrupt, key, len(v))
	}
	return binary.BigEndian.Uint64(v), true, nil
}

// firstEventSeq returns the seq of the first event the store holds, 0 if
// none.
func (l *Log) firstEventSeq() (uint64, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famEvent}, UpperBound: []byte{famEvent + 1}})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if !it.First() {
		return 0, it.Error()
	}
	return seqOf(it.Key()), nil
}

func (l *Log) lastEventSeq() (uint64, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famEvent}, UpperBound: []byte{famEvent + 1}})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if !it.Last() {
		return 0, it.Error()
	}
	return seqOf(it.Key()), nil
}

// Close stops the committer after the batches already queued and closes the
// store. Batches enqueued after Close fail with ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.mu.closing {
		l.mu.Unlock()
		return ErrClosed
	}
	// closed may be set already, by a group that failed; the store is still
	// open and must be closed.
	l.mu.closed, l.mu.closing = true, true
	l.mu.Unlock()
	l.kick()
	<-l.done
	l.w.close()
	return l.db.Close()
}

// Dir returns the directory the log lives in.
func (l *Log) Dir() string { return l.dir }

// LastSeq returns the sequence number of the last durable event (0 for an
// empty log).
func (l *Log) LastSeq() uint64 { return l.last.Load() }

// FirstSeq returns the first event the log still holds; the ones before
// were compacted.
func (l *Log) FirstSeq() uint64 { return l.first.Load() }

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
		if failed != nil || len(l.index.terms) == 0 {
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
					w <- err
				}
				if closed {
					return
				}
				continue
			}
			if !armed && len(l.index.terms) > 0 {
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
					w <- g.err
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
			w <- g.err
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

// indexIdle is how long the committer waits, idle, before it indexes the
// terms it has gathered.
const indexIdle = 50 * time.Millisecond

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

// flushIndex waits until the index is complete to the last batch written.
func (l *Log) flushIndex() error {
	done := make(chan error, 1)
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.mu.indexWanted = append(l.mu.indexWanted, done)
	l.mu.Unlock()
	l.kick()
	return <-done
}

// writeIndex writes the posting lists of the terms gathered and the seq
// the index is now complete to: into b, the batch of the group that
// brings them there, or, with b nil, a batch of their own committed with
// wo (a lost index batch is made again by Open). The committer
// writes them after the groups of their events, so that no index key
// names an event a crash could lose.
func (l *Log) writeIndex(b *pebble.Batch, wo *pebble.WriteOptions) error {
	if len(l.index.terms) == 0 {
		return nil
	}
	own := b == nil
	if own {
		b = l.db.NewBatch()
		defer b.Close()
	}
	key, gaps := l.key[:0], l.gaps[:0]
	for i, t := range l.index.terms {
		seqs := l.index.seqs[i]
		key = indexKey(key[:0], t.kind, t.term, seqs[0])
		gaps = appendGaps(gaps[:0], seqs)
		if err := b.Set(key, gaps, nil); err != nil {
			return fmt.Errorf("eventlog: index: %w", err)
		}
	}
	l.key, l.gaps = key, gaps
	last := l.index.last
	mark := binary.BigEndian.AppendUint64(nil, last)
	if err := errors.Join(b.Set(metaIndexed, mark, nil), b.Set(metaIntents, mark, nil)); err != nil {
		return fmt.Errorf("eventlog: index: %w", err)
	}
	if own {
		if err := l.commit(b, wo); err != nil {
			return fmt.Errorf("eventlog: index: %w", err)
		}
	}
	l.index.reset()
	l.indexed = last
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

// group is batches written to Pebble together, waiting for their sync.
type group struct {
	queue []*Pending
	batch *pebble.Batch // what was written: the queue's first batch, or one merging them
	err   error
	began time.Time // when its write began, for Options.OnSync
}

// write writes queue as one batch and gathers its index terms, writing the
// index too when they reach IndexEvery events or indexAll is set; with
// synced writes it returns once the batch is in the WAL and the memtable,
// before the sync. The batch holds every event first, then the records and
// state entries, then the index: Pebble inserts a batch into its memtable
// in order, and an insert next to the one before is cheap, so the events'
// consecutive keys cost little (5% more appends at 64 writers than batches
// written one after the other).
func (l *Log) write(queue []*Pending, indexAll bool) *group {
	g := &group{queue: queue, batch: queue[0].b}
	if l.onSync != nil {
		g.began = time.Now()
	}
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
	for i, p := range queue {
		if len(p.cond) > 0 {
			if err := l.recordConditional(g.batch, queue, i); err != nil {
				g.err = fmt.Errorf("eventlog: idempotency records: %w", err)
				return g
			}
		}
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
	}
	for _, p := range queue {
		p.records, p.cond = nil, nil // needed only while the group is built
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
			if l.onSync != nil {
				l.synced(last-l.last.Load(), g.began)
			}
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
// idempotency records and state entries into another (p.rest), and
// gathers its index terms, for the committer to write with its group's
// (see write).
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
	records := map[string]*intents.Decision{} // this batch's, latest wins
	var cond []*intents.Decision
	for _, ev := range b.Events {
		buf = AppendEvent(buf[:0], ev)
		key = appendEventKey(key[:0], ev.Seq)
		if err := pb.Set(key, buf, nil); err != nil {
			return fail(err)
		}
		indexTerms(ev, func(t indexTerm) { terms.terms = append(terms.terms, posting{t, ev.Seq}) })
		d := ev.Decision
		if d == nil || !intents.Records(nil, d) {
			continue
		}
		switch prev, ok := records[d.Intent]; {
		case ok:
			if intents.Records(prev, d) {
				records[d.Intent] = d
			}
		case d.Reason == intents.ReasonInvalid:
			// Only an invalid decision can be about an id another agent
			// owns (the engine refuses such reuse as invalid). Whether it
			// is depends on the record before this batch, which a batch
			// queued but not yet written may hold: the committer decides.
			cond = append(cond, d)
		default:
			records[d.Intent] = d
		}
	}
	for id, d := range records {
		buf = AppendDecision(buf[:0], d)
		key = appendKey(key[:0], famDecision, id)
		if err := rest.Set(key, buf, nil); err != nil {
			return fail(err)
		}
	}
	for _, e := range b.State {
		buf = appendEntry(buf[:0], e)
		key = appendKey(key[:0], famState, e.Path)
		if err := rest.Set(key, buf, nil); err != nil {
			return fail(err)
		}
	}
	p.b, p.rest, p.terms, p.records, p.cond = pb, rest, terms, records, cond
	return nil
}

// recordConditional writes the records of queue[i]'s invalid decisions
// that take their id: those whose id had no record before, or one of the
// same agent. The record before is the last of the id among the batches
// queued before queue[i] in this group, else the log's: the groups before
// are in the memtable already.
func (l *Log) recordConditional(b *pebble.Batch, queue []*Pending, i int) error {
	p := queue[i]
	var taken map[string]*intents.Decision // p's own, for a second use of an id
	for _, d := range p.cond {
		prev, ok := taken[d.Intent]
		for j := i - 1; !ok && j >= 0; j-- {
			prev, ok = queue[j].records[d.Intent]
		}
		if !ok {
			var err error
			if prev, err = l.Decision(d.Intent); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
		}
		if !intents.Records(prev, d) {
			continue
		}
		if err := b.Set(decisionKey(d.Intent), AppendDecision(nil, d), nil); err != nil {
			return err
		}
		if taken == nil {
			taken = map[string]*intents.Decision{}
		}
		taken[d.Intent] = d
	}
	// Later batches of the group see p's last record of each id: one in
	// p.rest, written after these, else one taken here.
	for id, d := range taken {
		if _, ok := p.records[id]; !ok {
			p.records[id] = d
		}
	}
	return nil
}

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
//     change, grant, wait), never from the intent event.
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

// quiet is a Pebble logger that says nothing but fatal errors, which end
// the process as Pebble requires: Fatalf must not return.
type quiet struct{ dir string }

func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (q quiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("eventlog %s: %s", q.dir, fmt.Sprintf(format, args...)))
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
