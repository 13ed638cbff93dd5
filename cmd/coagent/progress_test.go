package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// fakeTTY is a terminal for the tests.
type fakeTTY struct{ bytes.Buffer }

func (*fakeTTY) isTerminal() bool { return true }

// TestProgress: on a terminal the line shows events done of the total, the
// rate and the time left, redrawn in place at most every progressEvery;
// on anything else, nothing at all.
func TestProgress(t *testing.T) {
	var tty fakeTTY
	p := newProgress(&tty, "replay", 1000)
	if p == nil {
		t.Fatal("no progress on a terminal")
	}
	now := p.began
	p.now = func() time.Time { return now }
	now = now.Add(time.Second)
	p.add(250)
	now = now.Add(progressEvery / 2)
	p.add(10) // within progressEvery: not drawn
	if got, want := tty.String(), "\rreplay: 250/1000 events (25%), 250/s, 3s left\x1b[K"; got != want {
		t.Fatalf("line %q, want %q", got, want)
	}
	tty.Reset()
	now = now.Add(time.Second - progressEvery/2) // 2s in, 1000 done
	p.add(740)
	p.finish()
	if got := tty.String(); !strings.HasPrefix(got, "\rreplay: 1000/1000 events (100%), 500/s\x1b[K") || !strings.HasSuffix(got, "\n") {
		t.Fatalf("last line %q", got)
	}

	var pipe bytes.Buffer
	q := newProgress(&pipe, "replay", 1000)
	q.add(500) // a nil progress is valid
	q.finish()
	if q != nil || pipe.Len() != 0 {
		t.Fatalf("progress on a writer that is not a terminal: %q", pipe.String())
	}
}
