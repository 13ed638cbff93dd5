package eventlog

import (
	"fmt"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// An fdatasync of a write that makes a file longer commits the new size in
// the file system's journal as well as the data: two flushes of the disk
// where an overwrite needs one. Pebble appends its write-ahead log to a
// new file after every Open, and until its first memtable flush lets it
// reuse an old log file in place, every synced commit grows the file. On
// the virtio disk of the CI machines a write and fdatasync of 22 KB took
// 204 µs appended and 92 µs overwritten, 1 KB 140 against 87 µs, and with
// both CPUs busy 273 against 90 µs (BenchmarkSyncUnderLoad).
//
// So the log writes zeros ahead of Pebble's appends, from a goroutine of
// their own, as PostgreSQL fills a new WAL segment with zeros before using
// it, and Pebble's commits overwrite what is already there. Pebble's
// reader takes a zeroed tail for the end of the newest log (a preallocated
// or reused log file has one too), and a log that Pebble closes ends with
// a trailer before the zeros.
const (
	walFillPiece = 64 << 10 // written and synced at a time
	walFillMin   = 128 << 10
	walFillMax   = 2 << 20
)

// fillFS is the file system the store writes on: fs, with each
// write-ahead log it creates or reuses kept filled with zeros ahead of
// Pebble's appends.
type fillFS struct {
	vfs.FS
}

func (fs fillFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return newFillFile(f, 0), nil
}

func (fs fillFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err != nil || !strings.HasSuffix(newname, ".log") {
		return f, err
	}
	// A reused log is overwritten from its start: what it holds is
	// already there to overwrite.
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	return newFillFile(f, size), nil
}

func (fs fillFS) Unwrap() vfs.FS { return fs.FS }

// fillFile is a write-ahead log file that a goroutine keeps filled with
// synced zeros ahead of Pebble's writes. Pebble writes a log from one
// goroutine, in order, with Write; the filler writes with WriteAt only
// past everything Pebble has written, a piece at a time, and a Write that
// would reach the piece being filled waits for it. The pieces are small
// and each is synced alone, so that a commit's fsync that comes while one
// is written carries little of it.
type fillFile struct {
	vfs.File

	mu       sync.Mutex
	cond     sync.Cond
	off      int64 // where Pebble's next Write lands
	filled   int64 // the file holds synced bytes up to here
	fillFrom int64 // the piece being filled starts here; meaningful while filling
	filling  bool
	stopped  bool // a fill failed, or the file is closing: Pebble appends as it would alone
	// err is a sync of the filler's that failed. The kernel reports a
	// failed writeback once to each open file, and the filler shares
	// Pebble's: the failure may have dropped Pebble's pages too, and
	// Pebble's own next sync would succeed without them. So Pebble's next
	// write or sync fails with it, and the log stops as after any failed
	// sync of its WAL. syncMu keeps the filler's syncs and Pebble's apart,
	// so that the report goes to one of them and is never lost between.
	err    error
	syncMu sync.Mutex
	zeros  []byte // the filler's, kept for its next start
}

func newFillFile(f vfs.File, filled int64) *fillFile {
	ff := &fillFile{File: f, filled: filled}
	ff.cond.L = &ff.mu
	ff.mu.Lock()
	ff.maybeFillLocked()
	ff.mu.Unlock()
	return ff
}

// ahead is how far past Pebble's writes the filler keeps the file filled:
// as far as Pebble has written, within walFillMin and walFillMax, so that
// a small log costs little.
func (f *fillFile) ahead() int64 { return min(max(f.off, walFillMin), walFillMax) }

func (f *fillFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	end := f.off + int64(len(p))
	for f.filling && end > f.fillFrom {
		f.cond.Wait()
	}
	if f.err != nil {
		defer f.mu.Unlock()
		return 0, f.err
	}
	f.off = end
	f.maybeFillLocked()
	f.mu.Unlock()
	return f.File.Write(p)
}

// WriteAt is not how Pebble writes a WAL (it appends with Write, from one
// goroutine); should a later Pebble write one at offsets, the filler stops
// first, so that its zeros never land on what Pebble wrote.
func (f *fillFile) WriteAt(p []byte, off int64) (int, error) {
	f.stop()
	return f.File.WriteAt(p, off)
}

// stop stops the filler for good and waits for the piece it is writing.
func (f *fillFile) stop() {
	f.mu.Lock()
	f.stopped = true
	for f.filling {
		f.cond.Wait()
	}
	f.mu.Unlock()
}

func (f *fillFile) maybeFillLocked() {
	if f.filling || f.stopped || f.filled >= f.off+f.ahead() {
		return
	}
	f.filling = true
	f.fillFrom = max(f.filled, f.off)
	go f.fill()
}

// fill runs while filling is set; the filler starts again after each of
// Pebble's writes that leaves less than ahead filled, so its piece of
// zeros is kept rather than made anew each time.
func (f *fillFile) fill() {
	if f.zeros == nil {
		f.zeros = make([]byte, walFillPiece)
	}
	zeros := f.zeros
	f.mu.Lock()
	defer f.mu.Unlock()
	for !f.stopped && f.filled < f.off+f.ahead() {
		from := max(f.filled, f.off)
		f.fillFrom = from
		f.mu.Unlock()
		_, werr := f.File.WriteAt(zeros, from)
		var serr error
		if werr == nil {
			f.syncMu.Lock()
			serr = f.File.SyncData()
			if serr != nil {
				f.mu.Lock()
				f.err = fmt.Errorf("eventlog: fdatasync of the zeros ahead of the write-ahead log: %w", serr)
				f.mu.Unlock()
			}
			f.syncMu.Unlock()
		}
		f.mu.Lock()
		if werr != nil || serr != nil {
			// The filler stops. After a failed sync Pebble hears of it
			// through err; after a failed write its own writes will meet
			// the same disk and report what is wrong, and without zeros
			// ahead they are only slower.
			f.stopped = true
			break
		}
		f.filled = from + walFillPiece
		f.cond.Broadcast()
	}
	f.filling = false
	f.cond.Broadcast()
}

func (f *fillFile) Sync() error { return f.pebbleSync(f.File.Sync) }

func (f *fillFile) SyncData() error { return f.pebbleSync(f.File.SyncData) }

func (f *fillFile) SyncTo(length int64) (full bool, err error) {
	err = f.pebbleSync(func() error {
		var err error
		full, err = f.File.SyncTo(length)
		return err
	})
	return full, err
}

// pebbleSync runs one of Pebble's syncs apart from the filler's, or fails
// with the filler's failed sync (see err).
func (f *fillFile) pebbleSync(sync func() error) error {
	f.syncMu.Lock()
	defer f.syncMu.Unlock()
	f.mu.Lock()
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return sync()
}

func (f *fillFile) Close() error {
	f.stop()
	return f.File.Close()
}
