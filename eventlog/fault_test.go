package eventlog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/atomicfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// tableWritesFail fails, while on, every write to a table (.sst) with
// ENOSPC: a disk that has room for appends to the WAL it preallocated, but
// not for the tables a flush writes.
func tableWritesFail() *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt) && strings.HasSuffix(op.Path, ".sst") {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	})}
}

// awaitOpen runs Open and returns its result, failing the test if it has
// not returned within a bound no healthy Open comes near.
func awaitOpen(t *testing.T, dir string, opts *Options) (*Log, error) {
	t.Helper()
	type opened struct {
		l   *Log
		err error
	}
	done := make(chan opened, 1)
	go func() {
		l, err := Open(dir, opts)
		done <- opened{l, err}
	}()
	select {
	case o := <-done:
		return o.l, o.err
	case <-time.After(30 * time.Second):
		t.Fatal("Open has not returned in 30s")
		return nil, nil
	}
}

// eventually retries f until it succeeds or 10s pass.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOpenDiskFull: Open recovers the WAL into a table, and with no room
// for the table it fails at once with a *DiskFullError naming the
// directory, where Pebble alone retries the flush for ever and Open never
// returns. Once there is room, the store it gave up on finishes recovering
// in the background and lets go of its lock, and the log opens with every
// event.
func TestOpenDiskFull(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, dir)
	g := &gen{rng: rand.New(rand.NewPCG(3, 3))}
	for range 20 {
		if err := l.Append(context.Background(), g.batch(5)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	full := tableWritesFail()
	full.On()
	fs := errorfs.Wrap(vfs.Default, full)
	opts := &Options{retryPause: time.Millisecond, Pebble: &pebble.Options{FS: fs}}
	l, err := awaitOpen(t, dir, opts)
	var de *DiskFullError
	if !errors.As(err, &de) || de.Dir != dir || !errors.Is(err, ErrDiskFull) || !errors.Is(err, syscall.ENOSPC) ||
		!strings.Contains(err.Error(), "the disk of "+dir+" is full") || !strings.Contains(err.Error(), "recover its write-ahead log") {
		if l != nil {
			l.Close()
		}
		t.Fatalf("Open on a full disk: %v, want a DiskFullError naming %s", err, dir)
	}

	full.Off()
	eventually(t, "Open once there is room", func() error {
		l, err = Open(dir, opts)
		return err
	})
	defer l.Close()
	n := 0
	if err := l.Scan(1, 0, func(*intents.Event) error { n++; return nil }); err != nil || l.LastSeq() != g.seq || n != int(g.seq) {
		t.Fatalf("after the disk full: last %d, %d events read (%v), want %d", l.LastSeq(), n, err, g.seq)
	}
}

// TestOpenDiskFullCreate: no room to create the WAL Open starts is a
// *DiskFullError too.
func TestOpenDiskFullCreate(t *testing.T) {
	dir := t.TempDir()
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".log") {
			return &os.PathError{Op: "open", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	}))
	l, err := awaitOpen(t, dir, &Options{Pebble: &pebble.Options{FS: fs}})
	var de *DiskFullError
	if !errors.As(err, &de) || de.Dir != dir {
		if l != nil {
			l.Close()
		}
		t.Fatalf("Open with no room for its WAL: %v", err)
	}
}

// TestDiskFullRunning: a flush that finds the disk full closes the log to
// appends, with the DiskFullError, rather than let Pebble retry it at once
// for ever while appends go on until its memtables stall them; what was
// acknowledged is there after a restart.
func TestDiskFullRunning(t *testing.T) {
	dir := t.TempDir()
	full := tableWritesFail()
	opts := &Options{retryPause: time.Millisecond, Pebble: &pebble.Options{FS: errorfs.Wrap(vfs.Default, full)}}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	g := &gen{rng: rand.New(rand.NewPCG(4, 4))}
	acked := uint64(0)
	appendOne := func() error {
		b := g.batch(3)
		err := l.Append(context.Background(), b)
		if err == nil {
			acked = b.Events[len(b.Events)-1].Seq
		} else {
			g.seq = acked // the batch is not in the log
		}
		return err
	}
	for range 10 {
		if err := appendOne(); err != nil {
			t.Fatal(err)
		}
	}
	full.On()
	if _, err := l.db.AsyncFlush(); err != nil {
		t.Fatal(err)
	}
	var failed error
	eventually(t, "appends after the flush found the disk full", func() error {
		if failed = appendOne(); failed == nil {
			return errors.New("still appending")
		}
		return nil
	})
	var de *DiskFullError
	if !errors.Is(failed, ErrClosed) || !errors.As(failed, &de) || de.Dir != dir {
		t.Fatalf("append on a full disk: %v, want ErrClosed with a DiskFullError", failed)
	}
	full.Off()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTest(t, dir)
	defer l.Close()
	if l.LastSeq() != acked {
		t.Fatalf("reopened at %d, the last batch acknowledged was %d", l.LastSeq(), acked)
	}
}

// envCorruptDir makes TestCorruptStoreChild run: where it writes its logs.
const envCorruptDir = "COAGENT_CORRUPT_DIR"

// TestCorruptStore runs TestCorruptStoreChild in a child process: before
// the log handled Pebble's corruption reports, a damaged table ended the
// process with a panic in a Pebble goroutine, which no recover in the test
// could catch.
func TestCorruptStore(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCorruptStoreChild$", "-test.v", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), envCorruptDir+"="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestCorruptStoreChild") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestCorruptStoreChild writes a log whose events are in a table, in an
// older write-ahead log and in the newest one; then, in a copy each, damages
// one of them, or the MANIFEST, and checks that every read that meets the
// damage fails with a *CorruptError naming the file, and that none panics.
func TestCorruptStoreChild(t *testing.T) {
	root := os.Getenv(envCorruptDir)
	if root == "" {
		t.Skip("run by TestCorruptStore")
	}
	orig := filepath.Join(root, "orig")
	l, err := Open(orig, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := &gen{rng: rand.New(rand.NewPCG(6, 6))}
	appendN := func(batches int) {
		for range batches {
			if err := l.Append(context.Background(), g.batch(10)); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendN(300)
	if err := l.flushIndex(); err != nil {
		t.Fatal(err)
	}
	if err := l.db.Flush(); err != nil { // the first 3000 events into a table
		t.Fatal(err)
	}
	inTable := g.seq
	// Then enough for the memtables to rotate (256 KB, 512 KB, 1 MB...) so
	// that older WALs are kept beside the newest.
	for len(files(t, orig, ".log")) < 3 || walWritten(t, filepath.Join(orig, last(files(t, orig, ".log")))) < 1<<20 {
		appendN(100)
	}
	total := g.seq
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	tables, wals := files(t, orig, ".sst"), files(t, orig, ".log")
	t.Logf("events 1..%d in %v, %d..%d in %v", inTable, tables, inTable+1, total, wals)

	// damaged copies orig, flips bytes of file at frac of its length, and
	// returns the copy and the file's path in it.
	n := 0
	damaged := func(file string, frac float64) (string, string) {
		n++
		dir := filepath.Join(root, fmt.Sprint("copy", n))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range files(t, orig, "") {
			if err := vfs.Copy(vfs.Default, filepath.Join(orig, name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(dir, file)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		n := len(data)
		if strings.HasSuffix(file, ".log") {
			n = writtenLen(data) // the zeros ahead of a WAL's end are not its records
		}
		at := int(float64(n) * frac)
		for i := at; i < min(at+8, len(data)); i++ {
			data[i] ^= 0x5a
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir, path
	}
	wantCorrupt := func(what string, err error, file string) *CorruptError {
		t.Helper()
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.File != file || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: %v, want a CorruptError naming %s", what, err, file)
			return nil
		}
		return ce
	}

	t.Run("table", func(t *testing.T) {
		met := false // some copy's events were damaged, not only its other keys
		for _, frac := range []float64{0.2, 0.4, 0.5, 0.6, 0.8} {
			where := fmt.Sprintf("damage at %.0f%%", 100*frac)
			dir, path := damaged(tables[0], frac)
			// Open recovers the WALs into a table, and a compaction of it
			// with the damaged one may follow while Open runs: then Open
			// fails; if not, the compaction closes the log soon after.
			l, err := Open(dir, nil)
			if err != nil {
				wantCorrupt("open, "+where, err, path)
			} else {
				wantCorrupt("check, "+where, l.Check(), path)
				l.Close()
			}
			// Without compactions, the reads meet the damage.
			dir, path = damaged(tables[0], frac)
			l, err = Open(dir, &Options{Pebble: &pebble.Options{DisableAutomaticCompactions: true}})
			if err != nil {
				wantCorrupt("open without compactions, "+where, err, path)
				continue
			}
			wantCorrupt("check, "+where, l.Check(), path)
			var seen []uint64
			err = l.Scan(1, 0, func(ev *intents.Event) error { seen = append(seen, ev.Seq); return nil })
			if err != nil {
				met = true
				if ce := wantCorrupt("scan, "+where, err, path); ce != nil {
					if ce.Seq == 0 || ce.Seq > inTable || !slices.Equal(seen, seqs(1, ce.Seq-1)) {
						t.Errorf("scan, %s: stopped at %d after %d events: %v", where, ce.Seq, len(seen), err)
					}
					_, err := l.Event(ce.Seq)
					wantCorrupt("event, "+where, err, path)
					_, _, err = l.Query(Query{Limit: int(total)})
					wantCorrupt("query, "+where, err, path)
				}
			}
			// Damage met closes the log to appends.
			b := &Batch{Events: []*intents.Event{{Seq: total + 1, Type: intents.EventNotice, Notice: &intents.Notice{Kind: intents.NoticeWaiting}}}}
			if _, err := l.Enqueue(b); !errors.Is(err, ErrClosed) {
				t.Errorf("append after the damage was met, %s: %v, want ErrClosed", where, err)
			} else {
				wantCorrupt("append, "+where, err, path)
			}
			l.Close()
		}
		if !met {
			t.Error("no damage met the events")
		}
	})

	// The WAL before the newest (an older one still may be kept, unread,
	// for Pebble to reuse).
	t.Run("older WAL", func(t *testing.T) {
		dir, path := damaged(wals[len(wals)-2], 0.5)
		l, err := Open(dir, nil)
		if ce := wantCorrupt("open", err, path); ce != nil && (ce.Seq <= inTable || ce.Seq > total) {
			t.Errorf("the damage is from event %d, want one of %d..%d: %v", ce.Seq, inTable+1, total, err)
		}
		if l != nil {
			l.Close()
		}
	})

	// Without WAL chunks that say how far the log was synced (the store's
	// format), damage in the newest WAL reads as its torn end after a crash,
	// and Open cuts the log there without a word.
	t.Run("newest WAL", func(t *testing.T) {
		dir, path := damaged(last(wals), 0.3)
		l, err := Open(dir, nil)
		wantCorrupt("open", err, path)
		if l != nil {
			t.Logf("opened, ending at %d of %d", l.LastSeq(), total)
			l.Close()
		}
	})

	// Pebble reads its MANIFEST to the first damaged record and opens with
	// what it read, deleting the tables the later records added.
	t.Run("MANIFEST", func(t *testing.T) {
		name, err := atomicfs.ReadMarker(vfs.Default, orig, "manifest")
		if err != nil {
			t.Fatal(err)
		}
		// A damaged first record, good ones after it: the MANIFEST is named.
		dir, path := damaged(name, 0.1)
		l, err := Open(dir, nil)
		wantCorrupt("open, damage in the first record", err, path)
		if l != nil {
			l.Close()
		}
		// A damaged last record reads as a crash's tear, but the log then
		// starts after the events of the tables the record added.
		dir, _ = damaged(name, 0.95)
		l, err = Open(dir, nil)
		if ce := wantCorrupt("open, damage in the last record", err, dir); ce != nil && !strings.Contains(err.Error(), ", not 1: the store has lost the tables") {
			t.Errorf("open, damage in the last record: %v", err)
		}
		if l != nil {
			l.Close()
		}
	})
}

func seqs(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// files returns the names in dir ending with suffix, sorted.
func files(t *testing.T, dir, suffix string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) && !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// walWritten is the length of the WAL at path up to its trailing zeros.
func walWritten(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return writtenLen(data)
}
