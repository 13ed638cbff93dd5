package engine

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/bugs"
)

// The planted bug claim-fence lets a claim's owner write its task under a
// stale fence, and only when planted: an engine configured as production
// configures it, with the zero bugs.Set, fences the write.
func TestClaimFenceBugOffByDefault(t *testing.T) {
	for _, c := range []struct {
		name    string
		planted bugs.Set
		want    intents.Outcome
	}{
		{"by default", bugs.Set{}, intents.OutcomeRejected},
		{"planted", bugs.Set{ClaimFence: true}, intents.OutcomeApplied},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := New(Config{Bugs: c.planted})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.SetRules(base, []byte(`{"rules":[{"pattern":"tasks.*","kind":"task","lease":"10s"}]}`), "test", nil); err != nil {
				t.Fatal(err)
			}
			n := 0
			submit := func(agent string, fence uint64, w intents.Write) *intents.Decision {
				n++
				raw, _ := json.Marshal(&intents.Intent{ID: fuzzID(n), Agent: agent, Kind: intents.KindApply, Fence: fence,
					Writes: []intents.Write{w}})
				evs := e.Submit(base.Add(time.Duration(n)*time.Millisecond), Input{Agent: agent, Raw: raw}, nil).Events
				return evs[len(evs)-1].Decision
			}
			owner := intents.Write{Path: "tasks.t1.owner", Op: intents.OpSet, Value: json.RawMessage(`"w1"`)}
			first := submit("w1", 0, owner)
			if first.Outcome != intents.OutcomeApplied || first.Fence == 0 {
				t.Fatalf("claim: %+v", first)
			}
			if d := submit("w1", first.Fence, intents.Write{Path: "tasks.t1.owner", Op: intents.OpDelete}); d.Outcome != intents.OutcomeApplied {
				t.Fatalf("release: %+v", d)
			}
			second := submit("w1", 0, owner)
			if second.Outcome != intents.OutcomeApplied || second.Fence <= first.Fence {
				t.Fatalf("claim again: %+v", second)
			}
			// The old fence, on the owner's write.
			late := submit("w1", first.Fence, intents.Write{Path: "tasks.t1.note", Op: intents.OpSet, Value: json.RawMessage(`1`)})
			if late.Outcome != c.want {
				t.Errorf("a write under the stale fence %d (the live one %d): %s %s, want %s", first.Fence, second.Fence, late.Outcome, late.Reason, c.want)
			}
		})
	}
}
