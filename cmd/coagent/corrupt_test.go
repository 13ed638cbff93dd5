package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// writeBulkData writes a data directory whose store is mostly events, in
// one table: 2,000 intents with 1 KB values, no snapshot (so a restart
// folds every event), the log opened once more to flush its WAL.
func writeBulkData(t *testing.T) (dir, table string) {
	t.Helper()
	dir = t.TempDir()
	c, err := coordinator.OpenCore(logDir(dir), coordinator.CoreOptions{Log: eventlog.Options{NoSync: true}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	value, _ := json.Marshal(strings.Repeat("v", 1000))
	for i := range 2000 {
		at := now.Add(time.Duration(i) * time.Millisecond)
		in := intents.Intent{ID: ulid.MustNew(ulid.Timestamp(at), ulid.DefaultEntropy()).String(), Agent: "writer", Kind: intents.KindApply,
			Writes: []intents.Write{{Path: fmt.Sprintf("report.s%d", i%4), Op: intents.OpSet, Value: value}}}
		raw, _ := json.Marshal(in)
		if _, _, err := c.Submit(at, "writer", raw); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := eventlog.Open(logDir(dir), nil) // recovers the WAL into a table
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	tables, _ := filepath.Glob(filepath.Join(logDir(dir), "*.sst"))
	if len(tables) != 1 {
		t.Fatalf("tables %v, want one", tables)
	}
	return dir, tables[0]
}

// TestCorruptDataDir: on a store with a damaged table, verify, log and
// replay each print one line that names the file and exit 1, and serve
// refuses to start. Before the log handled Pebble's corruption reports
// they died with a Pebble panic of a hundred lines.
func TestCorruptDataDir(t *testing.T) {
	dir, table := writeBulkData(t)
	if _, _, status := runMain(t, "verify", "--data", dir); status != 0 {
		t.Fatalf("verify of the undamaged store: exit %d", status)
	}
	data, err := os.ReadFile(table)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(data) * 4 / 10; i < len(data)/2; i++ { // in the events, which are most of it
		data[i] ^= 0x5a
	}
	if err := os.WriteFile(table, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"verify", "--data", dir},
		{"log", "--data", dir, "--limit", "100000"},
		{"replay", "--data", dir},
		{"serve", "--data", dir, "--listen", "127.0.0.1:-1", "--http", "off"}, // another test may hold the default port
	} {
		stdout, stderr, status := runMain(t, args...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if status != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "coagent: ") ||
			!strings.Contains(lines[0], table+" is corrupt") || !strings.Contains(lines[0], "checksum mismatch") {
			t.Errorf("%s: exit %d, stderr:\n%s", args[0], status, stderr)
		}
		if args[0] != "log" && stdout != "" { // log prints the events before the damage
			t.Errorf("%s printed %q", args[0], stdout)
		}
	}
}
