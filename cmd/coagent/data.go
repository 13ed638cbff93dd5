package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/coagent/coagent/eventlog"
)

// defaultData is where `coagent serve` keeps its data.
const defaultData = "coagent-data"

// logDir is where the event log lives inside a data directory.
func logDir(data string) string { return filepath.Join(data, "eventlog") }

// openLog opens the event log of a data directory that must already hold
// one: the read commands never create an empty log by mistake.
func openLog(data string) (*eventlog.Log, error) {
	dir := logDir(data)
	if m, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*")); len(m) == 0 {
		return nil, fmt.Errorf("no event log in %s (looked for %s)", data, dir)
	}
	log, err := eventlog.Open(dir, nil)
	if errors.Is(err, eventlog.ErrLocked) {
		return nil, fmt.Errorf("%w\n  a running coordinator holds %s: stop it first, or ask it live with 'coagent log --follow', 'coagent state' or 'coagent txn list'", err, data)
	}
	return log, err
}
