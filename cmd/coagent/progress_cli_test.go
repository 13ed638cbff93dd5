package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// clockTTY is a fake terminal whose clock moves step at every reading, so
// that work of a few milliseconds lasts long enough to draw its progress.
type clockTTY struct {
	fakeTTY
	at   time.Time
	step time.Duration
}

func (c *clockTTY) clock() time.Time {
	c.at = c.at.Add(c.step)
	return c.at
}

func newClockTTY() *clockTTY {
	return &clockTTY{at: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), step: 50 * time.Millisecond}
}

// writeManyEvents writes a data directory of n intents of two agents, each
// logged as its intent, decision and change, and no snapshot: replay and
// verify fold every event.
func writeManyEvents(t *testing.T, n int) (dir string, last uint64) {
	t.Helper()
	dir = t.TempDir()
	c, err := coordinator.OpenCore(logDir(dir), coordinator.CoreOptions{Log: eventlog.Options{NoSync: true}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range n {
		at := now.Add(time.Duration(i) * time.Millisecond)
		agent := []string{"writer", "editor"}[i%2]
		in := intents.Intent{ID: ulid.MustNew(ulid.Timestamp(at), ulid.DefaultEntropy()).String(), Agent: agent, Kind: intents.KindApply,
			Writes: []intents.Write{{Path: fmt.Sprintf("report.s%d", i%8), Op: intents.OpSet, Value: json.RawMessage(fmt.Sprintf("%d", i))}}}
		raw, _ := json.Marshal(in)
		if _, _, err := c.Submit(at, agent, raw); err != nil {
			t.Fatal(err)
		}
	}
	last = c.Engine().Seq()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, last
}

// lastOf is the seq of agent's last event in the log of dir.
func lastOf(t *testing.T, dir, agent string) uint64 {
	t.Helper()
	l, err := eventlog.Open(logDir(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	evs, _, err := l.Query(eventlog.Query{Agent: agent, Limit: 1 << 20})
	if err != nil || len(evs) == 0 {
		t.Fatalf("the events of %s: %d, %v", agent, len(evs), err)
	}
	return evs[len(evs)-1].Seq
}

// runTo runs the command line with stderr as given.
func runTo(t *testing.T, stderr io.Writer, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(context.Background(), args, strings.NewReader(""), &out, stderr); err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	return out.String()
}

// progressLine is one drawing of a progress line: done of total events.
var progressLine = regexp.MustCompile(`\r([a-z: ]+): (\d+)/(\d+) events \(\d+%\)[^\r]*\x1b\[K`)

// checkProgress checks that tty shows the progress of what, redrawn in
// place, counting up to done of total events, and ends its line.
func checkProgress(t *testing.T, tty *clockTTY, what string, done, total uint64) {
	t.Helper()
	got := tty.String()
	tty.Reset()
	lines := progressLine.FindAllStringSubmatch(got, -1)
	if len(lines) < 2 || !strings.HasSuffix(got, "\n") {
		t.Fatalf("%s: progress %q, want lines redrawn and the last ended", what, got)
	}
	var before uint64
	for _, l := range lines {
		var n, of uint64
		fmt.Sscan(l[2], &n)
		fmt.Sscan(l[3], &of)
		if l[1] != what || of != total || n < before || n > done {
			t.Fatalf("%s: progress line %q, want %s: up to %d/%d events", what, l[0], what, done, total)
		}
		before = n
	}
	if before != done {
		t.Fatalf("%s: the last line says %d events done, want %d: %q", what, before, done, got)
	}
}

// TestProgressOfLongWork: replay, verify, log and compact of a log of a
// few thousand events draw their progress on a terminal and print what
// they print without it; on a stderr that is not a terminal, they write
// nothing on it.
func TestProgressOfLongWork(t *testing.T) {
	dir, last := writeManyEvents(t, 1500)
	if last < 4000 {
		t.Fatalf("the log holds %d events, want a few thousand", last)
	}
	for _, args := range [][]string{
		{"replay", "--data", dir, "--json"},
		{"verify", "--data", dir},
		{"log", "--data", dir, "--limit", "100000", "--json"},
		{"log", "--data", dir, "--agent", "editor", "--type", "change", "--limit", "100000"},
	} {
		var quiet bytes.Buffer
		want := runTo(t, &quiet, args...)
		if quiet.Len() != 0 {
			t.Fatalf("%s with stderr not a terminal wrote on it: %q", args[0], quiet.String())
		}
		tty := newClockTTY()
		if got := runTo(t, tty, args...); got != want {
			t.Fatalf("%s on a terminal printed %q, without one %q", strings.Join(args, " "), got, want)
		}
		done := last
		if args[0] == "log" && args[3] == "editor" {
			// The agent's index drives: the progress goes through the log
			// to the agent's last event.
			done = lastOf(t, dir, "editor")
		}
		checkProgress(t, tty, args[0], done, last)
	}

	// Work within progressEvery leaves nothing behind on the terminal.
	tty := newClockTTY()
	tty.step = time.Millisecond
	runTo(t, tty, "log", "--data", dir, "--limit", "10")
	if got := tty.String(); got != "more: --from 11\n" {
		t.Fatalf("a quick log query drew progress: %q", tty.String())
	}

	// Compact: the fold to the snapshot, then the events dropped.
	before := last / 2
	var quiet bytes.Buffer
	other, _ := writeManyEvents(t, 1500)
	want := runTo(t, &quiet, "compact", "--data", other, "--before", fmt.Sprint(before))
	if quiet.Len() != 0 {
		t.Fatalf("compact with stderr not a terminal wrote on it: %q", quiet.String())
	}
	tty = newClockTTY()
	got := runTo(t, tty, "compact", "--data", dir, "--before", fmt.Sprint(before))
	if strip := regexp.MustCompile(`sha256 \w+`); strip.ReplaceAllString(got, "") != strip.ReplaceAllString(want, "") {
		t.Fatalf("compact on a terminal printed %q, without one %q", got, want)
	}
	out := tty.String()
	snapshot, drop, ok := strings.Cut(out, "\n")
	if !ok {
		t.Fatalf("compact: progress %q, want two lines", out)
	}
	tty.Reset()
	tty.WriteString(snapshot + "\n")
	checkProgress(t, tty, "compact: snapshot", before-1, before-1)
	tty.WriteString(drop)
	checkProgress(t, tty, "compact: drop", before-1, before-1)
	// The log compacted with its progress drawn is the one compacted
	// without: the same replay.
	if a, b := runTo(t, io.Discard, "replay", "--data", dir, "--json"), runTo(t, io.Discard, "replay", "--data", other, "--json"); !strings.Contains(a, fmt.Sprintf(`"seq":%d`, last)) || a != b {
		t.Fatalf("replay after compaction: %q", a)
	}
}
