package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// fuzzPaths and friends are small alphabets, so random bytes make intents
// that collide, nest and wait on each other.
var (
	fuzzAgents = []string{"a", "b", "c"}
	fuzzPaths  = []string{"d", "d.x", "d.x.y", "d.z", "e.n", "e.list", "e"}
	fuzzOps    = []intents.Op{intents.OpSet, intents.OpDelete, intents.OpMerge, intents.OpAppend, intents.OpIncr}
	fuzzValues = []string{`1`, `"s"`, `{"y":2}`, `[1]`, `null`, `{"q":null}`, `2.5`, ``,
		`{"claim":1,"evidence":["e"]}`, `{"claim":2,"evidence":["e"],"supersedes":1}`, `{"owner":"a","n":1}`}
	fuzzConds = []string{`state.d.x == nil`, `has("e.n")`, `state.e.n > 1`, `old.d == nil`, `state.d.x.y.z != 3`,
		`version("d") < 5`, `state.e.list[0] == 1`, `1 +`, `"x"`,
		// Over the evaluation budget, an invalid decision that must fold.
		`all(1..99999, {all(1..99, {# > 0})})`, `len(repeat("ab", 999999)) > 0`,
		`now() > date("2025-01-01") && keys(state.d)[0] != "x"`, `state.d.x matches "(a|b)*c" || toJSON(state.e) != ""`}
	fuzzPolicy = []intents.OnConflict{"", intents.OnConflictWait, intents.OnConflictEscalate}
	// fuzzRules are board rules over the same paths, put in force at random
	// moments: every kind of rule, and none.
	fuzzRules = []string{``,
		`{"agents":{"a":{"roles":["w"]}},"rules":[{"pattern":"e.**","writers":["role:w","b"]},` +
			`{"pattern":"d.x","transitions":{"A":["B"],"B":["A","C"]},"initial":["A"]},` +
			`{"pattern":"d.z","schema":{"type":"number"}},{"pattern":"d.*","on_conflict":"wait"}],` +
			`"invariants":[{"name":"cap","expr":"state.e.n == nil || state.e.n < 5"}]}`,
		`{"quotas":{"c":{"intents_per_second":1,"burst":2,"max_txns":1},"role:w":{"max_txns":2}},"agents":{"b":{"roles":["w"]}},` +
			`"limits":{"writes":1,"expr_nodes":6}}`,
		`{"rules":[{"pattern":"**","readers":["a"]}]}`,
		`{"rules":[{"pattern":"d.*","kind":"fact"},{"pattern":"e","kind":"task"},{"pattern":"d","kind":"decision"}]}`,
		// People in the loop: a gate, a review, a panel of arbiters.
		`{"agents":{"a":{"roles":["lead"]}},"rules":[{"pattern":"d.x.**","approve":{"by":["role:lead","b"],"quorum":2,"timeout":"2s","exempt":["c"],"fallback":"apply"}},` +
			`{"pattern":"e.n","transitions":{"A":["B"]},"review":{"by":["a","b"],"timeout":"2s"}},{"pattern":"d.z","review":{"by":["c"],"on":["precondition_failed"]}},` +
			`{"pattern":"d.**","arbiters":{"quorum":2}},{"pattern":"e.**","approve":{"by":["judge"],"timeout":"1s"}}]}`,
	}
	// fuzzAsks are the meta of an apply that asks a question, or not.
	fuzzAsks = []string{`{"ask":{"question":"how many?","schema":{"type":"number"},"timeout_ms":1500}}`,
		`{"ask":{"question":"who?","by":["a"]}}`, `{"ask":{"question":""}}`, `{"ask":7}`, `{"why":"x"}`}
	// fuzzVoters vote on cases, and resolve them as arbiters.
	fuzzVoters  = []string{"a", "b", "c", "judge", "j2"}
	fuzzVerdict = []string{intents.VerdictApprove, intents.VerdictDeny, intents.VerdictAnswer, "maybe"}
)

// FuzzEngine feeds the engine intents built from random bytes — valid and
// not, racing on a few paths — and random raw documents. It must never
// panic, and the log it emits must fold back into the same state.
func FuzzEngine(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{1, 0, 2, 0, 0, 0, 1, 1, 3, 1, 0, 2, 0, 1, 1, 7, 9, 9, 9})
	f.Add([]byte(`{"id":"01JD0000000000000000000000","agent":"a","kind":"apply"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := New(Config{DefaultLease: 2 * time.Second, MaxTxnsPerAgent: 3, MaxParkedPerAgent: 3,
			ArbiterTimeout: 3 * time.Second, LeaseWarning: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var log []*intents.Event
		now := base
		var grants []*intents.Decision
		away := map[string]*intents.Handoff{} // the boards given to s2
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		pick := func(n int) int { return int(next()) % n }
		for n := 0; len(data) > 0 && n < 200; n++ {
			var evs []*intents.Event
			switch op := next() % 8; op {
			case 0: // raw bytes
				agent, k := fuzzAgents[pick(3)], pick(64)
				if k > len(data) {
					k = len(data)
				}
				evs = e.Submit(now, Input{Agent: agent, Raw: data[:k]}, nil).Events
				data = data[k:]
			case 1: // time passes, an arbiter resolves an open case, the rules change, or a board moves
				if pick(6) == 0 {
					// A board goes to shard s2, or comes back with what it
					// took there; either is refused while something holds it.
					board := intents.Board(fuzzPaths[pick(len(fuzzPaths))])
					if h := away[board]; h != nil {
						r, err := e.Adopt(now, board, "s2", 1, h.Nodes, nil)
						if err != nil {
							t.Fatalf("adopting board %s back: %v", board, err)
						}
						evs, away[board] = r.Events, nil
						break
					}
					if r, _, h, err := e.Release(now, board, "s2", nil); err == nil {
						evs, away[board] = r.Events, h
					} else if !errors.Is(err, ErrHandoff) {
						t.Fatalf("release of board %s: %v", board, err)
					}
					break
				}
				if pick(4) == 0 {
					r, err := e.SetRules(now, []byte(fuzzRules[pick(len(fuzzRules))]), "fuzz", nil)
					if err != nil {
						t.Fatalf("a fuzz rules file does not compile: %v", err)
					}
					evs = r.Events
					break
				}
				if parked := e.Parked(); len(parked) > 0 && pick(2) == 0 {
					id := parked[pick(len(parked))]
					res := &intents.Resolution{Escalation: id, Arbiter: "judge", Rationale: "fuzz"}
					c, _ := e.Case(id)
					var ids []string
					if c != nil {
						for _, in := range c.Intents {
							ids = append(ids, in.ID)
						}
					}
					if len(ids) > 0 {
						switch pick(3) {
						case 0:
							res.Winners = []string{ids[pick(len(ids))]}
						case 1:
							res.Losers = []string{ids[pick(len(ids))]}
						default:
							res.Replacement = &intents.Intent{ID: fuzzID(1000 + n), Agent: "judge", Kind: intents.KindApply,
								Writes: []intents.Write{{Path: fuzzPaths[pick(len(fuzzPaths))], Op: intents.OpSet, Value: json.RawMessage(`7`)}}}
						}
					}
					res.Arbiter = fuzzVoters[pick(len(fuzzVoters))]
					r, _ := e.Resolve(now, res, nil)
					evs = r.Events
					break
				}
				if parked := e.Parked(); len(parked) > 0 && pick(2) == 0 {
					v := &intents.Vote{Case: parked[pick(len(parked))], Agent: fuzzVoters[pick(len(fuzzVoters))],
						Verdict: fuzzVerdict[pick(len(fuzzVerdict))], Rationale: "fuzz"}
					if v.Verdict == intents.VerdictAnswer {
						v.Answer = json.RawMessage(fuzzValues[pick(len(fuzzValues))])
					}
					r, _ := e.Vote(now, v, nil)
					evs = r.Events
					break
				}
				now = now.Add(time.Duration(pick(8)) * 500 * time.Millisecond)
				evs = e.Tick(now, nil).Events
			default:
				in := &intents.Intent{ID: fuzzID(n), Agent: fuzzAgents[pick(3)], OnConflict: fuzzPolicy[pick(3)], WaitMS: int64(pick(4)) * 1000}
				switch pick(5) {
				case 0, 1:
					in.Kind = intents.KindApply
				case 2:
					in.Kind = intents.KindPropose
				default:
					in.Kind = []intents.Kind{intents.KindCommit, intents.KindAbort, intents.KindRenew}[pick(3)]
					in.OnConflict, in.WaitMS = "", 0
					if len(grants) > 0 {
						g := grants[pick(len(grants))]
						in.Txn, in.Fence = g.Txn, g.Fence+uint64(pick(2))
					} else {
						in.Txn, in.Fence = "T", 1
					}
				}
				if in.Kind != intents.KindAbort && in.Kind != intents.KindRenew {
					for range 1 + pick(2) {
						w := intents.Write{Path: fuzzPaths[pick(len(fuzzPaths))], Op: fuzzOps[pick(len(fuzzOps))]}
						if v := fuzzValues[pick(len(fuzzValues))]; v != "" && w.Op != intents.OpDelete {
							w.Value = json.RawMessage(v)
						}
						in.Writes = append(in.Writes, w)
					}
				}
				if pick(3) == 0 {
					in.Pre = []string{fuzzConds[pick(len(fuzzConds))]}
				}
				if pick(3) == 0 {
					in.Post = []string{fuzzConds[pick(len(fuzzConds))]}
				}
				if pick(3) == 0 {
					v := uint64(pick(3))
					in.Reads = []intents.Read{{Path: fuzzPaths[pick(len(fuzzPaths))], Version: &v}}
				}
				if in.Kind == intents.KindApply && pick(5) == 0 {
					in.Meta = json.RawMessage(fuzzAsks[pick(len(fuzzAsks))])
				}
				raw, _ := json.Marshal(in)
				evs = e.Submit(now, Input{Agent: in.Agent, Raw: raw}, nil).Events
			}
			for _, ev := range evs {
				if d := ev.Decision; d != nil && d.Outcome == intents.OutcomeGranted {
					grants = append(grants, d)
				}
			}
			log = append(log, evs...)
			if len(e.Txns()) > 3*len(fuzzAgents) {
				t.Fatalf("%d txns in flight, above the per-agent limits", len(e.Txns()))
			}
		}
		fresh, _ := New(Config{DefaultLease: 2 * time.Second, MaxTxnsPerAgent: 3, MaxParkedPerAgent: 3,
			ArbiterTimeout: 3 * time.Second, LeaseWarning: time.Second})
		for _, ev := range log {
			if err := fresh.Apply(ev); err != nil {
				t.Fatalf("replay: %v", err)
			}
		}
		if fresh.State().Hash() != e.State().Hash() {
			t.Fatal("replayed state differs from the live one")
		}
		if fmt.Sprint(fresh.Txns()) != fmt.Sprint(e.Txns()) || fmt.Sprint(fresh.Parked()) != fmt.Sprint(e.Parked()) {
			t.Fatal("replayed transactions or parked intents differ")
		}
	})
}

func fuzzID(n int) string {
	var u ulid.ULID
	_ = u.SetTime(ulid.Timestamp(base))
	u[15], u[14] = byte(n), byte(n>>8)
	return u.String()
}

// FuzzApply feeds Apply arbitrary decoded events, as a corrupt or foreign
// log would: it may refuse them, never panic.
func FuzzApply(f *testing.F) {
	f.Add([]byte(`[{"seq":1,"type":"grant","grant":{"txn":"t","agent":"a","fence":1,"lease_ms":1000,"expires":"2026-01-01T00:00:01Z","propose":{"id":"x","agent":"a","kind":"propose","writes":[{"path":"a","op":"set"}]}}},{"seq":2,"type":"release","release":{"txn":"t","agent":"a","cause":"aborted"}}]`))
	f.Add([]byte(`[{"seq":1,"type":"change","change":{"writes":[{"path":"a.b","op":"incr","value":"x"}]}}]`))
	f.Add([]byte(`[{"seq":1,"type":"renew","grant":{"txn":"nope"}},{"seq":1,"type":"wait","wait":{}}]`))
	// An answer to a gate with no question, on an intent with no write.
	f.Add([]byte(`[{"seq":1,"type":"escalate","wait":{"intent":{"id":"x","agent":"a","kind":"apply"},"gate":{"rule":0,"path":"a","by":["b"],"quorum":1,"fallback":"reject"}}},` +
		`{"seq":2,"type":"vote","vote":{"case":"x","agent":"b","verdict":"answer","answer":1}}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var evs []*intents.Event
		if json.Unmarshal(data, &evs) != nil {
			return
		}
		e, _ := New(Config{})
		for _, ev := range evs {
			if ev == nil {
				continue
			}
			before := e.Seq()
			if err := e.Apply(ev); err != nil && e.Seq() != before {
				t.Fatalf("a refused event moved the sequence: %v", err)
			}
		}
		// Whatever was folded, timers must still fire without panicking.
		e.Tick(base.Add(time.Hour), nil)
	})
}
