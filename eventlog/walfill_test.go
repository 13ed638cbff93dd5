package eventlog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// envFillDir makes TestWALFilledChild run: where it writes its log;
// envFillMode is how (see TestWALFilledAhead).
const (
	envFillDir  = "COAGENT_FILL_DIR"
	envFillMode = "COAGENT_FILL_MODE"
)

// TestWALFilledAhead: a synced log writes zeros ahead of Pebble's appends
// to its write-ahead logs, new and reused, and a store whose process was
// killed mid-append (TestWALFilledChild, SIGKILL), its newest WAL ending
// in zeros rather than in Pebble's trailer, opens with every event it
// acknowledged, in order. A filler that wrote over what Pebble had
// written, or a tail of zeros Pebble took for damage, fails it. It runs
// with the filler ahead of the appends, as it is; with each piece the
// filler writes delayed, so that the appends catch up with it and wait
// (without that wait the filler's zeros land on what Pebble wrote, and
// the reopened log has lost events); and with small memtables, so that
// the WAL rotates and Pebble reuses the older files.
func TestWALFilledAhead(t *testing.T) {
	for _, mode := range []string{"ahead", "behind", "reused"} {
		t.Run(mode, func(t *testing.T) { testWALFilled(t, mode) })
	}
}

func testWALFilled(t *testing.T, mode string) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWALFilledChild$", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), envFillDir+"="+dir, envFillMode+"="+mode)
	wantReused := uint64(0)
	if mode == "reused" {
		wantReused = 3
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked, reused uint64
	lines := bufio.NewScanner(out)
	for lines.Scan() && (acked < 5000 || reused < wantReused) {
		if _, err := fmt.Sscanf(lines.Text(), "acked %d reused %d", &acked, &reused); err != nil {
			t.Fatalf("child: %q: %v", lines.Text(), err)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if acked < 5000 || reused < wantReused {
		t.Fatalf("the child stopped at %d events acknowledged, %d WALs reused: %v", acked, reused, lines.Err())
	}

	data, err := os.ReadFile(filepath.Join(dir, last(files(t, dir, ".log"))))
	if err != nil {
		t.Fatal(err)
	}
	// Only a filler ahead is sure to be ahead when the kill comes: one
	// behind may have Pebble's appends waiting at the end of what it
	// filled, and a reused file ends in its old records.
	if n := writtenLen(data); mode == "ahead" && (int64(len(data)) < walFillMin || len(data)-n < 1<<10) {
		t.Errorf("the newest WAL is %d bytes, %d of them Pebble's: want zeros ahead of what Pebble wrote", len(data), n)
	}
	l, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	last := l.LastSeq()
	if last < acked {
		t.Errorf("the log ends at %d, but %d were acknowledged", last, acked)
	}
	var seen []uint64
	if err := l.Scan(1, 0, func(ev *intents.Event) error { seen = append(seen, ev.Seq); return nil }); err != nil {
		t.Fatalf("scan: %v", err)
	}
	if !slices.Equal(seen, seqs(1, last)) {
		t.Errorf("scanned %d events, want 1..%d in order", len(seen), last)
	}
	t.Logf("killed after %d events acknowledged (%d WALs reused); reopened with %d", acked, reused, last)
}

// TestWALFilledChild appends to a synced log in runs of batches queued at
// once, as the coordinator's groups come, and prints each run it had
// acknowledged, until it is killed.
func TestWALFilledChild(t *testing.T) {
	dir := os.Getenv(envFillDir)
	if dir == "" {
		t.Skip("run by TestWALFilledAhead")
	}
	var reused atomic.Uint64
	po := &pebble.Options{EventListener: &pebble.EventListener{
		WALCreated: func(info pebble.WALCreateInfo) {
			if info.RecycledFileNum != 0 {
				reused.Add(1)
			}
		},
	}}
	switch os.Getenv(envFillMode) {
	case "reused":
		po.MemTableSize = 256 << 10
	case "behind":
		// Only the filler writes a WAL with WriteAt.
		po.FS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind == errorfs.OpFileWriteAt && strings.HasSuffix(op.Path, ".log") {
				time.Sleep(10 * time.Millisecond)
			}
			return nil
		}))
	}
	l, err := Open(dir, &Options{Pebble: po})
	if err != nil {
		t.Fatal(err)
	}
	g := &gen{rng: rand.New(rand.NewPCG(7, 7))}
	ctx := context.Background()
	for {
		var run []*Pending
		for range 20 {
			p, err := l.Enqueue(g.batch(8))
			if err != nil {
				t.Fatal(err)
			}
			run = append(run, p)
		}
		for _, p := range run {
			if err := p.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		fmt.Printf("acked %d reused %d\n", g.seq, reused.Load())
	}
}

// writtenLen is the length of data up to its trailing zeros.
func writtenLen(data []byte) int {
	return len(bytes.TrimRight(data, "\x00"))
}

// TestWALFillSyncFails: a failed sync of the zeros is reported to Pebble's
// next write and sync of the WAL. The kernel reports a failed writeback
// once to the open file the filler shares with Pebble, and the pages it
// dropped may be Pebble's: were the filler to keep the error, Pebble's
// next sync would succeed without them.
func TestWALFillSyncFails(t *testing.T) {
	eio := errors.New("injected EIO")
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileSyncData {
			return eio
		}
		return nil
	}))
	f, err := fillFS{FS: fs}.Create(filepath.Join(t.TempDir(), "000001.log"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The filler starts at once, from the file's start, so the first
	// write waits for its first piece, whose sync fails.
	if _, err := f.Write([]byte("record")); !errors.Is(err, eio) {
		t.Errorf("write after the filler's sync failed: %v, want %v", err, eio)
	}
	if err := f.SyncData(); !errors.Is(err, eio) {
		t.Errorf("sync after the filler's sync failed: %v, want %v", err, eio)
	}
	if err := f.Sync(); !errors.Is(err, eio) {
		t.Errorf("full sync after the filler's sync failed: %v, want %v", err, eio)
	}
}

// TestWALFillStopsForWriteAt: a write at an offset (not how Pebble writes
// a WAL today) stops the filler before it lands, so no zeros follow it.
func TestWALFillStopsForWriteAt(t *testing.T) {
	f, err := fillFS{FS: vfs.Default}.Create(filepath.Join(t.TempDir(), "000001.log"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	record := bytes.Repeat([]byte{0xab}, 4<<10)
	at := int64(walFillPiece) // inside what the filler writes first
	if _, err := f.WriteAt(record, at); err != nil {
		t.Fatal(err)
	}
	ff := f.(*fillFile)
	ff.mu.Lock()
	filling, stopped := ff.filling, ff.stopped
	ff.mu.Unlock()
	if filling || !stopped {
		t.Fatalf("after a WriteAt: filling %v, stopped %v; want the filler stopped", filling, stopped)
	}
	got := make([]byte, len(record))
	if _, err := f.ReadAt(got, at); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, record) {
		t.Error("the record written at an offset was overwritten")
	}
}
