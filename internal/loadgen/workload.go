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
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// agentStats is one agent's count, merged at the end. Only its agent's
// goroutine touches it.
type agentStats struct {
	lat, updLat                          []time.Duration
	intents, updates, conflicts, retries int
	merged, tries, gaveUp, reads         int
	resends, roundTrips                  int
	outcomes                             map[intents.Outcome]int
	// applied counts the updates applied per key.
	applied map[string]int
}

// agent is one simulated agent: its connection, its way to the
// coordinator, its random source and what it has seen.
type agent struct {
	cfg      Config
	name     string
	nc       *nats.Conn
	subj     intents.Subjects
	tx       submitter
	rng      *rand.Rand
	zipf     *rand.Zipf
	keys     []string // the shared keys, or nil
	shard    int      // the index of its shard in Config.Shards
	own      string   // its own path, with no shared keys
	deadline time.Time
	st       agentStats
	// versions are those of the last decision this agent got: an rmw try
	// uses them instead of a read when they name its key.
	versions map[string]uint64
}

// coordinated runs the agents against the coordinator for the duration,
// then checks the keys they wrote.
func coordinated(ctx context.Context, cfg Config, conns []*nats.Conn, run string, res *Result) error {
	base := intents.Subjects{Prefix: cfg.Prefix}
	shards := cfg.Shards
	if len(shards) == 0 {
		shards = []string{intents.DefaultShard}
	}
	// Each shard's board, subjects and shared keys.
	boards := make([]string, len(shards))
	subjs := make([]intents.Subjects, len(shards))
	keys := make([][]string, len(shards))
	for j, sh := range shards {
		boards[j], subjs[j] = "bench"+run, base.Shard(sh)
		if len(cfg.Shards) > 0 {
			boards[j] += "-" + sh
			if err := moveBoard(ctx, conns[0], base, boards[j], sh); err != nil {
				return err
			}
		}
		for k := range cfg.Keys {
			keys[j] = append(keys[j], boards[j]+".k"+strconv.Itoa(k))
		}
	}
	res.OwnPaths = cfg.Keys == 0
	agents := make([]*agent, len(conns))
	for i, nc := range conns {
		j := i % len(shards)
		name := "bench-" + run + "-" + strconv.Itoa(i)
		tx, err := newSubmitter(cfg, nc, subjs[j], name)
		if err != nil {
			return err
		}
		defer tx.close()
		a := &agent{cfg: cfg, name: name, nc: nc, subj: subjs[j], tx: tx, keys: keys[j], shard: j,
			rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i))),
			st:  agentStats{outcomes: map[intents.Outcome]int{}, applied: map[string]int{}}}
		if keys[j] == nil {
			a.own = boards[j] + ".a" + strconv.Itoa(i)
		} else if cfg.Skew > 1 && len(keys[j]) > 1 {
			a.zipf = rand.NewZipf(a.rng, cfg.Skew, 1, uint64(len(keys[j])-1))
		}
		agents[i] = a
	}
	errs := make([]error, len(agents))
	var wg sync.WaitGroup
	used := ProcessCPU()
	start := time.Now()
	for i, a := range agents {
		a.deadline = start.Add(cfg.Duration)
		wg.Go(func() { errs[i] = a.run(ctx) })
	}
	wg.Wait()
	res.Duration = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var decided int
	for _, a := range agents {
		decided += a.st.intents
	}
	res.CPU = cpuPer(used, decided)

	want := make([]map[string]int, len(shards))
	for j := range shards {
		want[j] = map[string]int{}
		for _, k := range keys[j] {
			want[j][k] = 0
		}
	}
	var lats, updLats [][]time.Duration
	for _, a := range agents {
		s := &a.st
		if a.own != "" {
			want[a.shard][a.own] = 0
		}
		for k, n := range s.applied {
			want[a.shard][k] += n
		}
		if len(cfg.Shards) > 0 {
			if res.PerShard == nil {
				res.PerShard = map[string]ShardCount{}
			}
			c := res.PerShard[shards[a.shard]]
			c.Intents += s.intents
			c.Updates += s.updates
			res.PerShard[shards[a.shard]] = c
		}
		lats = append(lats, s.lat)
		updLats = append(updLats, s.updLat)
		res.Intents += s.intents
		res.Updates += s.updates
		res.Conflicts += s.conflicts
		res.Retries += s.retries
		res.Merged += s.merged
		res.Tries += s.tries
		res.GaveUp += s.gaveUp
		res.Reads += s.reads
		res.Resends += s.resends
		res.RoundTrips += s.roundTrips
		for o, n := range s.outcomes {
			res.Outcomes[o] += n
		}
	}
	if res.OwnPaths {
		res.Keys = 0
		for _, w := range want {
			res.Keys += len(w)
		}
	}
	res.Latency = summarize(slices.Concat(lats...))
	res.UpdateLatency = summarize(slices.Concat(updLats...))
	res.Throughput = float64(res.Intents) / res.Duration.Seconds()
	res.UpdateThroughput = float64(res.Updates) / res.Duration.Seconds()
	if res.Updates > 0 {
		res.TriesPerUpdate = float64(res.Tries) / float64(res.Updates)
	}
	if res.Tries > 0 {
		res.RoundTripsPerTry = float64(res.RoundTrips) / float64(res.Tries)
	}
	// Each write of these workloads adds one to its key's value, or (apply
	// on an agent's own path) sets it to the agent's count of them so far.
	values := cfg.Workload != WorkloadApply || (res.OwnPaths && cfg.ProposeRatio == 0)
	for j := range shards {
		checked, bad, lost, err := check(ctx, conns[0], subjs[j], want[j], values)
		if err != nil {
			return err
		}
		res.Checked += checked
		res.Mismatches = append(res.Mismatches, bad...)
		res.Lost += lost
	}
	return nil
}

// run sends the workload's updates until the deadline; the intent under
// way then gets its decision (and a granted transaction its commit).
func (a *agent) run(ctx context.Context) error {
	for time.Now().Before(a.deadline) {
		if err := ctx.Err(); err != nil {
			return err
		}
		path := a.key()
		var err error
		switch a.cfg.Workload {
		case WorkloadApply:
			if a.cfg.ProposeRatio > 0 && a.rng.Float64() < a.cfg.ProposeRatio {
				err = a.txn(ctx, path)
			} else {
				err = a.apply(ctx, path)
			}
		case WorkloadRMW:
			err = a.rmw(ctx, path)
		case WorkloadIncr:
			err = a.incr(ctx, path)
		case WorkloadTxn:
			err = a.txn(ctx, path)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (a *agent) key() string {
	switch {
	case a.keys == nil:
		return a.own
	case a.zipf != nil:
		return a.keys[a.zipf.Uint64()]
	default:
		return a.keys[a.rng.IntN(len(a.keys))]
	}
}

// decide sends one intent and counts its decision.
func (a *agent) decide(ctx context.Context, in *intents.Intent) (*intents.Decision, error) {
	start := time.Now()
	d, err := a.tx.submit(ctx, in, &a.st)
	if err != nil {
		return nil, err
	}
	st := &a.st
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
}

// update tries one update until a decision has outcome done, a rejection is
// not retryable, MaxTries tries have failed, or the measurement is over,
// with a backoff between tries. next makes each try's intent (with a fresh id), given the
// rejection of the try before (nil for the first). It returns the decision
// that did it, or nil.
func (a *agent) update(ctx context.Context, done intents.Outcome,
	next func(ctx context.Context, rejected *intents.Decision) (*intents.Intent, error)) (*intents.Decision, error) {
	var rejected *intents.Decision
	for try := 1; ; try++ {
		in, err := next(ctx, rejected)
		if err != nil {
			return nil, err
		}
		in.ID, in.Agent = ulid.Make().String(), a.name
		a.st.tries++
		d, err := a.decide(ctx, in)
		if err != nil {
			return nil, err
		}
		if d.Outcome == done {
			return d, nil
		}
		if !d.Retryable || try == MaxTries {
			a.st.gaveUp++
			return nil, nil
		}
		// The measurement is over: an update under way is not tried
		// again, so that the run ends within a round trip of its end.
		if !time.Now().Before(a.deadline) {
			return nil, nil
		}
		a.st.retries++
		if !pause(ctx, backoff(try, a.rng)) {
			return nil, ctx.Err()
		}
		rejected = d
	}
}

// applied counts an update to path that started at start.
func (a *agent) applied(path string, start time.Time) {
	a.st.updates++
	a.st.applied[path]++
	a.st.updLat = append(a.st.updLat, time.Since(start))
}

// apply sets path: on an agent's own path to its count of updates there,
// so the value checks too.
func (a *agent) apply(ctx context.Context, path string) error {
	start := time.Now()
	value := json.RawMessage(strconv.Itoa(a.st.applied[path] + 1))
	d, err := a.update(ctx, intents.OutcomeApplied, func(context.Context, *intents.Decision) (*intents.Intent, error) {
		return &intents.Intent{Kind: intents.KindApply, Writes: []intents.Write{{Path: path, Op: intents.OpSet, Value: value}}}, nil
	})
	if err == nil && d != nil {
		a.applied(path, start)
	}
	return err
}

// incr adds one to path, with no read.
func (a *agent) incr(ctx context.Context, path string) error {
	start := time.Now()
	d, err := a.update(ctx, intents.OutcomeApplied, func(context.Context, *intents.Decision) (*intents.Intent, error) {
		return &intents.Intent{Kind: intents.KindApply,
			Writes: []intents.Write{{Path: path, Op: intents.OpIncr, Value: json.RawMessage("1")}}}, nil
	})
	if err == nil && d != nil {
		a.applied(path, start)
	}
	return err
}

// rmw reads path, then sets it to its value plus one, on the condition that
// its version is still the one read. A rejection carries the current
// versions, and the next try uses them instead of a read; so does the
// first try when the agent's last decision named path.
//
// The value of a version is known without a read because of what this
// workload does: a key starts absent (version 0), and every commit to it
// is one of these sets, each adding one, so the value at version v is v.
// A read checks that; the lost-update check at the end checks it again.
// A client whose writes do not say their values this way needs a read for
// the value.
func (a *agent) rmw(ctx context.Context, path string) error {
	start := time.Now()
	d, err := a.update(ctx, intents.OutcomeApplied, func(ctx context.Context, rejected *intents.Decision) (*intents.Intent, error) {
		known := a.versions
		if rejected != nil {
			known = rejected.Versions
		}
		v, ok := known[path]
		if !ok {
			var err error
			if v, err = a.read(ctx, path); err != nil {
				return nil, err
			}
		}
		return &intents.Intent{Kind: intents.KindApply, OnConflict: intents.OnConflictReject,
			Reads:  []intents.Read{{Path: path, Version: &v}},
			Writes: []intents.Write{{Path: path, Op: intents.OpSet, Value: json.RawMessage(strconv.FormatUint(v+1, 10))}}}, nil
	})
	if err != nil {
		return err
	}
	if d != nil {
		a.applied(path, start)
		a.versions = d.Versions
	} else {
		a.versions = nil
	}
	return nil
}

// read returns path's version, checking that its value is the version (see
// rmw).
func (a *agent) read(ctx context.Context, path string) (uint64, error) {
	a.st.reads++
	a.st.roundTrips++
	st, err := stateGet(ctx, a.nc, a.subj, []string{path}, maxRequestTimeout)
	if err != nil {
		return 0, fmt.Errorf("loadgen: agent %s: %w", a.name, err)
	}
	e := st[path]
	if n, ok := e.number(); e.Exists && (!ok || n != float64(e.Version)) {
		return 0, fmt.Errorf("loadgen: agent %s: rmw key %s holds %s at version %d: something else writes the bench's keys",
			a.name, path, e.Value, e.Version)
	}
	return e.Version, nil
}

// txn proposes a transaction that reads and increments path, then commits
// it.
func (a *agent) txn(ctx context.Context, path string) error {
	start := time.Now()
	g, err := a.update(ctx, intents.OutcomeGranted, func(context.Context, *intents.Decision) (*intents.Intent, error) {
		return &intents.Intent{Kind: intents.KindPropose, LeaseMS: 10000, OnConflict: intents.OnConflictReject,
			Reads: []intents.Read{{Path: path}}, Writes: []intents.Write{{Path: path, Op: intents.OpIncr}}}, nil
	})
	if err != nil || g == nil {
		return err
	}
	d, err := a.decide(ctx, &intents.Intent{ID: ulid.Make().String(), Agent: a.name, Kind: intents.KindCommit,
		Txn: g.Txn, Fence: g.Fence, Writes: []intents.Write{{Path: path, Op: intents.OpIncr, Value: json.RawMessage("1")}}})
	if err != nil {
		return err
	}
	if d.Outcome == intents.OutcomeCommitted {
		a.applied(path, start)
	}
	return nil
}

// backoff is the pause after the try-th failed try: exponential with full
// jitter (a uniform draw up to BackoffBase·2^(try-1), capped at
// BackoffCap), or the bound itself with no rng.
func backoff(try int, rng *rand.Rand) time.Duration {
	bound := BackoffCap
	if try < 8 { // 1 ms << 7 is past the cap already
		bound = min(BackoffCap, BackoffBase<<(try-1))
	}
	if rng == nil {
		return bound
	}
	return time.Duration(rng.Int64N(int64(bound)))
}

// pause waits d, or less if ctx ends; it reports whether ctx is still live.
func pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// moveBoard gives board, which no one wrote yet, to shard, as coagent
// shards assign does; on the wire itself, as the rest of the load
// generator speaks, not through agents.MoveBoard.
func moveBoard(ctx context.Context, nc *nats.Conn, base intents.Subjects, board, shard string) error {
	if shard == intents.DefaultShard {
		return nil
	}
	ask := func(subject string, req intents.HandoffRequest, out *intents.HandoffReply) error {
		body, _ := json.Marshal(req)
		m, err := nc.RequestWithContext(ctx, subject, body)
		if err != nil {
			return fmt.Errorf("loadgen: %s: %w", subject, err)
		}
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
			return fmt.Errorf("loadgen: %s: %s: %s", subject, code, m.Header.Get("Nats-Service-Error"))
		}
		return json.Unmarshal(m.Data, out)
	}
	var rel, adopted intents.HandoffReply
	if err := ask(base.API(intents.APIShardRelease), intents.HandoffRequest{Board: board, Shard: shard}, &rel); err != nil {
		return err
	}
	return ask(base.Shard(shard).API(intents.APIShardAdopt), intents.HandoffRequest{Board: board, Shard: intents.DefaultShard,
		From: rel.Handoff, Seq: rel.Seq}, &adopted)
}
