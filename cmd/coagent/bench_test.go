package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// A short bench on hot keys with transactions in the mix: it must see
// conflicts, retry them, and end with every counter equal to the
// increments applied to it.
func TestBench(t *testing.T) {
	out, _, err := runCmd(t, "", "bench", "--agents", "1,4", "--keys", "3", "--skew", "1.5", "--propose", "0.5",
		"--duration", "500ms", "--json")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	runs := 0
	for dec.More() {
		var r struct {
			Agents             int
			Intents, Updates   int
			Conflicts, Retries int
			Lost               int64
			Throughput         float64
			RawThroughput      float64
		}
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		runs++
		if r.Lost != 0 || r.Updates == 0 || r.Intents < r.Updates || r.Throughput <= 0 || r.RawThroughput <= 0 {
			t.Fatalf("run with %d agents: %+v", r.Agents, r)
		}
		if r.Agents == 4 && r.Conflicts == 0 {
			t.Errorf("4 agents on 3 hot keys with transactions saw no conflict: %+v", r)
		}
	}
	if runs != 2 {
		t.Fatalf("%d results, want 2", runs)
	}
}
