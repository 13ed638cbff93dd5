package eventlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/atomicfs"
	"github.com/cockroachdb/pebble/v2/wal"
)

// ErrDiskFull is matched (errors.Is) by every *DiskFullError: the store
// could not write for want of space.
var ErrDiskFull = errors.New("eventlog: disk full")

// DiskFullError is a write of the store that the disk had no room for
// (ENOSPC, or EDQUOT: the quota is full). It unwraps to the failed
// operation's error, so errors.Is(err, syscall.ENOSPC) holds too.
type DiskFullError struct {
	Dir string // the log's directory
	// Op is what needed the space, as a clause: "recover the write-ahead
	// log", for the tables Open writes from it.
	Op string
	// Avail and Total are the bytes free to this process on the disk and
	// its size, as the file system reported them when the write failed
	// (both 0 if it could not say).
	Avail, Total uint64
	Err          error
}

func (e *DiskFullError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the disk of %s is full", e.Dir)
	if e.Total > 0 {
		fmt.Fprintf(&b, " (%s free of %s)", bytesize(e.Avail), bytesize(e.Total))
	}
	if e.Op != "" {
		fmt.Fprintf(&b, ", so the log cannot %s", e.Op)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *DiskFullError) Is(target error) bool { return target == ErrDiskFull }
func (e *DiskFullError) Unwrap() error        { return e.Err }

// bytesize says n in the largest binary unit that leaves at least 1.
func bytesize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// isDiskFull reports whether err says the disk, or the quota, is full.
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// CorruptError is data the log cannot read. Either a record that does not
// decode (Seq names it, File is empty; the rest of the log stays readable),
// or a file of the store that fails its checksums or cannot be parsed (File
// names it, or the store's directory when no one file is to blame): then
// Seq, if not 0, is the first event the damage keeps from being read, and
// Keys says what the file holds where that is known.
// Pebble checks a checksum on every block it reads, so damaged data is
// always this error, never wrong data. Every CorruptError matches
// ErrCorrupt (errors.Is).
type CorruptError struct {
	Seq  uint64
	File string // the path of the damaged file, or of the store
	// Keys describes the keys of the damaged table ("events 1..9000", or
	// "keys from the decision of 01J… to the agent index of w1 at event
	// 12"), if known.
	Keys string
	Err  error
}

func (e *CorruptError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("event %d: %v", e.Seq, e.Err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s is corrupt", e.File)
	if e.Seq != 0 {
		fmt.Fprintf(&b, " from event %d on", e.Seq)
	}
	if e.Keys != "" {
		fmt.Fprintf(&b, " (it holds %s)", e.Keys)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }
func (e *CorruptError) Unwrap() error        { return e.Err }

// describeKeys says what the keys from start to end are, in the log's
// terms.
func describeKeys(start, end []byte) string {
	if len(start) == 9 && len(end) == 9 && start[0] == famEvent && end[0] == famEvent {
		return fmt.Sprintf("events %d..%d", seqOf(start), seqOf(end))
	}
	return fmt.Sprintf("keys from %s to %s", describeKey(start), describeKey(end))
}

// describeKey names one key of the log (see keys.go).
func describeKey(k []byte) string {
	if len(k) == 0 {
		return "the start"
	}
	name := func(b []byte) string {
		const most = 40
		if len(b) > most || !utf8.Valid(b) {
			return fmt.Sprintf("%.40q…", b)
		}
		return string(b)
	}
	body := k[1:]
	switch k[0] {
	case famEvent, famSnapshot:
		if len(body) == 8 {
			return fmt.Sprintf("%s %d", map[byte]string{famEvent: "event", famSnapshot: "snapshot"}[k[0]], binary.BigEndian.Uint64(body))
		}
	case famState:
		return "the state of " + name(body)
	case famDecision:
		return "the decision of " + name(body)
	case famMeta:
		return "metadata " + name(body)
	case famIndex:
		kinds := map[byte]string{idxAgent: "agent", idxType: "type", idxTxn: "transaction", idxSubtree: "subtree", idxExact: "path", idxTrace: "trace", idxIntent: "intent"}
		if len(body) >= 10 && kinds[body[0]] != "" && body[len(body)-9] == 0 {
			return fmt.Sprintf("the %s index of %s at event %d", kinds[body[0]], name(body[1:len(body)-9]), seqOf(body))
		}
	}
	return fmt.Sprintf("key %q", name(k))
}

// A watcher is the log's listener on Pebble's events and its judge of the
// errors Pebble returns: it turns a corruption into a *CorruptError and a
// full disk into a *DiskFullError, closes the log to appends once it
// knows of either (a log that cannot be read or written must not go on
// acknowledging), and paces Pebble's retries of a write that failed.
type watcher struct {
	dir   string
	fs    vfs.FS
	pause time.Duration // between Pebble's retries of a failed background write
	stop  chan struct{} // closed by Close: no more pauses

	// opening is set until pebble.Open has returned; the first background
	// error meanwhile goes to openFailed.
	opening    atomic.Bool
	openFailed chan error
	// replayed are the write-ahead logs Pebble opened to read while it
	// opened, in order (see walWatchFS): the last is the one a replay that
	// failed could not read.
	replayed struct {
		sync.Mutex
		paths []string
	}

	log       atomic.Pointer[Log]
	corrupt   atomic.Pointer[CorruptError] // the first Pebble reported
	closeOnce sync.Once
}

func newWatcher(dir string, fs vfs.FS, pause time.Duration) *watcher {
	w := &watcher{dir: dir, fs: fs, pause: pause, stop: make(chan struct{}), openFailed: make(chan error, 1)}
	w.opening.Store(true)
	return w
}

// walWatchFS is the file system the store opens on: fs, noting the
// write-ahead logs Pebble reads while it opens. Pebble's error for a log it
// cannot replay does not name the log, and which logs it replays depends on
// its manifest (an older log may be kept only for reuse, and never read).
type walWatchFS struct {
	vfs.FS
	w *watcher
}

func (fs walWatchFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if strings.HasSuffix(name, ".log") && fs.w.opening.Load() {
		fs.w.replayed.Lock()
		fs.w.replayed.paths = append(fs.w.replayed.paths, name)
		fs.w.replayed.Unlock()
	}
	return fs.FS.Open(name, opts...)
}

func (fs walWatchFS) Unwrap() vfs.FS { return fs.FS }

// listener returns Pebble's listener for the log: the log's own, teed with
// the one of Options.Pebble, if any.
func (w *watcher) listener(user *pebble.EventListener) *pebble.EventListener {
	own := pebble.EventListener{BackgroundError: w.backgroundError, DataCorruption: w.dataCorruption}
	if user == nil {
		return &own
	}
	tee := pebble.TeeEventListener(own, *user)
	return &tee
}

// backgroundError hears of a flush or compaction that failed. Pebble
// retries a failed flush at once and for ever, and its Open waits for the
// flush of the write-ahead log it recovered: on a full disk that is a
// process spinning in Open, deaf to signals. So while Open runs the first
// error fails the Open (see openStore), and on a full disk the log closes
// to appends; either way the retry waits w.pause first, so that a store
// left to recover in the background costs nothing until it can. (Pebble
// holds its mutex while it tells us, so the pause also holds up commits,
// which on a full disk fail anyway.)
func (w *watcher) backgroundError(err error) {
	opening := w.opening.Load()
	if opening {
		select {
		case w.openFailed <- err:
		default:
		}
	}
	if !opening && !isDiskFull(err) {
		return // Pebble backs off failed compactions by itself
	}
	if isDiskFull(err) {
		if l := w.log.Load(); l != nil {
			l.failWith(w.diskFull(err, "write"))
		}
	}
	t := time.NewTimer(w.pause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.stop:
	}
}

// dataCorruption hears of a block, a table or a blob that failed its
// checksum or could not be parsed, by a read of the log or by a
// compaction: the log closes to appends. The read that met it fails with
// the error itself (see storeErr); Pebble's default would end the process.
func (w *watcher) dataCorruption(info pebble.DataCorruptionInfo) {
	ce := corruptionOf(&info, 0)
	w.corrupt.CompareAndSwap(nil, ce)
	if l := w.log.Load(); l != nil {
		l.failWith(ce)
	}
}

func corruptionOf(info *pebble.DataCorruptionInfo, seq uint64) *CorruptError {
	ce := &CorruptError{Seq: seq, File: info.Path, Err: info.Details}
	if start, end := info.Bounds.Start, info.Bounds.End.Key; start != nil || end != nil {
		ce.Keys = describeKeys(start, end)
	}
	return ce
}

// close ends the pauses: the store is being closed.
func (w *watcher) close() { w.closeOnce.Do(func() { close(w.stop) }) }

// diskFull makes a *DiskFullError of err, with the disk's free space now.
func (w *watcher) diskFull(err error, op string) *DiskFullError {
	e := &DiskFullError{Dir: w.dir, Op: op, Err: err}
	if u, uerr := w.fs.GetDiskUsage(w.dir); uerr == nil {
		e.Avail, e.Total = u.AvailBytes, u.TotalBytes
	}
	return e
}

// storeErr turns an error of the store into the log's: a corruption into a
// *CorruptError (seq, if not 0, the first event it keeps from being read),
// a full disk into a *DiskFullError. Others are returned as they are.
func (w *watcher) storeErr(err error, seq uint64) error {
	var ce *CorruptError
	var de *DiskFullError
	switch {
	case err == nil, errors.As(err, &ce), errors.As(err, &de):
		return err
	case isDiskFull(err):
		return w.diskFull(err, "write")
	case !pebble.IsCorruptionError(err):
		return err
	}
	if info := pebble.ExtractDataCorruptionInfo(err); info != nil {
		return corruptionOf(info, seq)
	}
	return &CorruptError{Seq: seq, File: w.dir, Err: err}
}

// openStore opens the store, returning at the first background error while
// pebble.Open runs rather than waiting for Pebble's retries, which may
// never end (see backgroundError). An Open given up on goes on in the
// background, paced, and closes the store if it ever opens it: until then
// the store's lock is held, and Open in this process fails.
func (w *watcher) openStore(po *pebble.Options) (*pebble.DB, error) {
	type opened struct {
		db  *pebble.DB
		err error
	}
	if ce := w.manifestDamage(); ce != nil {
		return nil, ce
	}
	done := make(chan opened, 1)
	go func() {
		db, err := pebble.Open(w.dir, po)
		w.opening.Store(false)
		done <- opened{db, err}
	}()
	var o opened
	select {
	case o = <-done:
	case err := <-w.openFailed:
		select {
		case o = <-done: // it opened after all
		default:
			go func() {
				if o := <-done; o.db != nil {
					o.db.Close()
				}
			}()
			switch {
			case isDiskFull(err):
				return nil, w.diskFull(err, "recover its write-ahead log")
			case pebble.IsCorruptionError(err): // a compaction met it
				return nil, w.storeErr(err, 0)
			}
			return nil, fmt.Errorf("a flush or compaction failed while the store opened: %w", err)
		}
	}
	if o.err != nil {
		if isDiskFull(o.err) {
			return nil, w.diskFull(o.err, "open its store")
		}
		// A record of a WAL that fails its checksum, or a WAL that ends
		// where it may not (Pebble tolerates a MANIFEST's).
		if errors.Is(o.err, record.ErrInvalidChunk) || errors.Is(o.err, record.ErrZeroedChunk) || errors.Is(o.err, record.ErrUnexpectedEOF) {
			if ce := w.damagedWAL(o.err); ce != nil {
				return nil, ce
			}
		}
		return nil, w.storeErr(o.err, 0)
	}
	return o.db, nil
}

// damagedWAL names the write-ahead log Open could not replay, when
// Pebble's error does not: the last log it opened to read. It reads the
// logs Pebble replayed as Pebble did, to say the byte the damage follows
// and the first event after the last one read. Nil if Pebble replayed no
// log (the error was about another file).
func (w *watcher) damagedWAL(openErr error) *CorruptError {
	w.replayed.Lock()
	paths := slices.Clone(w.replayed.paths)
	w.replayed.Unlock()
	if len(paths) == 0 {
		return nil
	}
	culprit := paths[len(paths)-1]
	ce := &CorruptError{File: culprit, Err: openErr}
	logs, err := wal.Scan(wal.Dir{FS: w.fs, Dirname: w.dir})
	if err != nil {
		return ce
	}
	var last uint64 // the last event read
	for _, ll := range logs {
		_, path := ll.SegmentLocation(0)
		if !slices.Contains(paths, path) {
			continue // not replayed: obsolete, kept for reuse
		}
		r := ll.OpenForRead()
		read := false // a record of this log
		var at wal.Offset
		for {
			rec, off, err := r.NextRecord()
			if err == nil {
				var batch []byte
				if batch, err = io.ReadAll(rec); err == nil {
					at, read = off, true
					last = max(last, lastEventIn(batch))
					continue
				}
			}
			r.Close()
			if path != culprit {
				break
			}
			where := "at its start"
			if read {
				where = fmt.Sprintf("after the record at byte %d", at.Physical)
			}
			ce.Err = fmt.Errorf("%s: %w", where, openErr)
			if last > 0 {
				ce.Seq = last + 1
			}
			return ce
		}
	}
	return ce
}

// lastEventIn returns the last event a WAL record (a batch) sets, or 0.
func lastEventIn(batch []byte) uint64 {
	var last uint64
	r := batchrepr.Read(batch)
	for {
		_, key, _, ok, err := r.Next()
		if !ok || err != nil {
			return last
		}
		if len(key) == 9 && key[0] == famEvent {
			last = max(last, seqOf(key))
		}
	}
}

// manifestDamage checks the store's MANIFEST, the record of which tables
// hold the store, before Pebble opens it. Pebble reads the MANIFEST up to
// its first record that fails its checksum and opens with what it read,
// taking the rest for the torn end a crash leaves, and then deletes as
// obsolete every table the records after it added: a flipped byte there
// opens an empty log and destroys the old one. A torn end is only ever the
// end: Pebble writes a new MANIFEST at every open, never after a crash's
// tear. So a damaged record followed by a good chunk is damage, and nil is
// returned only for a MANIFEST that reads to its end, or whose tear is its
// end. (A damaged last record cannot be told from a tear: Pebble opens
// without it, as it always has.)
func (w *watcher) manifestDamage() *CorruptError {
	name, err := atomicfs.ReadMarker(w.fs, w.dir, "manifest")
	if err != nil || name == "" {
		return nil // a new store, or one Pebble will refuse to open itself
	}
	path := w.fs.PathJoin(w.dir, name)
	f, err := w.fs.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	r := record.NewReader(f, 0)
	for {
		at := r.Offset()
		rec, err := r.Next()
		if err == nil {
			if _, err = io.Copy(io.Discard, rec); err == nil {
				continue
			}
		}
		if errors.Is(err, io.EOF) || !record.IsInvalidRecord(err) {
			return nil
		}
		// A damaged record: the MANIFEST is read again, this once, to look
		// for a good chunk after it.
		data, rerr := io.ReadAll(io.NewSectionReader(f, 0, math.MaxInt64))
		if rerr != nil {
			return nil
		}
		if next := nextChunk(data, int(at)+1); next >= 0 {
			return &CorruptError{File: path, Err: fmt.Errorf("the record at byte %d fails its checksum, and a good one follows at byte %d: %w", at, next, err)}
		}
		return nil
	}
}

// nextChunk returns where the first well-formed chunk of a Pebble record
// file (a MANIFEST's legacy format: checksum, length, type, then the data,
// never across a 32 KiB block) starts at or after from; -1 if none does.
func nextChunk(data []byte, from int) int {
	const block, header = 32 << 10, 7
	table := crc32.MakeTable(crc32.Castagnoli)
	for p := from; p+header <= len(data); p++ {
		length := int(binary.LittleEndian.Uint16(data[p+4:]))
		typ := data[p+6]
		end := p + header + length
		if typ < 1 || typ > 4 || end > len(data) || p/block != (end-1)/block || length == 0 {
			continue
		}
		c := crc32.Checksum(data[p+6:end], table)
		if (c>>15|c<<17)+0xa282ead8 == binary.LittleEndian.Uint32(data[p:]) { // Pebble's masked CRC
			return p
		}
	}
	return -1
}
