package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// startCoordinator starts a server and a real coordinator on it (Pebble log in
// the test's directory), both stopped when the test ends, and returns the
// server and a connection of the test's own.
func startCoordinator(t *testing.T) (*server.Server, *nats.Conn) {
	t.Helper()
	ns := natstest.Run(t)
	coordtest.Start(t, ns, coordinator.Options{})
	return ns, natstest.Connect(t, ns)
}

// checkCounts fails the test unless the run's lost-update check passed on
// every key it should have read and something was applied.
func checkCounts(t *testing.T, cfg Config, r *Result) {
	t.Helper()
	keys := cfg.Keys
	if keys == 0 {
		keys = cfg.Agents
	}
	if r.Lost != 0 || len(r.Mismatches) > 0 || r.Checked != keys {
		t.Fatalf("lost-update check: %d keys read (want %d), %d off, mismatches %+v", r.Checked, keys, r.Lost, r.Mismatches)
	}
	if r.Updates == 0 || r.Intents < r.Updates || r.Tries < r.Updates || r.RoundTrips < r.Tries {
		t.Fatalf("counts: %d updates, %d intents, %d tries, %d round trips", r.Updates, r.Intents, r.Tries, r.RoundTrips)
	}
	if r.RawThroughput <= 0 || r.ReqReplyThroughput <= 0 {
		t.Fatalf("a baseline measured nothing: %+v", r)
	}
}

// Every workload over both paths, against a real coordinator: at the end
// each key's version (and value) equals the updates the agents counted,
// so an update lost, applied twice or counted twice fails it. On hot keys
// the compare-and-set and transaction workloads collide and retry.
func TestWorkloads(t *testing.T) {
	ns, _ := startCoordinator(t)
	for _, path := range Paths {
		for _, w := range Workloads {
			t.Run(string(w)+"/"+string(path), func(t *testing.T) {
				cfg := Config{URL: ns.ClientURL(), Path: path, Workload: w, Agents: 4, Duration: 200 * time.Millisecond}
				if w != WorkloadApply {
					cfg.Keys = 2
				}
				r, err := Run(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				checkCounts(t, cfg, r)
				if r.OwnPaths != (w == WorkloadApply) {
					t.Errorf("own paths %v with workload %s", r.OwnPaths, w)
				}
				switch w {
				case WorkloadRMW:
					// On a loaded machine a short run may end before a
					// conflict is retried: it runs again, on fresh keys.
					for again := 0; r.Retries == 0 && again < 5; again++ {
						if r, err = Run(context.Background(), cfg); err != nil {
							t.Fatal(err)
						}
						checkCounts(t, cfg, r)
					}
					if r.Reads == 0 || r.Conflicts == 0 || r.Retries == 0 {
						t.Errorf("4 agents on 2 keys: %d reads, %d conflicts, %d retries", r.Reads, r.Conflicts, r.Retries)
					}
					// A retry reuses the rejection's versions: fewer
					// reads than tries.
					if r.Reads >= r.Tries {
						t.Errorf("%d reads for %d tries: the rejections' versions were not used", r.Reads, r.Tries)
					}
				case WorkloadTxn:
					if r.Conflicts == 0 || r.Outcomes[intents.OutcomeCommitted] != r.Updates {
						t.Errorf("4 agents on 2 keys: %d conflicts, outcomes %v, %d updates", r.Conflicts, r.Outcomes, r.Updates)
					}
				default:
					if r.Reads != 0 || r.Tries != r.Updates {
						t.Errorf("uncontended %s: %d reads, %d tries for %d updates", w, r.Reads, r.Tries, r.Updates)
					}
				}
			})
		}
	}
}

// The legacy mix: applies and transactions on three keys with a hot-key
// skew. The check holds on the versions (the values mix sets and
// increments).
func TestApplyWithTransactions(t *testing.T) {
	ns, _ := startCoordinator(t)
	cfg := Config{URL: ns.ClientURL(), Agents: 4, Keys: 3, Skew: 1.5, ProposeRatio: 0.5, Duration: 300 * time.Millisecond}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, cfg, r)
	if r.Outcomes[intents.OutcomeCommitted] == 0 || r.Outcomes[intents.OutcomeApplied] == 0 {
		t.Fatalf("outcomes %v: want both applies and commits", r.Outcomes)
	}
}

// A request timeout far shorter than a decision takes: every intent is
// sent again, by request on the API path, by publish after decision.get
// on the stream path, and each decision still counts once.
func TestSentAgainCountsOnce(t *testing.T) {
	ns, _ := startCoordinator(t)
	for _, path := range Paths {
		for _, w := range []Workload{WorkloadIncr, WorkloadRMW} {
			t.Run(string(w)+"/"+string(path), func(t *testing.T) {
				cfg := Config{URL: ns.ClientURL(), Path: path, Workload: w, Agents: 3, Keys: 2,
					Duration: 200 * time.Millisecond, RequestTimeout: 50 * time.Microsecond}
				r, err := Run(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				checkCounts(t, cfg, r)
				if r.Resends == 0 {
					t.Fatalf("no intent was sent again with a 50µs timeout: %+v", r)
				}
			})
		}
	}
}

// The check itself: a key holding fewer updates than the agents counted
// (one lost) or more (one applied twice) is reported, with its numbers.
func TestCheckFindsLostAndDoubledUpdates(t *testing.T) {
	_, nc := startCoordinator(t)
	subj := intents.Subjects{}
	submit := func(w intents.Write) {
		t.Helper()
		in, _ := json.Marshal(&intents.Intent{ID: ulid.Make().String(), Agent: "t", Kind: intents.KindApply, Writes: []intents.Write{w}})
		reply, err := nc.Request(subj.Submit("t"), in, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var d intents.Decision
		if err := json.Unmarshal(reply.Data, &d); err != nil || d.Outcome != intents.OutcomeApplied {
			t.Fatalf("%s: %v", reply.Data, err)
		}
	}
	for range 3 {
		submit(intents.Write{Path: "c.n", Op: intents.OpIncr})
	}
	submit(intents.Write{Path: "c.s", Op: intents.OpSet, Value: json.RawMessage("7")})
	ctx := context.Background()
	cases := []struct {
		want   map[string]int
		values bool
		bad    []Mismatch
		lost   int64
	}{
		{want: map[string]int{"c.n": 3, "c.none": 0}, values: true},
		{want: map[string]int{"c.n": 4}, values: true, bad: []Mismatch{{Path: "c.n", Applied: 4, Version: 3, Value: "3"}}, lost: 1},
		{want: map[string]int{"c.n": 2}, bad: []Mismatch{{Path: "c.n", Applied: 2, Version: 3, Value: "3"}}, lost: 1},
		{want: map[string]int{"c.none": 1}, bad: []Mismatch{{Path: "c.none", Applied: 1}}, lost: 1},
		// One set: the version agrees; the value does only if it counts.
		{want: map[string]int{"c.s": 1}},
		{want: map[string]int{"c.s": 1}, values: true, bad: []Mismatch{{Path: "c.s", Applied: 1, Version: 1, Value: "7"}}},
	}
	for _, c := range cases {
		n, bad, lost, err := check(ctx, nc, subj, c.want, c.values)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(c.want) || fmt.Sprint(bad) != fmt.Sprint(c.bad) || lost != c.lost {
			t.Errorf("check %v (values %v): %d keys, %+v, %d off; want %d, %+v, %d off", c.want, c.values, n, bad, lost, len(c.want), c.bad, c.lost)
		}
	}
}

// A bad load names the field and its value, every one at once.
func TestValidate(t *testing.T) {
	cfg := Config{Path: "bus", Workload: "mix", Keys: -1, Skew: -2, ProposeRatio: 2, Replicas: 6}
	cfg.EnsureDefaults()
	err := cfg.Validate()
	for _, want := range []string{`path "bus"`, `workload "mix"`, "keys -1", "skew -2", "propose ratio 2", "replicas 6: want 1 to 5"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to name %s", err, want)
		}
	}
	cfg = Config{Workload: WorkloadIncr, ProposeRatio: 0.5}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "propose ratio 0.5 with workload incr") {
		t.Errorf("propose with incr: %v", err)
	}
	if _, err := Run(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), "URL is empty") {
		t.Errorf("Run without a URL: %v", err)
	}
	cfg = Config{Replicas: -1}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "replicas -1") {
		t.Errorf("replicas -1: %v", err)
	}
}

// A server alone cannot store a stream more than once: a baseline of 3
// replicas on it is refused, naming the stream's replicas, before the
// coordinator is measured.
func TestReplicasNeedACluster(t *testing.T) {
	ns, _ := startCoordinator(t)
	_, err := Run(context.Background(), Config{URL: ns.ClientURL(), Agents: 1, Replicas: 3, Duration: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "with 3 replicas") {
		t.Fatalf("3 replicas on a server alone: %v", err)
	}
}

// Defaults: apply gives each agent its own path; the hot-key workloads
// take 50 agents on 16 keys.
func TestDefaults(t *testing.T) {
	for _, c := range []struct {
		w            Workload
		agents, keys int
	}{{WorkloadApply, 16, 0}, {WorkloadRMW, 50, 16}, {WorkloadIncr, 50, 16}, {WorkloadTxn, 50, 16}} {
		cfg := Config{Workload: c.w}
		cfg.EnsureDefaults()
		if cfg.Agents != c.agents || cfg.Keys != c.keys || cfg.Path != PathAPI || cfg.Replicas != 1 {
			t.Errorf("%s: %d agents, %d keys, path %s, %d replicas; want %d, %d, api, 1", c.w, cfg.Agents, cfg.Keys, cfg.Path, cfg.Replicas, c.agents, c.keys)
		}
	}
}

// Full jitter: each pause is below its exponential bound, which stops at
// the cap.
func TestBackoff(t *testing.T) {
	for try, bound := range map[int]time.Duration{1: time.Millisecond, 2: 2 * time.Millisecond, 7: 64 * time.Millisecond,
		8: BackoffCap, 40: BackoffCap} {
		if got := backoff(try, nil); got != bound {
			t.Errorf("bound after try %d: %v, want %v", try, got, bound)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[time.Duration]bool{}
	for range 100 {
		d := backoff(3, rng)
		if d < 0 || d >= 4*time.Millisecond {
			t.Fatalf("pause %v after try 3: want it in [0, 4ms)", d)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Errorf("%d distinct pauses in 100: no jitter", len(seen))
	}
}
