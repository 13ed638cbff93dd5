// Package loadgen is the load generator behind `coagent bench`: a number
// of agents, each on its own NATS connection, submit intents over the wire
// as fast as their decisions come back, on a set of counters chosen with a
// hot-key skew. It measures throughput and decision latency, counts
// outcomes, conflicts, retries and merges, and checks at the end that no
// update was lost: every counter equals the increments applied to it. Beside
// it, the same agents measure raw JetStream synchronous publish-and-ack on
// the same server and transport, the baseline the figures are read against.
package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// Config says what load to make. Zero fields take their defaults.
type Config struct {
	// URL of the NATS server. Required.
	URL string
	// Prefix of the coordinator's subjects. The default is "coagent".
	Prefix string
	// Agents is how many agents submit concurrently. The default is 16.
	Agents int
	// Keys is how many counters they share. The default is 1000.
	Keys int
	// Skew is the Zipf exponent of key choice (> 1 concentrates load on a
	// few hot keys; 0 is uniform). The default is 0.
	Skew float64
	// ProposeRatio is the share of updates made as propose+commit
	// transactions (which read their counter, so they conflict on hot keys)
	// instead of one-shot applies. The default is 0.
	ProposeRatio float64
	// Duration of each measurement. The default is 5s.
	Duration time.Duration
	// Seed makes key choice reproducible. The default is 1.
	Seed uint64
}

func (c *Config) defaults() {
	if c.Agents <= 0 {
		c.Agents = 16
	}
	if c.Keys <= 0 {
		c.Keys = 1000
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
}

// Latency summarizes a set of durations.
type Latency struct {
	P50, P90, P99, Max time.Duration
}

func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return Latency{P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: ds[len(ds)-1]}
}

// Result is what one run measured.
type Result struct {
	Agents     int
	Duration   time.Duration
	Intents    int     // intents decided (each retry counts)
	Updates    int     // increments applied (applied applies and committed commits)
	Throughput float64 // intents decided per second
	Latency    Latency // from publish to final decision
	Outcomes   map[intents.Outcome]int
	Conflicts  int // rejections for conflict or stale read
	Retries    int // intents sent again after a retryable rejection
	Merged     int // decisions that name others in merged_with
	// Lost is the difference between the counters' total and Updates:
	// zero unless an update was lost or applied twice.
	Lost int64

	RawThroughput float64 // raw JetStream publish-and-ack messages per second
	RawLatency    Latency
}

// Run measures the raw baseline, then the coordinator, with the same agents
// and transport.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	conns := make([]*nats.Conn, cfg.Agents)
	for i := range conns {
		nc, err := nats.Connect(cfg.URL, nats.Name("coagent bench "+strconv.Itoa(i)))
		if err != nil {
			return nil, fmt.Errorf("bench: connect: %w", err)
		}
		defer nc.Close()
		conns[i] = nc
	}
	res := &Result{Agents: cfg.Agents, Duration: cfg.Duration, Outcomes: map[intents.Outcome]int{}}
	if err := raw(ctx, cfg, conns, res); err != nil {
		return nil, err
	}
	if err := coordinated(ctx, cfg, conns, res); err != nil {
		return nil, err
	}
	return res, nil
}

// raw runs synchronous JetStream publish-and-ack on a file stream of its
// own from every agent for the duration.
func raw(ctx context.Context, cfg Config, conns []*nats.Conn, res *Result) error {
	js, err := jetstream.New(conns[0])
	if err != nil {
		return err
	}
	name := "COAGENT_BENCH_RAW"
	_ = js.DeleteStream(ctx, name)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"coagent-bench-raw.>"},
		Storage: jetstream.FileStorage}); err != nil {
		return fmt.Errorf("bench: raw stream: %w", err)
	}
	defer js.DeleteStream(context.Background(), name)
	payload := make([]byte, 160) // about an intent's size
	lat := make([][]time.Duration, len(conns))
	var wg sync.WaitGroup
	deadline := time.Now().Add(cfg.Duration)
	var firstErr atomic.Value
	for i, nc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			js, err := jetstream.New(nc)
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			subj := "coagent-bench-raw." + strconv.Itoa(i)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				start := time.Now()
				if _, err := js.Publish(ctx, subj, payload); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[i] = append(lat[i], time.Since(start))
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return fmt.Errorf("bench: raw publish: %w", err)
	}
	all := slices.Concat(lat...)
	res.RawThroughput = float64(len(all)) / cfg.Duration.Seconds()
	res.RawLatency = summarize(all)
	return nil
}

// agentStats is one agent's count, merged at the end.
type agentStats struct {
	lat                                  []time.Duration
	intents, updates, conflicts, retries int
	merged                               int
	outcomes                             map[intents.Outcome]int
}

// coordinated runs the agents against the coordinator, then checks the
// counters.
func coordinated(ctx context.Context, cfg Config, conns []*nats.Conn, res *Result) error {
	subj := intents.Subjects{Prefix: cfg.Prefix}
	run := ulid.Make().String()[:10] // keeps runs on one server apart
	base := "bench" + run
	stats := make([]agentStats, len(conns))
	var wg sync.WaitGroup
	deadline := time.Now().Add(cfg.Duration)
	errs := make([]error, len(conns))
	for i, nc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = agent(ctx, cfg, nc, subj, base, "bench-"+run+"-"+strconv.Itoa(i), uint64(i), deadline, &stats[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var lats [][]time.Duration
	for _, s := range stats {
		lats = append(lats, s.lat)
		res.Intents += s.intents
		res.Updates += s.updates
		res.Conflicts += s.conflicts
		res.Retries += s.retries
		res.Merged += s.merged
		for o, n := range s.outcomes {
			res.Outcomes[o] += n
		}
	}
	res.Latency = summarize(slices.Concat(lats...))
	res.Throughput = float64(res.Intents) / cfg.Duration.Seconds()

	// Every counter must hold exactly the increments applied to it.
	paths := make([]string, cfg.Keys)
	for k := range paths {
		paths[k] = base + ".k" + strconv.Itoa(k)
	}
	body, _ := json.Marshal(map[string][]string{"paths": paths})
	resp, err := conns[0].Request(subj.API("state.get"), body, 30*time.Second)
	if err != nil {
		return fmt.Errorf("bench: read the counters: %w", err)
	}
	var st struct {
		Values map[string]struct {
			Value any `json:"value"`
		} `json:"values"`
	}
	if err := json.Unmarshal(resp.Data, &st); err != nil {
		return fmt.Errorf("bench: read the counters: %q: %w", resp.Data, err)
	}
	var total int64
	for _, v := range st.Values {
		if f, ok := v.Value.(float64); ok {
			total += int64(f)
		}
	}
	res.Lost = int64(res.Updates) - total
	return nil
}

// agent submits until the deadline, one intent at a time, waiting for each
// final decision; retryable rejections are retried with a fresh id.
func agent(ctx context.Context, cfg Config, nc *nats.Conn, subj intents.Subjects, base, name string, seed uint64,
	deadline time.Time, st *agentStats) error {
	st.outcomes = map[intents.Outcome]int{}
	decisions := make(chan *intents.Decision, 64)
	sub, err := nc.Subscribe(subj.Decisions(name), func(m *nats.Msg) {
		var d intents.Decision
		if json.Unmarshal(m.Data, &d) == nil {
			decisions <- &d
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	rng := rand.New(rand.NewPCG(cfg.Seed, seed))
	var zipf *rand.Zipf
	if cfg.Skew > 1 && cfg.Keys > 1 {
		zipf = rand.NewZipf(rng, cfg.Skew, 1, uint64(cfg.Keys-1))
	}
	key := func() string {
		k := rng.IntN(cfg.Keys)
		if zipf != nil {
			k = int(zipf.Uint64())
		}
		return base + ".k" + strconv.Itoa(k)
	}
	// send publishes one intent and waits for its final decision.
	send := func(in *intents.Intent) (*intents.Decision, error) {
		raw, _ := json.Marshal(in)
		start := time.Now()
		if err := nc.Publish(subj.Intents(name), raw); err != nil {
			return nil, err
		}
		timeout := time.NewTimer(30 * time.Second)
		defer timeout.Stop()
		for {
			select {
			case d := <-decisions:
				if d.Intent != in.ID || !d.Outcome.Final() {
					continue
				}
				st.lat = append(st.lat, time.Since(start))
				st.intents++
				st.outcomes[d.Outcome]++
				if len(d.MergedWith) > 0 {
					st.merged++
				}
				if d.Reason == intents.ReasonConflict || d.Reason == intents.ReasonStaleRead {
					st.conflicts++
				}
				return d, nil
			case <-timeout.C:
				return nil, fmt.Errorf("bench: agent %s: no decision for %s in 30s", name, in.ID)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		path := key()
		if rng.Float64() >= cfg.ProposeRatio {
			for attempt := 0; ; attempt++ {
				d, err := send(&intents.Intent{ID: ulid.Make().String(), Agent: name, Kind: intents.KindApply,
					Writes: []intents.Write{{Path: path, Op: intents.OpIncr}}})
				if err != nil {
					return err
				}
				if d.Outcome == intents.OutcomeApplied {
					st.updates++
				}
				if !d.Retryable || attempt == 10 {
					break
				}
				st.retries++
			}
			continue
		}
		// A transaction that reads its counter: it conflicts with every
		// other writer of a hot key while it is in flight.
		var g *intents.Decision
		for attempt := 0; ; attempt++ {
			d, err := send(&intents.Intent{ID: ulid.Make().String(), Agent: name, Kind: intents.KindPropose, LeaseMS: 10000,
				Reads: []intents.Read{{Path: path}}, Writes: []intents.Write{{Path: path, Op: intents.OpIncr}}})
			if err != nil {
				return err
			}
			if d.Outcome == intents.OutcomeGranted {
				g = d
				break
			}
			if !d.Retryable || attempt == 10 || !time.Now().Before(deadline) {
				break
			}
			st.retries++
		}
		if g == nil {
			continue
		}
		d, err := send(&intents.Intent{ID: ulid.Make().String(), Agent: name, Kind: intents.KindCommit, Txn: g.Txn, Fence: g.Fence,
			Writes: []intents.Write{{Path: path, Op: intents.OpIncr, Value: json.RawMessage("1")}}})
		if err != nil {
			return err
		}
		if d.Outcome == intents.OutcomeCommitted {
			st.updates++
		}
	}
	return nil
}
