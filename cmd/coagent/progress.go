package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/coagent/coagent/eventlog"
	"golang.org/x/term"
)

// progress shows how far long work on a log has come (replay, verify,
// compact, log on a large log): events done of the total, the rate, and
// the time left, redrawn in place on stderr at most every progressEvery.
// It shows nothing unless stderr is a terminal: a pipe or a file gets no
// progress lines to clean up. Nor does work done within progressEvery: a
// query of a few events should not leave a progress line behind it. A nil
// *progress is valid and does nothing.
type progress struct {
	w     io.Writer
	what  string
	total uint64
	done  uint64
	began time.Time
	drawn time.Time // when it was last drawn; began until it is
	shown bool      // whether it has been drawn
	now   func() time.Time
	// Of reached: the first seq counted (0 until one is), and how many
	// calls since the clock was last read.
	from  uint64
	calls uint
}

// progressEvery bounds how often the line is redrawn.
const progressEvery = 200 * time.Millisecond

// ttyWriter is a writer that says whether it is a terminal: a fake one in
// tests.
type ttyWriter interface {
	io.Writer
	isTerminal() bool
}

// clockWriter is a writer with a clock of its own: a test's fake terminal,
// whose time moves as fast as the test needs for the work to show.
type clockWriter interface {
	io.Writer
	clock() time.Time
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	switch w := w.(type) {
	case ttyWriter:
		return w.isTerminal()
	case *os.File:
		return term.IsTerminal(int(w.Fd()))
	}
	return false
}

// newProgress starts a progress line for what, total events long, on
// stderr; nil when stderr is not a terminal.
func newProgress(stderr io.Writer, what string, total uint64) *progress {
	if !isTerminal(stderr) {
		return nil
	}
	now := time.Now
	if c, ok := stderr.(clockWriter); ok {
		now = c.clock
	}
	began := now()
	return &progress{w: stderr, what: what, total: total, now: now, began: began, drawn: began}
}

// startAt counts the events reached from seq from on (the default is the
// first seq reached); it returns p.
func (p *progress) startAt(from uint64) *progress {
	if p != nil {
		p.from = from
	}
	return p
}

// reachedEvery is how many calls of reached read the clock once: a fold
// calls it for every event, and reading the clock each time would cost a
// fold of a small state some percent.
const reachedEvery = 256

// reached counts the events done to seq, of a run that ends at last: the
// first seq reached starts the count unless startAt said where, so that a
// fold from a snapshot counts the events it folds, not those the snapshot
// holds.
func (p *progress) reached(seq, last uint64) {
	if p.from == 0 {
		p.from = seq
	}
	if seq < p.from {
		return
	}
	p.done, p.total = seq-p.from+1, max(last, seq)-p.from+1
	if p.calls++; p.calls < reachedEvery {
		return
	}
	p.calls = 0
	p.add(0)
}

// fn is p.reached as an eventlog.Progress, and nil for a nil p, so that
// work whose progress is not shown pays nothing for it.
func (p *progress) fn() eventlog.Progress {
	if p == nil {
		return nil
	}
	return p.reached
}

// add counts n more events done and redraws the line if it is due.
func (p *progress) add(n uint64) {
	if p == nil {
		return
	}
	p.done += n
	if now := p.now(); now.Sub(p.drawn) >= progressEvery {
		p.drawn, p.shown = now, true
		p.draw(now)
	}
}

// draw writes the line: "\r" takes the cursor back to its start, and the
// clear-to-end-of-line sequence erases what a longer line left.
func (p *progress) draw(now time.Time) {
	took := now.Sub(p.began)
	line := fmt.Sprintf("%s: %d", p.what, p.done)
	if p.total > 0 {
		line += fmt.Sprintf("/%d events (%.0f%%)", p.total, 100*float64(p.done)/float64(p.total))
	} else {
		line += " events"
	}
	if secs := took.Seconds(); secs > 0 && p.done > 0 {
		rate := float64(p.done) / secs
		line += fmt.Sprintf(", %.0f/s", rate)
		if p.total > p.done {
			left := time.Duration(float64(p.total-p.done) / rate * float64(time.Second))
			line += ", " + left.Round(time.Second).String() + " left"
		}
	}
	fmt.Fprintf(p.w, "\r%s\x1b[K", line)
}

// finish draws the last line and ends it, so that what follows on stderr
// starts on a line of its own; if no line was drawn, the work was quick and
// it draws none.
func (p *progress) finish() {
	if p == nil || !p.shown {
		return
	}
	p.draw(p.now())
	fmt.Fprintln(p.w)
}
