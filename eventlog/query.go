package eventlog

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
	"github.com/oklog/ulid/v2"
)

// Query selects events of the audit trail. Set criteria must all match.
type Query struct {
	Agent string            // the event's agent
	Type  intents.EventType // the event's type
	Txn   string            // the event's transaction
	// Trace is the trace id of the intent that caused the event
	// (intents.Event.Trace): 32 lowercase hex digits.
	Trace string
	// Intent is the id of the intent the event is of (intents.Event.Intent),
	// a ULID as the intent spelled it (canonical upper case, for any valid
	// intent): the intent event and its decisions, the change, grant, wait
	// or escalation it caused, the waiting notices sent for it and the
	// resolution of its case. Not the events of the transaction it opened
	// (renewals, expiry, notices, its release by another intent): follow
	// its transaction for those.
	Intent string
	// Path matches events that concern a path overlapping it: the path
	// itself, anything under it, or an ancestor of it (a write to report
	// concerns report.intro). Decisions carry no paths; follow their intent.
	// Rules events carry none either; select them by Type.
	Path  string
	From  uint64 // the first seq to consider; the default is the first kept
	Limit int    // at most this many events; the default is 100
}

// Query answers q from the indexes — the most selective one drives, the
// other criteria filter — in sequence order, and from the events after the
// index, which trails the log by at most Options.IndexEvery events (read
// one by one and filtered). It returns the events and the seq to continue
// from, 0 when there are no more.
func (l *Log) Query(q Query) ([]*intents.Event, uint64, error) {
	return l.QueryProgress(q, nil)
}

// QueryProgress is Query telling progress of each event it considers
// (of the driving index, or of the log), of those to the last event
// logged when it began.
func (l *Log) QueryProgress(q Query, progress Progress) ([]*intents.Event, uint64, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	if q.From < l.FirstSeq() {
		q.From = l.FirstSeq()
	}
	if q.Path != "" {
		if err := intents.CheckPath(q.Path); err != nil {
			return nil, 0, fmt.Errorf("query path %q: %v", q.Path, err)
		}
	}
	if q.Trace != "" && !intents.ValidTraceID(q.Trace) {
		return nil, 0, fmt.Errorf("query trace %q: not a trace id (32 lowercase hex digits, not all zeros)", q.Trace)
	}
	if q.Intent != "" {
		if _, err := ulid.ParseStrict(q.Intent); err != nil {
			return nil, 0, fmt.Errorf("query intent %q: not a ULID: %v", q.Intent, err)
		}
	}
	last := l.LastSeq()
	snap := l.db.NewSnapshot()
	defer snap.Close()
	src, err := stream(snap, q)
	if err != nil {
		return nil, 0, l.w.storeErr(err, 0)
	}
	defer src.close()
	var out []*intents.Event
	for {
		seq, ok := src.next()
		if !ok {
			return out, 0, l.w.storeErr(src.err(), 0)
		}
		if len(out) == q.Limit {
			return out, seq, nil
		}
		if progress != nil {
			progress(seq, max(last, seq))
		}
		v, closer, err := snap.Get(eventKey(seq))
		if err != nil {
			return nil, 0, fmt.Errorf("event %d named by an index: %w", seq, l.w.storeErr(err, seq))
		}
		ev, err := decodeAt(seq, v, nil)
		closer.Close()
		if err != nil {
			return nil, 0, err
		}
		if q.matches(ev) {
			out = append(out, ev)
		}
	}
}

// matches applies every criterion to ev, exactly as the indexes do.
func (q *Query) matches(ev *intents.Event) bool {
	switch {
	case q.Agent != "" && ev.Agent != q.Agent,
		q.Type != "" && ev.Type != q.Type,
		q.Txn != "" && ev.Txn != q.Txn,
		q.Trace != "" && ev.Trace != q.Trace,
		q.Intent != "" && ev.Intent != q.Intent:
		return false
	case q.Path != "":
		return slices.ContainsFunc(pathsOf(ev), func(p string) bool { return intents.Overlaps(p, q.Path) })
	}
	return true
}

// stream picks the index that drives q: an intent has the fewest events,
// then a trace (one intent's story, or a few), a transaction, an agent, a
// path, a type; with no criterion, the log itself.
// The events after the index follow the index's.
func stream(r pebble.Reader, q Query) (seqStream, error) {
	if q.Intent == "" && q.Trace == "" && q.Txn == "" && q.Agent == "" && q.Path == "" && q.Type == "" {
		return newEventStream(r, q.From)
	}
	indexed, found, err := readMeta(r, metaIndexed)
	if err == nil && !found {
		err = fmt.Errorf("%w: no record of where the index ends", ErrCorrupt)
	}
	if err != nil {
		return nil, err
	}
	src, err := indexStream(r, q, indexed)
	if err != nil {
		return nil, err
	}
	tail, err := newEventStream(r, max(q.From, indexed+1))
	if err != nil {
		src.close()
		return nil, err
	}
	return &concat{streams: []seqStream{src, tail}}, nil
}

func newEventStream(r pebble.Reader, from uint64) (seqStream, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: eventKey(from), UpperBound: []byte{famEvent + 1}})
	if err != nil {
		return nil, err
	}
	return &iterStream{it: it}, nil
}

// indexStream is the stream of the index that drives q, to seq until.
func indexStream(r pebble.Reader, q Query, until uint64) (seqStream, error) {
	switch {
	case q.Intent != "":
		return newIndexStream(r, indexPrefix(idxIntent, q.Intent), q.From, until)
	case q.Trace != "":
		return newIndexStream(r, indexPrefix(idxTrace, q.Trace), q.From, until)
	case q.Txn != "":
		return newIndexStream(r, indexPrefix(idxTxn, q.Txn), q.From, until)
	case q.Agent != "":
		return newIndexStream(r, indexPrefix(idxAgent, q.Agent), q.From, until)
	case q.Path != "":
		var streams []seqStream
		add := func(prefix []byte) error {
			s, err := newIndexStream(r, prefix, q.From, until)
			if err == nil {
				streams = append(streams, s)
			}
			return err
		}
		prefixes := [][]byte{indexPrefix(idxSubtree, q.Path), indexPrefix(idxExact, q.Path)}
		ancestors(q.Path, func(a string) { prefixes = append(prefixes, indexPrefix(idxExact, a)) })
		for _, p := range prefixes {
			if err := add(p); err != nil {
				mergeStream(streams).close()
				return nil, err
			}
		}
		return mergeStream(streams), nil
	default:
		return newIndexStream(r, indexPrefix(idxType, string(q.Type)), q.From, until)
	}
}

// concat yields its streams one after the other.
type concat struct {
	streams []seqStream
	at      int // the stream being read
}

func (c *concat) next() (uint64, bool) {
	for ; c.at < len(c.streams); c.at++ {
		if seq, ok := c.streams[c.at].next(); ok {
			return seq, true
		}
		if c.streams[c.at].err() != nil {
			return 0, false
		}
	}
	return 0, false
}

func (c *concat) err() error {
	if c.at < len(c.streams) {
		return c.streams[c.at].err()
	}
	return nil
}

func (c *concat) close() {
	for _, s := range c.streams {
		s.close()
	}
}

// seqStream yields sequence numbers in ascending order.
type seqStream interface {
	next() (uint64, bool)
	err() error
	close()
}

// iterStream yields the seq at the end of each key of an iterator: the
// log's events.
type iterStream struct {
	it      *pebble.Iterator
	started bool
}

func (s *iterStream) next() (uint64, bool) {
	var ok bool
	if !s.started {
		s.started, ok = true, s.it.First()
	} else {
		ok = s.it.Next()
	}
	if !ok {
		return 0, false
	}
	return seqOf(s.it.Key()), true
}

func (s *iterStream) err() error { return s.it.Error() }
func (s *iterStream) close()     { s.it.Close() }

// postingStream yields the seqs from from to until in the posting lists of
// one index term.
type postingStream struct {
	it     *pebble.Iterator
	seek   []byte // the key to start at, nil once started
	from   uint64
	until  uint64
	seqs   []uint64 // of the current key, not yet yielded
	buf    []uint64
	failed error
}

func newIndexStream(r pebble.Reader, prefix []byte, from, until uint64) (*postingStream, error) {
	// No list holding a seq after until starts before it.
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: append(bytes.Clone(prefix), eventKey(until + 1)[1:]...)})
	if err != nil {
		return nil, err
	}
	// The list that holds from starts at or before it.
	seek := append(bytes.Clone(prefix), eventKey(from + 1)[1:]...)
	return &postingStream{it: it, seek: seek, from: from, until: until}, nil
}

func (s *postingStream) next() (uint64, bool) {
	for len(s.seqs) == 0 {
		var ok bool
		switch {
		case s.failed != nil:
			return 0, false
		case s.seek != nil:
			if ok = s.it.SeekLT(s.seek); !ok {
				ok = s.it.First()
			}
			s.seek = nil
		default:
			ok = s.it.Next()
		}
		if !ok {
			return 0, false
		}
		s.buf, s.failed = readPostings(s.buf[:0], s.it.Key(), s.it.Value())
		i, _ := slices.BinarySearch(s.buf, s.from)
		s.seqs = s.buf[i:]
	}
	seq := s.seqs[0]
	if seq > s.until {
		return 0, false
	}
	s.seqs = s.seqs[1:]
	return seq, true
}

func (s *postingStream) err() error { return errors.Join(s.failed, s.it.Error()) }
func (s *postingStream) close()     { s.it.Close() }

// merged yields the union of several streams in order, each seq once.
type merged struct {
	streams []seqStream
	heads   []uint64
	live    []bool
	primed  bool
	last    uint64
	emitted bool
}

func mergeStream(streams []seqStream) *merged {
	return &merged{streams: streams, heads: make([]uint64, len(streams)), live: make([]bool, len(streams))}
}

func (m *merged) next() (uint64, bool) {
	if !m.primed {
		m.primed = true
		for i, s := range m.streams {
			m.heads[i], m.live[i] = s.next()
		}
	}
	for {
		best := -1
		for i := range m.streams {
			if m.live[i] && (best < 0 || m.heads[i] < m.heads[best]) {
				best = i
			}
		}
		if best < 0 {
			return 0, false
		}
		seq := m.heads[best]
		m.heads[best], m.live[best] = m.streams[best].next()
		if m.emitted && seq == m.last {
			continue // in several streams
		}
		m.last, m.emitted = seq, true
		return seq, true
	}
}

func (m *merged) err() error {
	for _, s := range m.streams {
		if err := s.err(); err != nil {
			return err
		}
	}
	return nil
}

func (m *merged) close() {
	for _, s := range m.streams {
		s.close()
	}
}
