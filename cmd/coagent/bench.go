package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/internal/loadgen"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// benchFlags are the flags of `coagent bench`.
type benchFlags struct {
	conn                   natsFlags
	path, workload, agents string
	keys, replicas         int
	skew, propose          float64
	duration               time.Duration
	out                    output
	cpuProfile             string
	unsynced               bool
	redis                  string
	shards                 int
}

// newBenchCmd is `coagent bench`: the load generator, against a
// coordinator of its own (embedded NATS, a fresh data directory) unless
// --nats names one.
func newBenchCmd(e *env) *cobra.Command {
	var f benchFlags
	c := &cobra.Command{
		Use:   "bench",
		Short: "measure throughput and latency against raw JetStream publish and raw request/reply, and check no update is lost",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if c.Flags().Changed("replicas") {
				// The embedded server is alone: it stores a stream once.
				if f.conn.url == "" {
					return usagef(c, "--replicas %d needs --nats URL,… of a JetStream cluster: bench's embedded server is alone and stores each stream once", f.replicas)
				}
				if f.replicas < 1 || f.replicas > coordinator.MaxReplicas {
					return usagef(c, "--replicas %d: want 1 to %d", f.replicas, coordinator.MaxReplicas)
				}
			}
			return runBench(c.Context(), &f, e.stdout, e.stderr)
		},
	}
	fs := c.Flags()
	f.conn.register(fs, "")
	fs.StringVar(&f.path, "path", string(loadgen.PathAPI), "how intents reach the coordinator: api (request/reply on coagent.api.submit.<agent>) or stream (coagent.intents.<agent>, decisions on coagent.decisions.<agent>)")
	fs.StringVar(&f.workload, "workload", string(loadgen.WorkloadApply), "what the agents do: apply (each sets its own path), rmw (state.get, then set value+1 with a versioned read), incr (incr 1, no read) or txn (propose, commit)")
	fs.StringVar(&f.agents, "agents", "", "comma-separated numbers of concurrent agents, one run each (default 1,16,64 for apply, 50 for the others)")
	fs.IntVar(&f.keys, "keys", 0, "number of shared keys (default 16 for rmw, incr and txn; for apply, 0 gives each agent its own path)")
	fs.Float64Var(&f.skew, "skew", 0, "Zipf exponent of the choice among shared keys (> 1 makes hot keys; 0 is uniform)")
	fs.Float64Var(&f.propose, "propose", 0, "with --workload apply, the share of updates made as propose+commit transactions (0..1)")
	fs.IntVar(&f.replicas, "replicas", 1, "with --nats of a JetStream cluster: how many servers store the raw JetStream publish baseline's stream, 1 to 5 (give 3 beside a coordinator whose streams are R3)")
	fs.DurationVar(&f.duration, "duration", 5*time.Second, "length of each measurement (each baseline, then the coordinator)")
	f.out.register(fs, true)
	fs.StringVar(&f.redis, "redis", "", "with --workload rmw or incr, the redis-server to run the Redis + Lua baseline on (AOF with appendfsync always, then everysec): default the one on PATH, none if there is none; off for none")
	fs.BoolVar(&f.unsynced, "unsynced", false, "measurement only: the bench's own coordinator does not fsync its event log, so that what the durable commit costs can be told apart (nothing it answers is durable)")
	_ = fs.MarkHidden("unsynced")
	fs.IntVar(&f.shards, "shards", 0, "run N shards, each a coordinator process of its own (coagent serve --shard) on the embedded server, the agents spread over them, each shard on a board of its own; print each coordinator's CPU per intent (docs/sharding.md)")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the coordinator's measurement (embedded server, coordinator and agents alike; the baselines left out) to FILE, or with several --agents to FILE-<agents> for each")
	return c
}

func runBench(ctx context.Context, f *benchFlags, stdout, stderr io.Writer) error {
	conn := &f.conn
	cfg := loadgen.Config{Prefix: conn.prefix, Path: loadgen.Path(f.path), Workload: loadgen.Workload(f.workload),
		Keys: f.keys, Skew: f.skew, ProposeRatio: f.propose, Duration: f.duration, Replicas: f.replicas}
	counts, err := benchAgents(cfg.Workload, f.agents)
	if err != nil {
		return err
	}
	// Bad flags are reported before a server starts.
	early := cfg
	early.EnsureDefaults()
	if err := early.Validate(); err != nil {
		return err
	}
	if f.cpuProfile != "" {
		// Each run's profile covers its coordinator measurement alone: the
		// baselines' would mix the server's work for them with its work
		// for the coordinator.
		cfg.Phase = func() func() {
			name := profileName(f.cpuProfile, cfg.Agents, len(counts))
			pf, err := os.Create(name)
			if err == nil {
				err = pprof.StartCPUProfile(pf)
			}
			if err != nil {
				fmt.Fprintf(stderr, "bench: --cpuprofile: %v\n", err)
				return func() {}
			}
			return func() {
				pprof.StopCPUProfile()
				pf.Close()
				fmt.Fprintf(stderr, "bench: CPU profile of the coordinator's measurement with %d agents (baselines left out) in %s\n", cfg.Agents, name)
			}
		}
	}
	cfg.URL = conn.url
	var procs []*shardProc
	if f.shards > 0 {
		if conn.url != "" || f.unsynced {
			return fmt.Errorf("bench: --shards runs its own coordinators on the embedded server: no --nats, no --unsynced")
		}
		dir, ns, cleanup, err := benchServer()
		if err != nil {
			return err
		}
		defer cleanup()
		if procs, err = startShards(ctx, f.shards, ns.ClientURL(), dir, stderr); err != nil {
			return err
		}
		defer stopShards(procs)
		for _, p := range procs {
			cfg.Shards = append(cfg.Shards, p.name)
		}
		cfg.Phase = measureShards(procs, cfg.Phase)
		cfg.URL = ns.ClientURL()
		fmt.Fprintf(stderr, "bench: %d shards, each a coordinator process (coagent serve --shard) on %s (embedded NATS), data in %s\n", f.shards, cfg.URL, dir)
	}
	if cfg.URL == "" {
		dir, ns, cleanup, err := benchServer()
		if err != nil {
			return err
		}
		defer cleanup()
		nc, err := nats.Connect(ns.ClientURL(), nats.InProcessServer(ns))
		if err != nil {
			return err
		}
		defer nc.Close()
		opts := coordinator.Options{Prefix: conn.prefix, Interest: coordinator.InterestOf(ns)}
		opts.Core.Log.NoSync = f.unsynced
		svc, err := coordinator.Start(ctx, nc, logDir(dir), opts)
		if err != nil {
			return err
		}
		defer svc.Shutdown(context.Background())
		cfg.Metrics = svc.Registry()
		// The request/reply baseline's responder is connected as the
		// coordinator is, so both answer across the same transport.
		rc, err := nats.Connect(ns.ClientURL(), nats.InProcessServer(ns))
		if err != nil {
			return err
		}
		defer rc.Close()
		cfg.URL, cfg.Responder = ns.ClientURL(), rc
		fmt.Fprintf(stderr, "bench: coordinator on %s (embedded NATS, in process; agents on loopback TCP), data in %s; %s, raw JetStream with its default (no per-message fsync)\n", cfg.URL, dir, synced(f.unsynced))
	}
	for _, n := range counts {
		cfg.Agents = n
		res, err := loadgen.Run(ctx, cfg)
		if err != nil {
			return err
		}
		if res.Redis, err = redisBaselines(ctx, cfg, f.redis, stderr); err != nil {
			return err
		}
		if f.out.json() {
			if err := json.NewEncoder(stdout).Encode(res); err != nil {
				return err
			}
		} else {
			printBench(stdout, res, cfg.Duration)
			if len(procs) > 0 {
				printShards(stdout, res, procs)
			}
		}
		if err := benchCheck(res); err != nil {
			return err
		}
	}
	return nil
}

// benchServer starts the bench's embedded server, its store in a fresh
// directory that cleanup removes once the server is down.
func benchServer() (dir string, ns *server.Server, cleanup func(), err error) {
	if dir, err = os.MkdirTemp("", "coagent-bench-"); err != nil {
		return "", nil, nil, err
	}
	if ns, err = embedded("127.0.0.1:-1", filepath.Join(dir, "jetstream")); err != nil {
		os.RemoveAll(dir)
		return "", nil, nil, err
	}
	return dir, ns, func() { ns.Shutdown(); os.RemoveAll(dir) }, nil
}

func synced(unsynced bool) string {
	if unsynced {
		return "the event log UNSYNCED (--unsynced: a measurement; nothing it answers is durable)"
	}
	return "decisions fsynced by the event log"
}

// profileName is where the CPU profile of the run with agents goes: file,
// or, when there are several runs, file with "-<agents>" before its
// extension.
func profileName(file string, agents, runs int) string {
	if runs == 1 {
		return file
	}
	ext := filepath.Ext(file)
	return strings.TrimSuffix(file, ext) + "-" + strconv.Itoa(agents) + ext
}

// benchAgents returns the agent counts of the runs: the --agents list, or
// the workload's default.
func benchAgents(w loadgen.Workload, list string) ([]int, error) {
	if list == "" {
		list = "50"
		if w == loadgen.WorkloadApply {
			list = "1,16,64"
		}
	}
	var counts []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--agents %q: want positive numbers", list)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// benchCheck fails a run whose counts disagree with the state, or that
// applied nothing.
func benchCheck(res *loadgen.Result) error {
	if len(res.Mismatches) > 0 || res.Lost != 0 {
		var keys []string
		for _, m := range res.Mismatches[:min(len(res.Mismatches), 5)] {
			keys = append(keys, fmt.Sprintf("%s: %d updates applied, version %d, value %s", m.Path, m.Applied, m.Version, orAbsent(m.Value)))
		}
		return fmt.Errorf("bench: %s over %s, %d agents: %d of %d keys disagree with the updates applied to them (%d off in all): %s",
			res.Workload, res.Path, res.Agents, len(res.Mismatches), res.Checked, res.Lost, strings.Join(keys, "; "))
	}
	if res.Updates == 0 {
		return fmt.Errorf("bench: %s over %s, %d agents: nothing was applied (outcomes %v)", res.Workload, res.Path, res.Agents, res.Outcomes)
	}
	return nil
}

func orAbsent(value string) string {
	if value == "" {
		return "absent"
	}
	return value
}

// printBench prints one run as a table: the coordinator's updates (and its
// intents, where an update takes more than one), the two baselines, and
// the updates' ratios to each; then the counts and the check.
func printBench(w io.Writer, r *loadgen.Result, d time.Duration) {
	where := "on " + plural(r.Keys, "shared key")
	if r.OwnPaths {
		where = "each on a path of its own"
	}
	fmt.Fprintf(w, "\n%s over %s: %s, %s, %v a measurement\n", r.Workload, r.Path, plural(r.Agents, "agent"), where, d)
	fmt.Fprintf(w, "%-26s %9s %9s %9s   %9s %8s %8s   %9s %8s %8s\n", "", "per s", "p50", "p99",
		"tput/pub", "p50/pub", "p99/pub", "tput/rr", "p50/rr", "p99/rr")
	row := func(name string, tput float64, lat loadgen.Latency) {
		fmt.Fprintf(w, "%-26s %9.0f %9s %9s", name, tput, round(lat.P50), round(lat.P99))
	}
	ratio := func(x loadgen.Ratio) {
		fmt.Fprintf(w, "   %8.2fx %7.2fx %7.2fx", x.Throughput, x.P50, x.P99)
	}
	row("coagent updates", r.UpdateThroughput, r.UpdateLatency)
	ratio(r.VsPublish)
	ratio(r.VsRequest)
	fmt.Fprintln(w)
	if r.Workload == loadgen.WorkloadRMW || r.Workload == loadgen.WorkloadTxn || r.Tries != r.Updates {
		row("coagent intents", r.Throughput, r.Latency)
		fmt.Fprintln(w)
	}
	row(fmt.Sprintf("raw JetStream publish (R%d)", r.RawReplicas), r.RawThroughput, r.RawLatency)
	fmt.Fprintln(w)
	row("raw request/reply", r.ReqReplyThroughput, r.ReqReplyLatency)
	fmt.Fprintln(w)
	printRedis(w, r, r.Redis)
	if len(r.Stages) > 0 {
		fmt.Fprintf(w, "in the coordinator an intent waited, on average: %s to be decided, %s for its group's commit, %s for the group to be durable\n",
			round(r.Stages["decide"]), round(r.Stages["commit"]), round(r.Stages["durable"]))
	}
	if in, ok := r.Stages["coordinator"]; ok && r.Latency.Mean > in {
		fmt.Fprintf(w, "an agent waited %s on average for a decision: %s in the coordinator from the intent's arrival to its decision being durable, %s on the way there and back (the agent's client, the server, the coordinator's intake and answer)\n",
			round(r.Latency.Mean), round(in), round(r.Latency.Mean-in))
	}
	if r.Syncs > 0 {
		fmt.Fprintf(w, "the event log committed %d groups, %.1f events each, each %s on average from its write to its fsync's end",
			r.Syncs, r.EventsPerSync, round(r.Stages["sync"]))
		if f := r.Fsyncs; f != nil {
			fmt.Fprintf(w, "; %d fsyncs, %s on average, p50 ≤ %s, p99 ≤ %s", f.Count, round(f.Mean), round(f.P50), round(f.P99))
		}
		fmt.Fprintln(w)
	}
	if r.CPU > 0 && r.RawCPU > 0 && r.ReqReplyCPU > 0 {
		fmt.Fprintf(w, "CPU of the bench process: %s an intent, %.2fx a raw publish's (%s), %.2fx a raw round trip's (%s)\n",
			r.CPU.Round(100*time.Nanosecond), float64(r.CPU)/float64(r.RawCPU), r.RawCPU.Round(100*time.Nanosecond),
			float64(r.CPU)/float64(r.ReqReplyCPU), r.ReqReplyCPU.Round(100*time.Nanosecond))
	}
	fmt.Fprintf(w, "%d updates in %.2fs: %.2f tries an update, %.2f round trips a try (%d reads); %d conflicts, %d retries, %d sent again, %d merged, %d given up\n",
		r.Updates, r.Duration.Seconds(), r.TriesPerUpdate, r.RoundTripsPerTry, r.Reads, r.Conflicts, r.Retries, r.Resends, r.Merged, r.GaveUp)
	if len(r.Servers) > 1 {
		fmt.Fprintf(w, "agents connected across %d servers: %s\n", len(r.Servers), spread(r.Servers))
	}
	if len(r.Mismatches) == 0 && r.Lost == 0 {
		fmt.Fprintf(w, "check: each of %s holds exactly the updates applied to it\n", plural(r.Checked, "key"))
	} else {
		fmt.Fprintf(w, "check: %d of %s disagree with the updates applied to them (%d off in all)\n", len(r.Mismatches), plural(r.Checked, "key"), r.Lost)
	}
}

// spread lists the agents on each server, in the servers' order.
func spread(servers map[string]int) string {
	var parts []string
	for _, url := range slices.Sorted(maps.Keys(servers)) {
		parts = append(parts, fmt.Sprintf("%d on %s", servers[url], url))
	}
	return strings.Join(parts, ", ")
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func round(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
