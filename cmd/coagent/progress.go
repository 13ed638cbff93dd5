package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"
)

// progress shows how far long work on a log has come (replay, verify,
// compact, log on a large log): events done of the total, the rate, and
// the time left, redrawn in place on stderr at most every progressEvery.
// It shows nothing unless stderr is a terminal: a pipe or a file gets no
// progress lines to clean up. A nil *progress is valid and does nothing.
type progress struct {
	w     io.Writer
	what  string
	total uint64
	done  uint64
	began time.Time
	drawn time.Time // when it was last drawn
	now   func() time.Time
}

// progressEvery bounds how often the line is redrawn.
const progressEvery = 200 * time.Millisecond

// ttyWriter is a writer that says whether it is a terminal: a fake one in
// tests.
type ttyWriter interface {
	io.Writer
	isTerminal() bool
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
	return &progress{w: stderr, what: what, total: total, now: time.Now, began: time.Now()}
}

// add counts n more events done and redraws the line if it is due.
func (p *progress) add(n uint64) {
	if p == nil {
		return
	}
	p.done += n
	if now := p.now(); now.Sub(p.drawn) >= progressEvery {
		p.drawn = now
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
// starts on a line of its own.
func (p *progress) finish() {
	if p == nil {
		return
	}
	p.draw(p.now())
	fmt.Fprintln(p.w)
}
