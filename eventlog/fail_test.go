package eventlog

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// failFS fails every write and sync of the WAL once broken is set, as a
// full or failing disk would.
type failFS struct {
	vfs.FS
	broken atomic.Bool
}

var errDisk = errors.New("injected disk failure")

type failFile struct {
	vfs.File
	fs *failFS
}

func (fs *failFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &failFile{File: f, fs: fs}, nil
}

func (fs *failFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *failFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	return fs.wrap(name, f, err)
}

func (f *failFile) Write(p []byte) (int, error) {
	if f.fs.broken.Load() {
		return 0, errDisk
	}
	return f.File.Write(p)
}

func (f *failFile) Sync() error {
	if f.fs.broken.Load() {
		return errDisk
	}
	return f.File.Sync()
}

func (f *failFile) SyncData() error { return f.Sync() }

// TestWriteFailure: once the disk fails, the batch being written and every
// later one fail, none is acknowledged, and the log reopened on a working
// disk ends at a batch it acknowledged, its queries matching a scan.
func TestWriteFailure(t *testing.T) {
	dir := t.TempDir()
	fs := &failFS{FS: vfs.Default}
	l, err := Open(dir, &Options{IndexEvery: 10, Pebble: &pebble.Options{FS: fs}})
	if err != nil {
		t.Fatal(err)
	}
	g := &gen{rng: rand.New(rand.NewPCG(9, 9))}
	var acked uint64
	for range 30 {
		b := g.batch(3)
		if err := l.Append(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		acked = b.Events[len(b.Events)-1].Seq
	}
	fs.broken.Store(true)
	var pending []*Pending
	for range 20 {
		p, err := l.Enqueue(g.batch(3))
		if err != nil {
			break // the log has closed itself
		}
		pending = append(pending, p)
	}
	if len(pending) == 0 {
		t.Fatal("no batch enqueued after the disk failed")
	}
	for i, p := range pending {
		if err := p.Wait(context.Background()); err == nil {
			t.Fatalf("batch %d after the disk failed was acknowledged", i)
		}
	}
	if _, err := l.Enqueue(g.batch(1)); err == nil {
		t.Fatal("an append after a failed write was accepted")
	}
	if err := l.Close(); !errors.Is(err, errDisk) {
		t.Fatalf("close after the disk failed: %v, want the failure", err)
	}

	l, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.LastSeq() != acked {
		t.Fatalf("the log ends at %d, the last acknowledged batch at %d", l.LastSeq(), acked)
	}
	var all []*intents.Event
	if err := l.Scan(1, 0, func(ev *intents.Event) error { all = append(all, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, l, all, 0)
}
