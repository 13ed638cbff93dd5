package eventlog

import (
	"fmt"
	"sync"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
)

// scan runs in goroutines joined by channels of chunks, each chunk recycled
// once read: one iterates Pebble and copies the records out, chunk n going
// to decoder n % scanDecoders; the decoders decode; the caller's goroutine
// takes the chunks back in order and runs fn. On two cores the stages
// overlap, and a replay costs about its CPU time spread over both rather
// than the sum of its stages (BenchmarkReplay1M in the coordinator).
//
// Stopping: a decoder that cannot read a record sends the events before it
// with the error, as its last chunk; fn's error, or that chunk's, closes
// stop. The iterator then returns and closes the decoders' raw channels,
// each decoder drains its own before it closes its full channel, and the
// caller drains every full channel. So when scan returns, no goroutine of
// it is left and its iterator is closed.

// A rawChunk is records on their way from the iterator to a decoder.
type rawChunk struct {
	seqs []uint64
	ends []int // record i is buf[ends[i-1]:ends[i]]
	buf  []byte
}

// An eventChunk is events on their way from a decoder to fn.
type eventChunk struct {
	evs    []*intents.Event
	shells []receivedEvent // Fold's: what evs point into, reused
	err    error           // the record after evs could not be read; the chunk is the last
}

// The read-ahead of scan: records go in chunks, which keeps the channels'
// cost per event small; each decoder runs at most scanDepth chunks ahead of
// the caller, and the iterator as far ahead of each decoder. Two decoders
// balance the stages on two cores: decoding is the dearest.
const (
	scanChunkLen = 256
	scanDepth    = 4
	scanDecoders = 2
)

func (l *Log) scan(from, until uint64, thin bool, fn func(*intents.Event) error) error {
	if from == 0 {
		from = 1
	}
	if from < l.FirstSeq() {
		return fmt.Errorf("scan from %d: %w (the log starts at %d)", from, ErrCompacted, l.FirstSeq())
	}
	upper := []byte{famEvent + 1}
	if until != 0 {
		upper = eventKey(until + 1)
	}
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: eventKey(from), UpperBound: upper})
	if err != nil {
		return l.w.storeErr(err, from)
	}
	s := &scanner{it: it, w: l.w, from: from, thin: thin, rawFree: make(chan *rawChunk, scanDecoders*(scanDepth+2)), stop: make(chan struct{})}
	for i := range s.decoders {
		d := &s.decoders[i]
		d.raw = make(chan *rawChunk, scanDepth)
		d.full = make(chan *eventChunk, scanDepth)
		d.free = make(chan *eventChunk, scanDepth+2)
		for range scanDepth + 2 {
			s.rawFree <- &rawChunk{}
			if thin {
				d.free <- &eventChunk{evs: make([]*intents.Event, 0, scanChunkLen), shells: make([]receivedEvent, scanChunkLen)}
			}
		}
	}
	go s.iterate()
	for i := range s.decoders {
		go s.decode(&s.decoders[i])
	}
	return s.deliver(fn)
}

// A scanner is the goroutines of one scan and what joins them.
type scanner struct {
	it       *pebble.Iterator
	w        *watcher // the log's, for iterErr
	from     uint64
	thin     bool // Fold's: decode into the chunks' shells
	decoders [scanDecoders]scanDecoder
	rawFree  chan *rawChunk // back from the decoders
	stop     chan struct{}
	stopOnce sync.Once
	iterErr  error // set before the raw channels are closed
}

// A scanDecoder is one decoder's channels: records in, events out, and
// Fold's event chunks back from fn.
type scanDecoder struct {
	raw        chan *rawChunk
	full, free chan *eventChunk
}

func (s *scanner) halt() { s.stopOnce.Do(func() { close(s.stop) }) }

// iterate reads the records into chunks, chunk n for decoder n %
// scanDecoders, until the iterator ends or stop closes.
func (s *scanner) iterate() {
	defer func() {
		for i := range s.decoders {
			close(s.decoders[i].raw)
		}
	}()
	defer s.it.Close()
	var c *rawChunk
	n := 0
	last := s.from - 1 // the last event read
	send := func() bool {
		select {
		case s.decoders[n%scanDecoders].raw <- c:
			c, n = nil, n+1
			return true
		case <-s.stop:
			return false
		}
	}
	for valid := s.it.First(); valid; valid = s.it.Next() {
		if c == nil {
			select {
			case c = <-s.rawFree:
				c.seqs, c.ends, c.buf = c.seqs[:0], c.ends[:0], c.buf[:0]
			case <-s.stop:
				return
			}
		}
		last = seqOf(s.it.Key())
		c.seqs = append(c.seqs, last)
		c.buf = append(c.buf, s.it.Value()...)
		c.ends = append(c.ends, len(c.buf))
		if len(c.seqs) == scanChunkLen && !send() {
			return
		}
	}
	// A store that cannot be read past last is corrupt from last+1 on
	// (the events are consecutive), or it is some other failure.
	s.iterErr = s.w.storeErr(s.it.Error(), last+1)
	if c != nil {
		send()
	}
}

// decode decodes d's chunks until its raw channel closes, stop closes, or
// a record cannot be read: then the events before it go out with the
// error, as d's last chunk.
func (s *scanner) decode(d *scanDecoder) {
	defer close(d.full)
	defer func() {
		for range d.raw { // until the iterator has returned
		}
	}()
	send := func(c *eventChunk) bool {
		select {
		case d.full <- c:
			return true
		case <-s.stop:
			return false
		}
	}
	for rc := range d.raw {
		var c *eventChunk
		if s.thin {
			select {
			case c = <-d.free:
				c.evs, c.err = c.evs[:0], nil
			case <-s.stop:
				return
			}
		} else {
			c = &eventChunk{evs: make([]*intents.Event, 0, len(rc.seqs))}
		}
		start := 0
		for i, seq := range rc.seqs {
			var shell *receivedEvent
			if s.thin {
				shell = &c.shells[i]
			}
			ev, err := decodeAt(seq, rc.buf[start:rc.ends[i]], shell)
			if err != nil {
				c.err = err
				send(c)
				return
			}
			c.evs = append(c.evs, ev)
			start = rc.ends[i]
		}
		s.rawFree <- rc
		if !send(c) {
			return
		}
	}
}

// deliver takes the decoders' chunks back in order and calls fn with their
// events, in the caller's goroutine, until the end, fn's error or a chunk's.
// It returns once every goroutine of the scan has.
func (s *scanner) deliver(fn func(*intents.Event) error) error {
	stop := func(err error) error {
		s.halt()
		for i := range s.decoders {
			for range s.decoders[i].full { // until every decoder has returned
			}
		}
		return err
	}
	for n := 0; ; n++ {
		d := &s.decoders[n%scanDecoders]
		c, ok := <-d.full
		if !ok { // the iterator has closed every raw channel
			return stop(s.iterErr)
		}
		for _, ev := range c.evs {
			if err := fn(ev); err != nil {
				return stop(err)
			}
		}
		if c.err != nil {
			return stop(c.err)
		}
		if s.thin {
			d.free <- c
		}
	}
}
