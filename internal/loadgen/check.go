package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// entry is one path of a state.get reply.
type entry struct {
	Exists  bool            `json:"exists"`
	Value   json.RawMessage `json:"value"`
	Version uint64          `json:"version"`
}

// number returns the entry's value as a number, and whether it is one.
func (e entry) number() (float64, bool) {
	f, err := strconv.ParseFloat(string(e.Value), 64)
	return f, err == nil
}

// stateGet reads paths with the coordinator's state.get.
func stateGet(ctx context.Context, nc *nats.Conn, subj intents.Subjects, paths []string, timeout time.Duration) (map[string]entry, error) {
	body, err := json.Marshal(map[string][]string{"paths": paths})
	if err != nil {
		return nil, fmt.Errorf("state.get: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reply, err := nc.RequestWithContext(rctx, subj.API(intents.APIStateGet), body)
	if err != nil {
		return nil, fmt.Errorf("state.get: %w", err)
	}
	if code := reply.Header.Get(headerErrorCode); code != "" {
		return nil, fmt.Errorf("state.get: the coordinator answered %s: %s", code, reply.Header.Get(headerError))
	}
	var st struct {
		Values map[string]entry `json:"values"`
	}
	if err := json.Unmarshal(reply.Data, &st); err != nil {
		return nil, fmt.Errorf("state.get: %q: %w", reply.Data, err)
	}
	return st.Values, nil
}

// check reads every key of want back and compares it with the updates
// applied to it: its version, the number of commits that changed it, must
// equal them, and so must its value when values says the workload makes
// the value that count. It returns how many keys it read, those that
// disagree (in path order), and the sum over keys of the difference
// between the applied updates and the version.
func check(ctx context.Context, nc *nats.Conn, subj intents.Subjects, want map[string]int, values bool) (int, []Mismatch, int64, error) {
	paths := make([]string, 0, len(want))
	for p := range want {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	st, err := stateGet(ctx, nc, subj, paths, 30*time.Second)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("loadgen: the lost-update check: %w", err)
	}
	var bad []Mismatch
	var lost int64
	for _, p := range paths {
		e, n := st[p], want[p]
		diff := int64(n) - int64(e.Version)
		lost += max(diff, -diff)
		ok := diff == 0
		if values && n > 0 {
			v, isNum := e.number()
			ok = ok && e.Exists && isNum && v == float64(n)
		}
		if !ok {
			bad = append(bad, Mismatch{Path: p, Applied: n, Version: e.Version, Value: string(e.Value)})
		}
	}
	return len(paths), bad, lost, nil
}
