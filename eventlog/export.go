package eventlog

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2"
)

// An export is a copy of a log as of one moment, compacted to its latest
// snapshot: what a coordinator that joins a cluster with an empty data
// directory loads, rather than fold the replicated log from its first
// message (SPEC §10). It holds the snapshot the log's owner saved
// (SaveSnapshot, at event Snapshot), the events from From to the last one
// (Last), and the materialized state and idempotency records as of Last.
// From is the snapshot's own event when the log still has it, so that a
// log restored from an export can be checked against another copy of the
// history even when the export holds no event after its snapshot; else
// the one after it. Restore makes of it the log that Compact(From) would
// have left: the same state, records and events from From, so the same
// replay hash, and the same answer to a duplicate however old.
//
// The encoding: exportMagic, the version byte exportVersion, Snapshot,
// From and Last as uvarints, then each key and value of the store as a uvarint
// length and the bytes (idempotency records, events, the snapshot, state
// entries, in key order), then the key length 0 as the end, the count of
// pairs as a uvarint and the SHA-256 of every byte before it.
const (
	exportMagic   = "coagent-export"
	exportVersion = 1
)

// Export is a view of a log at one moment, to write as an export. It
// holds a Pebble snapshot, so the log goes on taking appends while it is
// written; Close releases it.
type Export struct {
	view *pebble.Snapshot
	// Snapshot is the event the log's latest snapshot was taken after (0:
	// none, and the export holds every event); From is the first event it
	// holds (Snapshot, or Snapshot+1 if that was compacted), Last the last
	// (From-1 when it holds none).
	Snapshot, From, Last uint64
}

// Export returns a view of the log as it is now, to write with WriteTo.
// Each group the log wrote is in it whole or not at all, and the committer
// takes it once it has written the state entries it held, so its state and
// records are those after its last event. A log whose state is stale
// (StateSeq) has no such state to export until RewriteState.
func (l *Log) Export() (*Export, error) {
	if l.stateStale.Load() {
		return nil, fmt.Errorf("export the log: its state is complete to event %d only, and a crash lost the entries after it: fold the log and rewrite the state first", l.StateSeq())
	}
	type taken struct {
		view *pebble.Snapshot
		err  error
	}
	took := make(chan taken, 1)
	err := l.afterIndex(func(err error) {
		if err != nil {
			took <- taken{err: err}
			return
		}
		took <- taken{view: l.db.NewSnapshot()}
	})
	if err != nil {
		return nil, fmt.Errorf("export the log: %w", err)
	}
	t := <-took
	if t.err != nil {
		return nil, fmt.Errorf("export the log: %w", t.err)
	}
	view := t.view
	fail := func(err error) (*Export, error) {
		view.Close()
		return nil, fmt.Errorf("export the log: %w", l.w.storeErr(err, 0))
	}
	e := &Export{view: view}
	it, err := view.NewIter(&pebble.IterOptions{LowerBound: []byte{famEvent}, UpperBound: []byte{famEvent + 1}})
	if err != nil {
		return fail(err)
	}
	if it.Last() {
		e.Last = seqOf(it.Key())
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fail(err)
	}
	if it, err = view.NewIter(&pebble.IterOptions{LowerBound: []byte{famSnapshot}, UpperBound: []byte{famSnapshot + 1}}); err != nil {
		return fail(err)
	}
	if it.Last() {
		e.Snapshot = seqOf(it.Key())
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fail(err)
	}
	first, _, err := readMeta(view, metaFirst)
	if err != nil {
		return fail(err)
	}
	switch {
	case e.Last == 0 && first > 1:
		e.Last = first - 1 // compacted to its end: no event is kept
	case e.Snapshot > e.Last:
		return fail(fmt.Errorf("%w: a snapshot at %d, after the last event %d", ErrCorrupt, e.Snapshot, e.Last))
	case e.Snapshot+1 < first:
		return fail(fmt.Errorf("%w: the log starts at %d and its latest snapshot is at %d", ErrCompacted, first, e.Snapshot))
	}
	e.From = max(e.Snapshot, first, 1)
	return e, nil
}

// Close releases the view.
func (e *Export) Close() error { return e.view.Close() }

// WriteTo writes the export to w and returns the bytes written.
func (e *Export) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: bufio.NewWriterSize(w, 64<<10), h: sha256.New()}
	var buf []byte
	buf = append(buf, exportMagic...)
	buf = append(buf, exportVersion)
	buf = binary.AppendUvarint(buf, e.Snapshot)
	buf = binary.AppendUvarint(buf, e.From)
	buf = binary.AppendUvarint(buf, e.Last)
	cw.Write(buf)
	var pairs uint64
	put := func(k, v []byte) {
		buf = binary.AppendUvarint(buf[:0], uint64(len(k)))
		buf = append(buf, k...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		cw.Write(buf)
		cw.Write(v)
		pairs++
	}
	spans := [][2][]byte{
		{{famDecision}, {famDecision + 1}},
		{eventKey(e.From), {famEvent + 1}},
		{snapshotKey(e.Snapshot), snapshotKey(e.Snapshot + 1)},
		{{famState}, {famState + 1}},
	}
	if e.Snapshot == 0 {
		spans = append(spans[:2], spans[3])
	}
	for _, s := range spans {
		it, err := e.view.NewIter(&pebble.IterOptions{LowerBound: s[0], UpperBound: s[1]})
		if err != nil {
			return cw.n, fmt.Errorf("export the log: %w", err)
		}
		for valid := it.First(); valid && cw.err == nil; valid = it.Next() {
			v, err := it.ValueAndErr()
			if err != nil {
				it.Close()
				return cw.n, fmt.Errorf("export the log: %s: %w", describeKey(it.Key()), err)
			}
			put(it.Key(), v)
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return cw.n, fmt.Errorf("export the log: %w", err)
		}
	}
	buf = binary.AppendUvarint(append(buf[:0], 0), pairs)
	cw.Write(buf)
	cw.w.Write(cw.h.Sum(nil)) // not hashed: the hash of what came before
	cw.n += sha256.Size
	if cw.err == nil {
		cw.err = cw.w.Flush()
	}
	if cw.err != nil {
		return cw.n, fmt.Errorf("export the log: %w", cw.err)
	}
	return cw.n, nil
}

// countWriter writes to w and hashes what it writes; the first error
// stops it and is kept.
type countWriter struct {
	w   *bufio.Writer
	h   hash.Hash
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) {
	if c.err != nil {
		return
	}
	c.h.Write(p)
	var n int
	n, c.err = c.w.Write(p)
	c.n += int64(n)
}

// ErrExport is wrapped by Restore's errors about the export itself (as
// opposed to the directory or the store): damaged, cut short, or of
// another version.
var ErrExport = errors.New("eventlog: not a whole export")

// Restore creates a log in dir, which must not exist or be empty, from an
// export read from r, and returns the event its snapshot was taken after
// and the last event it holds. The log is synced and closed; Open opens it. Every record is
// checked as it is read (the events decode, with the seqs expected; the
// records and entries decode), and the whole against the export's hash,
// before the store is synced: a damaged export leaves dir with a store
// that is incomplete, which the caller removes.
func Restore(dir string, r io.Reader, opts *Options) (snapshot, last uint64, err error) {
	fail := func(err error) (uint64, uint64, error) {
		return 0, 0, fmt.Errorf("eventlog: restore %s: %w", dir, err)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fail(fmt.Errorf("the directory is not empty (%d entries)", len(ents)))
	}
	h := sha256.New()
	br := bufio.NewReaderSize(r, 64<<10)
	tr := &hashReader{r: br, h: h}
	bad := func(format string, args ...any) (uint64, uint64, error) {
		return fail(fmt.Errorf("%w: %s", ErrExport, fmt.Sprintf(format, args...)))
	}
	head := make([]byte, len(exportMagic)+1)
	if _, err := io.ReadFull(tr, head); err != nil {
		return bad("header: %v", err)
	}
	if string(head[:len(exportMagic)]) != exportMagic {
		return bad("header %q: not an export", head[:len(exportMagic)])
	}
	if v := head[len(exportMagic)]; v != exportVersion {
		return fail(fmt.Errorf("%w: export version %d (this build reads %d)", ErrVersion, v, exportVersion))
	}
	if snapshot, err = binary.ReadUvarint(tr); err != nil {
		return bad("snapshot seq: %v", err)
	}
	from, err := binary.ReadUvarint(tr)
	if err != nil {
		return bad("first seq: %v", err)
	}
	if last, err = binary.ReadUvarint(tr); err != nil {
		return bad("last seq: %v", err)
	}
	if snapshot > last || from != max(snapshot, 1) && from != snapshot+1 || from > last+1 {
		return bad("a snapshot at %d, events %d–%d", snapshot, from, last)
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	l, err := Open(dir, &o)
	if err != nil {
		return fail(err)
	}
	defer l.Close()
	if l.LastSeq() != 0 {
		return fail(fmt.Errorf("the directory holds a log (%d events)", l.LastSeq()))
	}
	b := l.db.NewBatch()
	defer func() { b.Close() }()
	var pairs uint64
	next := from // the event expected next
	var key, val []byte
	for {
		n, err := binary.ReadUvarint(tr)
		if err != nil {
			return bad("pair %d: key length: %v", pairs, err)
		}
		if n == 0 {
			break
		}
		if n > maxExportPair {
			return bad("pair %d: a key of %d bytes", pairs, n)
		}
		key = sized(key, n)
		if _, err := io.ReadFull(tr, key); err != nil {
			return bad("pair %d: key: %v", pairs, err)
		}
		if n, err = binary.ReadUvarint(tr); err != nil || n > maxExportPair {
			return bad("pair %d (%s): value length %d: %v", pairs, describeKey(key), n, err)
		}
		val = sized(val, n)
		if _, err := io.ReadFull(tr, val); err != nil {
			return bad("pair %d (%s): value: %v", pairs, describeKey(key), err)
		}
		if err := checkExported(key, val, snapshot, &next); err != nil {
			return bad("pair %d (%s): %v", pairs, describeKey(key), err)
		}
		if err := b.Set(key, val, nil); err != nil {
			return fail(err)
		}
		pairs++
		if b.Len() > 4<<20 {
			if err := l.commit(b, pebble.NoSync); err != nil {
				return fail(err)
			}
			b.Close()
			b = l.db.NewBatch()
		}
	}
	count, err := binary.ReadUvarint(tr)
	if err != nil || count != pairs {
		return bad("the end says %d pairs, %d were read (%v)", count, pairs, err)
	}
	want := h.Sum(nil)
	sum := make([]byte, sha256.Size)
	if _, err := io.ReadFull(br, sum); err != nil {
		return bad("hash: %v", err)
	}
	if !bytes.Equal(sum, want) {
		return bad("its hash differs from its bytes'")
	}
	if next != last+1 {
		return bad("its events end at %d, and its header says %d", next-1, last)
	}
	err = errors.Join(
		b.Set(metaFirst, eventKey(from)[1:], nil),
		// The index starts empty, complete to the event before the
		// first: Open indexes the events.
		b.Set(metaIndexed, eventKey(from - 1)[1:], nil),
		// The entries are the state after the last event.
		b.Set(metaState, eventKey(last)[1:], nil),
		l.commit(b, pebble.Sync),
	)
	if err != nil {
		return fail(err)
	}
	return snapshot, last, nil
}

// maxExportPair bounds the length of a key or value Restore reads, before
// it allocates it: far above any record a log writes, far below what a
// damaged length could claim.
const maxExportPair = 64 << 20

// sized returns b with length n, reusing its memory when it can.
func sized(b []byte, n uint64) []byte {
	if uint64(cap(b)) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// checkExported checks one pair of an export whose snapshot is at
// snapshot: a family an export holds, and a record that decodes; events
// must come in order from *next, which it moves on.
func checkExported(key, val []byte, snapshot uint64, next *uint64) error {
	switch key[0] {
	case famDecision:
		_, err := DecodeDecision(val)
		return err
	case famEvent:
		seq := seqOf(key)
		if len(key) != 9 || seq != *next {
			return fmt.Errorf("event %d where %d was expected", seq, *next)
		}
		if _, err := decodeAt(seq, val, nil); err != nil {
			return err
		}
		*next = seq + 1
		return nil
	case famSnapshot:
		if len(key) != 9 || seqOf(key) != snapshot {
			return fmt.Errorf("a snapshot at %d, and the header says %d", seqOf(key), snapshot)
		}
		return nil
	case famState:
		_, err := decodeEntry(string(key[1:]), val)
		return err
	}
	return errors.New("a key no export holds")
}

// hashReader reads from r and hashes what it reads.
type hashReader struct {
	r *bufio.Reader
	h hash.Hash
}

func (t *hashReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.h.Write(p[:n])
	return n, err
}

func (t *hashReader) ReadByte() (byte, error) {
	c, err := t.r.ReadByte()
	if err == nil {
		t.h.Write([]byte{c})
	}
	return c, err
}
