package robustness

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// lossyFS notes, beside each write-ahead log, how much of it the last
// fsync that returned made durable (a file NAME.synced). cutToSynced, run
// before the next process opens the store, cuts each log there: a SIGKILL
// then loses what a power cut would, everything not yet fsynced, where a
// plain SIGKILL loses only what was not yet written (the page cache keeps
// the rest, fsynced or not). Pebble syncs its other files before it
// relies on them, so they are left as they are.
type lossyFS struct {
	vfs.FS
}

func (fs lossyFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &lossyFile{File: f, name: name}, writeSynced(name, 0)
}

func (fs lossyFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	_ = os.Remove(old + syncedSuffix)
	return &lossyFile{File: f, name: name}, writeSynced(name, 0)
}

const syncedSuffix = ".synced"

// writeSynced notes n as name's durable length, replacing the note in one
// rename, so that a kill never leaves half a note.
func writeSynced(name string, n int64) error {
	tmp := name + syncedSuffix + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(n, 10)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name+syncedSuffix)
}

// lossyFile counts what is written to it and notes it once synced. Two
// goroutines sync a WAL (Pebble, and the event log's filler writing zeros
// ahead of it with WriteAt, which the count leaves out), so the notes are
// made one at a time, and a sync that began before another only notes
// what it made durable if that is more.
type lossyFile struct {
	vfs.File
	name    string
	mu      sync.Mutex
	written int64
	noteMu  sync.Mutex
	noted   int64
}

func (f *lossyFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.mu.Lock()
	f.written += int64(n)
	f.mu.Unlock()
	return n, err
}

// synced notes, after a sync that returned, what was written before it
// began.
func (f *lossyFile) synced(before int64, err error) error {
	if err != nil {
		return err
	}
	f.noteMu.Lock()
	defer f.noteMu.Unlock()
	if before <= f.noted {
		return nil
	}
	f.noted = before
	return writeSynced(f.name, before)
}

func (f *lossyFile) size() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.written
}

func (f *lossyFile) Sync() error {
	n := f.size()
	return f.synced(n, f.File.Sync())
}

func (f *lossyFile) SyncData() error {
	n := f.size()
	return f.synced(n, f.File.SyncData())
}

func (f *lossyFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	if err == nil && full {
		err = f.synced(min(length, f.size()), nil)
	}
	return full, err
}

// cutToSynced cuts every write-ahead log under dir to what its last sync
// made durable, as a power cut would have left it.
func cutToSynced(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return err
		}
		data, err := os.ReadFile(path + syncedSuffix)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // a log from before the lossy file system: all synced
		}
		if err != nil {
			return err
		}
		n, err := strconv.ParseInt(string(data), 10, 64)
		if err != nil {
			return err
		}
		return os.Truncate(path, n)
	})
}

// failingFS is a disk that dies, or fills: once failed is set (the faults
// disk-error and disk-full), every write, sync and file creation fails
// with err (EIO, ENOSPC); with oneIn set (disk-flaky), one in oneIn of
// them, at random, and the others succeed.
type failingFS struct {
	vfs.FS
	failed *atomic.Bool
	oneIn  int
	err    error
}

// fails reports whether the next write, sync or creation fails.
func fails(failed *atomic.Bool, oneIn int) bool {
	return failed.Load() && (oneIn <= 1 || rand.IntN(oneIn) == 0)
}

func (d failingFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if fails(d.failed, d.oneIn) {
		return nil, d.err
	}
	f, err := d.FS.Create(name, c)
	if err != nil {
		return f, err
	}
	return &failingFile{File: f, failed: d.failed, oneIn: d.oneIn, err: d.err}, nil
}

func (d failingFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if fails(d.failed, d.oneIn) {
		return nil, d.err
	}
	f, err := d.FS.ReuseForWrite(old, name, c)
	if err != nil {
		return f, err
	}
	return &failingFile{File: f, failed: d.failed, oneIn: d.oneIn, err: d.err}, nil
}

// failingFile is a file of a failingFS.
type failingFile struct {
	vfs.File
	failed *atomic.Bool
	oneIn  int
	err    error
}

func (f *failingFile) Write(p []byte) (int, error) {
	if fails(f.failed, f.oneIn) {
		return 0, f.err
	}
	return f.File.Write(p)
}

func (f *failingFile) WriteAt(p []byte, off int64) (int, error) {
	if fails(f.failed, f.oneIn) {
		return 0, f.err
	}
	return f.File.WriteAt(p, off)
}

func (f *failingFile) Sync() error {
	if fails(f.failed, f.oneIn) {
		return f.err
	}
	return f.File.Sync()
}

func (f *failingFile) SyncData() error {
	if fails(f.failed, f.oneIn) {
		return f.err
	}
	return f.File.SyncData()
}

func (f *failingFile) SyncTo(length int64) (bool, error) {
	if fails(f.failed, f.oneIn) {
		return false, f.err
	}
	return f.File.SyncTo(length)
}
