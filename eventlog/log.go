package eventlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
		// indexWanted are callers of afterIndex waiting for the index
		// and the state to be complete to the last batch written.
		indexWanted []func(error)
	}
	done chan struct{}

	// The committer's: the latest state entry of each path the batches
	// after the state's mark touched; the terms of the events after the
	// index (indexed, the seq the index is complete to), and buffers for
	// its keys. stateStale is set while the state is marked complete to
	// an event before the index's, the entries of the events between lost
	// in a crash: then the committer gathers none and leaves the mark
	// alone until RewriteState.
	state      map[string]Entry
	stateStale atomic.Bool
	stateSeq   atomic.Uint64 // the mark: StateSeq
	index      *postings
	indexed    uint64
	indexEvery uint64
	indexIdle  time.Duration
	// indexWritten is Options.indexWritten, onSync Options.OnSync or what
	// SetOnSync put in its place.
	indexWritten func(seq uint64)
	intentBatch  int // Options.intentBatch
	onSync       atomic.Pointer[func(events int, took time.Duration)]
	key, gaps    []byte

	scratch sync.Pool // of *scratch, for encoding
	terms   sync.Pool // of *termList, handed from the writers to the committer
}

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
	if !opts.NoSync {
		po.FS = fillFS{FS: po.FS}
	}
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
	l := &Log{db: db, dir: dir, sync: pebble.Sync, w: w, done: make(chan struct{}), index: newPostings(), state: map[string]Entry{}}
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
	l.indexIdle, l.indexWritten = opts.indexIdle, opts.indexWritten
	l.SetOnSync(opts.OnSync)
	l.intentBatch = opts.intentBatch
	// The state's mark first: indexing what a crash left after the index
	// must not mark complete a state that lost the same stretch.
	if err := l.openState(); err != nil {
		return fail(err)
	}
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

// quiet is a Pebble logger that says nothing but fatal errors, which end
// the process as Pebble requires: Fatalf must not return.
type quiet struct{ dir string }

func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (q quiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("eventlog %s: %s", q.dir, fmt.Sprintf(format, args...)))
}
