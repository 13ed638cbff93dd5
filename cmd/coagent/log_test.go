package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// writeData fills a data directory the way a server would, and returns the
// hash of its live state and the seq it ended at.
func writeData(t *testing.T) (dir, hash string, last uint64) {
	t.Helper()
	dir = t.TempDir()
	c, err := coordinator.OpenCore(logDir(dir), coordinator.CoreOptions{SnapshotEvery: 40, Log: eventlog.Options{NoSync: true}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range 60 {
		var u ulid.ULID
		_ = u.SetTime(ulid.Timestamp(now))
		u[15] = byte(i)
		agent := []string{"writer", "editor"}[i%2]
		in := intents.Intent{ID: u.String(), Agent: agent, Kind: intents.KindApply,
			Writes: []intents.Write{{Path: fmt.Sprintf("report.s%d.text", i%4), Op: intents.OpSet, Value: json.RawMessage(fmt.Sprintf(`"v%d"`, i))}}}
		raw, _ := json.Marshal(in)
		_, p, err := c.Submit(now.Add(time.Duration(i)*time.Second), agent, raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	hash, last = replay.Hash(c.Engine().State()), c.Engine().Seq()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, hash, last
}

func TestReplayVerifyLogCompact(t *testing.T) {
	dir, hash, last := writeData(t)

	out, _, err := runCmd(t, "", "replay", "--data", dir, "--json")
	var rep struct {
		Seq   uint64
		Hash  string `json:"sha256"`
		State map[string]any
	}
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("replay: %q, %v", out, err)
	}
	if rep.Hash != hash || rep.Seq != last {
		t.Fatalf("replay: seq %d hash %s, the live state was seq %d hash %s", rep.Seq, rep.Hash, last, hash)
	}
	// Replay to an earlier point, by seq and by time.
	out, _, err = runCmd(t, "", "replay", "--data", dir, "--until", "30")
	if err != nil || !strings.Contains(out, "seq 30 ") {
		t.Fatalf("replay --until 30: %q, %v", out, err)
	}
	out, _, err = runCmd(t, "", "replay", "--data", dir, "--until", "2026-03-01T12:00:10Z", "--json")
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Seq == 0 || rep.Seq >= last {
		t.Fatalf("replay --until a time: %q, %v", out, err)
	}

	out, _, err = runCmd(t, "", "verify", "--data", dir)
	if err != nil || !strings.Contains(out, hash) {
		t.Fatalf("verify: %q, %v", out, err)
	}

	out, errOut, err := runCmd(t, "", "log", "--data", dir, "--agent", "editor", "--type", "change", "--limit", "5")
	if err != nil || strings.Count(out, "\n") != 5 || !strings.Contains(errOut, "more: --from") {
		t.Fatalf("log: %q %q, %v", out, errOut, err)
	}
	out, _, err = runCmd(t, "", "log", "--data", dir, "--path", "report.s1", "--json", "--limit", "1000")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev intents.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("log --json line %q: %v", line, err)
		}
		if !strings.Contains(line, "report.s1") {
			t.Fatalf("log --path report.s1 returned %q", line)
		}
	}
	if _, _, err := runCmd(t, "", "log", "--data", dir, "--type", "bogus"); err == nil {
		t.Fatal("log --type bogus succeeded")
	}

	archive := filepath.Join(t.TempDir(), "old.jsonl")
	out, _, err = runCmd(t, "", "compact", "--data", dir, "--before", "100", "--archive", archive)
	if err != nil || !strings.Contains(out, "now starts at 100") {
		t.Fatalf("compact: %q, %v", out, err)
	}
	b, err := os.ReadFile(archive)
	if err != nil || strings.Count(string(b), "\n") != 99 {
		t.Fatalf("archive holds %d lines, %v", strings.Count(string(b), "\n"), err)
	}
	_, _, err = runCmd(t, "", "replay", "--data", dir, "--until", "50")
	if err == nil || !strings.Contains(err.Error(), "compacted") {
		t.Fatalf("replay into the compacted past: %v", err)
	}
	out, _, err = runCmd(t, "", "replay", "--data", dir, "--json")
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Hash != hash {
		t.Fatalf("replay after compaction: %q, %v", out, err)
	}
	if out, _, err := runCmd(t, "", "verify", "--data", dir); err != nil {
		t.Fatalf("verify after compaction: %q, %v", out, err)
	}
}

func TestReadCommandsNeedALog(t *testing.T) {
	for _, cmd := range []string{"replay", "verify", "log"} {
		_, _, err := runCmd(t, "", cmd, "--data", t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "no event log") {
			t.Errorf("%s on an empty directory: %v", cmd, err)
		}
	}
}

// A log from before increments were kept finite folds to +Inf: replay says
// so, with the state's hash, instead of failing on a bare JSON error or
// printing nothing.
func TestReplayOfANumberJSONCannotHold(t *testing.T) {
	dir := t.TempDir()
	lg, err := eventlog.Open(logDir(dir), &eventlog.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 2; seq++ {
		ev := &intents.Event{Seq: seq, ID: ulid.Make(), Time: time.Now().UTC(), Type: intents.EventChange, Agent: "w1",
			Change: &intents.Change{Writes: []intents.Applied{{Path: "n.i", Op: intents.OpIncr,
				Value: json.RawMessage("1.7976931348623157e308"), OldVersion: seq - 1, NewVersion: seq}}}}
		if err := lg.Append(context.Background(), &eventlog.Batch{Events: []*intents.Event{ev}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"replay", "--data", dir, "--json"}, {"replay", "--data", dir}} {
		out, _, err := runCmd(t, "", args...)
		if err == nil || !strings.Contains(err.Error(), "JSON cannot hold") || !strings.Contains(err.Error(), "sha256") || out != "" {
			t.Fatalf("%v: %v, printed %q", args, err, out)
		}
	}
}
