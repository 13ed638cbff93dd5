package eventlog

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/oklog/ulid/v2"
)

// The benchmarks of this file measure the log against raw Pebble in the
// same run (STYLE.md: figures are ratios against the raw baseline):
//
//	BenchmarkAppendSynced    vs BenchmarkRawPebbleSynced   synced appends, 1–64 writers
//	BenchmarkAppendUnsynced  vs BenchmarkAppendSynced      the same appends without fsyncs
//	BenchmarkScan1M/decode   vs BenchmarkScan1M/raw        reading 1,000,000 events back
//
// Synced runs also report the fsyncs they cost, counted by a vfs.FS wrapper
// under Pebble, so that group commit shows as events per fsync.

var benchWriterCounts = []int{1, 16, 64}

// benchLogger quiets raw Pebble as the log's own logger does.
type benchLogger struct{}

func (benchLogger) Infof(string, ...any)  {}
func (benchLogger) Errorf(string, ...any) {}
func (benchLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// benchSyncFS counts the fsyncs Pebble makes, and their time: of WAL files
// (*.log), which every synced commit waits on, and of everything else
// (sstables, manifests, directories), which it does not. It injects no
// fault, so it is written by hand rather than with vfs/errorfs: an errorfs
// Injector is called before each operation and never sees it end, so it
// could count the fsyncs but not time them.
type benchSyncFS struct {
	vfs.FS
	walSyncs, otherSyncs atomic.Int64
	walNanos             atomic.Int64
}

type benchSyncFile struct {
	vfs.File
	fs  *benchSyncFS
	wal bool
}

func newBenchSyncFS() *benchSyncFS { return &benchSyncFS{FS: vfs.Default} }

func (s *benchSyncFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	return &benchSyncFile{File: f, fs: s, wal: strings.HasSuffix(name, ".log")}, nil
}

func (s *benchSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := s.FS.Create(name, c)
	return s.wrap(name, f, err)
}

func (s *benchSyncFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := s.FS.ReuseForWrite(old, name, c)
	return s.wrap(name, f, err)
}

func (s *benchSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := s.FS.OpenReadWrite(name, c, opts...)
	return s.wrap(name, f, err)
}

func (s *benchSyncFS) OpenDir(name string) (vfs.File, error) {
	f, err := s.FS.OpenDir(name)
	return s.wrap(name, f, err)
}

func (f *benchSyncFile) count(sync func() error) error {
	if !f.wal {
		f.fs.otherSyncs.Add(1)
		return sync()
	}
	start := time.Now()
	err := sync()
	f.fs.walNanos.Add(int64(time.Since(start)))
	f.fs.walSyncs.Add(1)
	return err
}

func (f *benchSyncFile) Sync() error     { return f.count(f.File.Sync) }
func (f *benchSyncFile) SyncData() error { return f.count(f.File.SyncData) }

// reset zeroes the counters, at the start of the timed part.
func (s *benchSyncFS) reset() {
	s.walSyncs.Store(0)
	s.otherSyncs.Store(0)
	s.walNanos.Store(0)
}

// report adds the WAL fsyncs per op, the items (events or writes) per WAL
// fsync, and the mean WAL fsync time.
func (s *benchSyncFS) report(b *testing.B, items float64, unit string) {
	syncs := float64(s.walSyncs.Load())
	if syncs == 0 {
		return
	}
	b.ReportMetric(syncs/float64(b.N), "fsyncs/op")
	b.ReportMetric(items/syncs, unit+"/fsync")
	b.ReportMetric(float64(s.walNanos.Load())/syncs/1e3, "us/fsync")
}

// benchTriple builds what one apply intent leaves in the log, by hand, as
// the engine would emit it: the intent received (a small apply intent with
// one set), the change with its one write, and the applied decision; and
// the materialized entry of the path written. The seqs are left to the
// caller. writer and n make the ids unique across writers.
func benchTriple(writer, n int, now time.Time) ([]*intents.Event, Entry) {
	id := func(k uint64) ulid.ULID {
		var u ulid.ULID
		_ = u.SetTime(ulid.Timestamp(now))
		binary.BigEndian.PutUint64(u[8:], uint64(writer)<<40|uint64(n)<<2|k)
		return u
	}
	agent := "agent-" + strconv.Itoa(writer%100)
	intentID := id(0).String()
	path := "docs.d" + strconv.Itoa(n%500) + ".sections.s" + strconv.Itoa(n%7) + ".text"
	value := json.RawMessage(`"Paragraph ` + strconv.Itoa(n) + `: the quick brown fox jumps over the lazy dog."`)
	version := uint64(n/3500) + 1
	in := &intents.Intent{ID: intentID, Agent: agent, Kind: intents.KindApply, Action: "edit-section",
		Writes: []intents.Write{{Path: path, Op: intents.OpSet, Value: value}}}
	evs := []*intents.Event{
		{ID: id(1), Time: now, Type: intents.EventIntent, Agent: agent, Intent: intentID,
			Received: &intents.Received{Intent: in}},
		{ID: id(2), Time: now, Type: intents.EventChange, Agent: agent, Intent: intentID,
			Change: &intents.Change{Writes: []intents.Applied{{Path: path, Op: intents.OpSet, Value: value,
				OldVersion: version - 1, NewVersion: version}}}},
		{ID: id(3), Time: now, Type: intents.EventDecision, Agent: agent, Intent: intentID,
			Decision: &intents.Decision{Intent: intentID, Agent: agent, Outcome: intents.OutcomeApplied}},
	}
	return evs, Entry{Path: path, Kind: KindLeaf, Value: value, Version: version}
}

// numberTriple gives evs the seqs from first on; the decision's rev is the
// change's seq.
func numberTriple(evs []*intents.Event, e *Entry, first uint64) {
	for i, ev := range evs {
		ev.Seq = first + uint64(i)
	}
	evs[2].Decision.Rev = evs[1].Seq
	e.ModRev = evs[1].Seq
}

// BenchmarkAppendSynced measures synced appends from concurrent writers, as
// the coordinator makes them: each writer builds the 3 events of an apply
// intent, takes the next seqs and enqueues under a shared mutex (as the one
// goroutine that owns the engine would), releases it, and waits until the
// batch is durable. One op is one batch of 3 events; b.N batches are shared
// among the writers. Compare with BenchmarkRawPebbleSynced at the same
// writer count.
func BenchmarkAppendSynced(b *testing.B) { benchAppend(b, false) }

// BenchmarkAppendUnsynced is BenchmarkAppendSynced with no fsync at all: the
// throughput the writers, the committer and Pebble's memtable allow. Were
// the fsyncs what limits the synced appends, this would be far faster.
func BenchmarkAppendUnsynced(b *testing.B) { benchAppend(b, true) }

func benchAppend(b *testing.B, noSync bool) {
	for _, writers := range benchWriterCounts {
		b.Run("writers="+strconv.Itoa(writers), func(b *testing.B) {
			sfs := newBenchSyncFS()
			l, err := Open(b.TempDir(), &Options{NoSync: noSync, Pebble: &pebble.Options{FS: sfs}})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			var (
				mu    sync.Mutex
				next  = l.LastSeq() + 1
				taken atomic.Int64
				wg    sync.WaitGroup
				errs  = make(chan error, writers)
			)
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			walBefore := l.db.Metrics().WAL.BytesIn
			sfs.reset()
			b.ResetTimer()
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; taken.Add(1) <= int64(b.N); n++ {
						evs, entry := benchTriple(w, n, start.Add(time.Duration(n)*time.Millisecond))
						mu.Lock()
						numberTriple(evs, &entry, next)
						p, err := l.Enqueue(&Batch{Events: evs, State: []Entry{entry}})
						if err == nil {
							next += uint64(len(evs))
						}
						mu.Unlock()
						if err == nil {
							err = p.Wait(context.Background())
						}
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			if got, want := l.LastSeq(), uint64(3*b.N); got != want {
				b.Fatalf("LastSeq %d, want %d", got, want)
			}
			events := float64(3 * b.N)
			b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
			b.ReportMetric(float64(l.db.Metrics().WAL.BytesIn-walBefore)/float64(b.N), "walB/op")
			sfs.report(b, events, "events")
		})
	}
}

// BenchmarkRawPebbleSynced is the floor of BenchmarkAppendSynced: each
// writer sets one ~300-byte value with pebble.Sync into a bare Pebble store,
// which groups concurrent syncs itself. One op is one write; b.N writes are
// shared among the writers.
func BenchmarkRawPebbleSynced(b *testing.B) {
	value := make([]byte, 300)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	for _, writers := range benchWriterCounts {
		b.Run("writers="+strconv.Itoa(writers), func(b *testing.B) {
			sfs := newBenchSyncFS()
			db, err := pebble.Open(b.TempDir(), &pebble.Options{Logger: benchLogger{}, FS: sfs})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			var (
				taken atomic.Int64
				wg    sync.WaitGroup
				errs  = make(chan error, writers)
			)
			walBefore := db.Metrics().WAL.BytesIn
			sfs.reset()
			b.ResetTimer()
			for range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						n := taken.Add(1)
						if n > int64(b.N) {
							return
						}
						if err := db.Set(eventKey(uint64(n)), value, pebble.Sync); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
			b.ReportMetric(float64(db.Metrics().WAL.BytesIn-walBefore)/float64(b.N), "walB/op")
			sfs.report(b, float64(b.N), "writes")
		})
	}
}

// envSpin makes TestSpinChild spin: BenchmarkSyncUnderLoad's load.
const envSpin = "COAGENT_BENCH_SPIN"

// TestSpinChild keeps one CPU busy until it is killed.
func TestSpinChild(t *testing.T) {
	if os.Getenv(envSpin) == "" {
		t.Skip("run by BenchmarkSyncUnderLoad")
	}
	for {
	}
}

// BenchmarkSyncUnderLoad measures what every synced append waits for: a
// write of 1 KB (a lone writer's batch) or 22 KB (a group of 64 writers'
// batches) and its fdatasync, as Pebble's WAL makes them, with the CPUs
// idle and with each CPU kept busy by another process; appended to a
// preallocated file (Pebble's new WAL), and overwriting one whose bytes
// are already written and synced (a WAL the log has filled with zeros
// ahead of its appends, or a reused one: see walfill.go). On the 2-core CI
// machines a sync takes several times as long when the CPUs are busy,
// which is what group commit runs into at 64 writers: their own work keeps
// the CPUs busy. One op is one write and sync.
func BenchmarkSyncUnderLoad(b *testing.B) {
	const fileSize = 64 << 20
	for _, load := range []string{"idle", "busy"} {
		for _, file := range []string{"appended", "overwritten"} {
			for _, size := range []int{1 << 10, 22 << 10} {
				b.Run(fmt.Sprintf("cpus=%s/file=%s/size=%dKB", load, file, size>>10), func(b *testing.B) {
					f := syncBenchFile(b, fileSize, file == "overwritten")
					buf := make([]byte, size)
					if load == "busy" {
						for range runtime.NumCPU() {
							cmd := exec.Command(os.Args[0], "-test.run=^TestSpinChild$", "-test.timeout=10m")
							cmd.Env = append(os.Environ(), envSpin+"=1")
							if err := cmd.Start(); err != nil {
								b.Fatal(err)
							}
							defer func() {
								_ = cmd.Process.Kill()
								_ = cmd.Wait()
							}()
						}
					}
					var off int64
					for b.Loop() {
						if file == "overwritten" && off+int64(size) > fileSize {
							off = 0 // around again: still an overwrite
						}
						if _, err := f.WriteAt(buf, off); err != nil {
							b.Fatal(err)
						}
						off += int64(size)
						if err := f.SyncData(); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/sync")
				})
			}
		}
	}
}

// syncBenchFile creates a file of size bytes preallocated, as Pebble's WAL
// is, and with overwritten set written with zeros and synced, as the log's
// filler keeps it; it is closed when b ends.
func syncBenchFile(b *testing.B, size int64, overwritten bool) vfs.File {
	f, err := vfs.Default.Create(filepath.Join(b.TempDir(), "wal"), vfs.WriteCategoryUnspecified)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	if err := f.Preallocate(0, size); err != nil {
		b.Fatal(err)
	}
	if overwritten {
		zeros := make([]byte, 1<<20)
		for off := int64(0); off < size; off += int64(len(zeros)) {
			if _, err := f.WriteAt(zeros, off); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.SyncData(); err != nil {
			b.Fatal(err)
		}
	}
	return f
}

// BenchmarkOverlappedSyncs writes and fdatasyncs 1 KB pieces of one
// overwritten file from 1, 2 and 4 goroutines at once, each piece its own:
// how far syncs in flight together overlap on this disk. Pebble syncs its
// WAL from one goroutine; docs/performance.md says what a log that let
// two syncs run at once made of it.
func BenchmarkOverlappedSyncs(b *testing.B) {
	const fileSize, piece = 64 << 20, 1 << 10
	for _, syncers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("syncers=%d", syncers), func(b *testing.B) {
			f := syncBenchFile(b, fileSize, true)
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, syncers)
			buf := make([]byte, piece)
			b.ResetTimer()
			for range syncers {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						if _, err := f.WriteAt(buf, (i*piece)%fileSize); err != nil {
							errs <- err
							return
						}
						if err := f.SyncData(); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/secs, "syncs/s")
			b.ReportMetric(secs*1e6*float64(syncers)/float64(b.N), "us/sync")
		})
	}
}

// benchBuildLog appends total events — apply intents' triples with their
// state entries — to a new unsynced log in dir, in batches of about
// batchEvents events, and closes it.
func benchBuildLog(tb testing.TB, dir string, total, batchEvents int) {
	tb.Helper()
	l, err := Open(dir, &Options{NoSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var prev *Pending
	seq, n := uint64(1), 0
	for int(seq) <= total {
		b := &Batch{}
		for len(b.Events) < batchEvents && int(seq) <= total {
			evs, entry := benchTriple(n%64, n, start.Add(time.Duration(n)*time.Millisecond))
			if left := total - int(seq) + 1; left < len(evs) {
				evs = evs[:left] // the last batch may end mid-triple
			}
			for i, ev := range evs {
				ev.Seq = seq + uint64(i)
			}
			if len(evs) == 3 {
				evs[2].Decision.Rev = evs[1].Seq
			}
			if len(evs) >= 2 {
				entry.ModRev = evs[1].Seq
				b.State = append(b.State, entry)
			}
			b.Events = append(b.Events, evs...)
			seq += uint64(len(evs))
			n++
		}
		p, err := l.Enqueue(b)
		if err != nil {
			tb.Fatal(err)
		}
		// Encode the next batch while this one commits, but keep at most
		// two in flight.
		if prev != nil {
			if err := prev.Wait(context.Background()); err != nil {
				tb.Fatal(err)
			}
		}
		prev = p
	}
	if err := prev.Wait(context.Background()); err != nil {
		tb.Fatal(err)
	}
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
}

// benchDirSize returns the bytes of the files under dir.
func benchDirSize(dir string) int64 {
	var size int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				size += info.Size()
			}
		}
		return nil
	})
	return size
}

// BenchmarkScan1M measures reading a log of 1,000,000 events back: raw is
// Pebble's iteration over the records (ScanRaw, the floor); decode is Scan,
// which decodes every event. One op is one pass over all the events. The
// log is built once per run of the parent benchmark (unsynced, in batches
// of 1,000 events; about 30s, logged), closed and reopened before the
// passes, so -count N builds it N times: prefer -benchtime Nx.
func BenchmarkScan1M(b *testing.B) {
	const total = 1_000_000
	dir := b.TempDir()
	start := time.Now()
	benchBuildLog(b, dir, total, 1000)
	built := time.Since(start)
	l, err := Open(dir, &Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	// A parent benchmark's log is shown only with -v: the first
	// sub-benchmark run shows it.
	setup := fmt.Sprintf("built %d events in %s (%.0f events/s), %d MB on disk; reopened in %s",
		total, built.Round(time.Millisecond), total/built.Seconds(), benchDirSize(dir)>>20,
		(time.Since(start) - built).Round(time.Millisecond))
	logSetup := func(b *testing.B) {
		if setup != "" {
			b.Log(setup)
			setup = ""
		}
	}
	if l.LastSeq() != total {
		b.Fatalf("LastSeq %d, want %d", l.LastSeq(), total)
	}

	b.Run("raw", func(b *testing.B) {
		logSetup(b)
		var bytes int
		for b.Loop() {
			n := 0
			bytes = 0
			err := l.ScanRaw(1, func(seq uint64, rec []byte) error {
				n++
				bytes += len(rec)
				return nil
			})
			if err != nil || n != total {
				b.Fatalf("scanned %d events: %v", n, err)
			}
		}
		b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(bytes)/total, "B/event")
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			err := l.Scan(1, 0, func(*intents.Event) error {
				n++
				return nil
			})
			if err != nil || n != total {
				b.Fatalf("scanned %d events: %v", n, err)
			}
		}
		b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}
