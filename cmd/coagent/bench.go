package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/coagent/coagent/agents/loadgen"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// benchCommand runs the load generator, against a coordinator of its own
// (embedded NATS, a fresh data directory) unless --nats names one.
type benchCommand struct{}

func (*benchCommand) Synopsis() string {
	return "measure throughput and latency against raw JetStream publish-ack, and check no update is lost"
}

func (c *benchCommand) Run(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var conn natsFlags
	conn.register(fs, "")
	agentList := fs.String("agents", "1,16,64", "comma-separated numbers of concurrent agents, one run each")
	keys := fs.Int("keys", 1000, "number of counters")
	skew := fs.Float64("skew", 0, "Zipf exponent of key choice (> 1 makes hot keys; 0 is uniform)")
	propose := fs.Float64("propose", 0, "share of updates made as propose+commit transactions (0..1)")
	duration := fs.Duration("duration", 5*time.Second, "length of each measurement")
	asJSON := fs.Bool("json", false, "print one JSON result per run")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (embedded server, coordinator and agents alike) to FILE")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: coagent bench [--nats URL] [--agents 1,16,64] [--keys N] [--skew S] [--propose R] [--duration D] [--json] [--cpuprofile FILE]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	var counts []int
	for _, f := range strings.Split(*agentList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("--agents %q: want positive numbers", *agentList)
		}
		counts = append(counts, n)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	url := conn.url
	if url == "" {
		dir, err := os.MkdirTemp("", "coagent-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		ns, err := embedded("127.0.0.1:-1", filepath.Join(dir, "jetstream"))
		if err != nil {
			return err
		}
		defer ns.Shutdown()
		nc, err := nats.Connect(ns.ClientURL(), nats.InProcessServer(ns))
		if err != nil {
			return err
		}
		defer nc.Close()
		svc, err := coordinator.Start(ctx, nc, logDir(dir), coordinator.Options{Prefix: conn.prefix})
		if err != nil {
			return err
		}
		defer svc.Shutdown(context.Background())
		url = ns.ClientURL()
		fmt.Fprintf(stderr, "bench: coordinator on %s (embedded NATS, agents on loopback TCP), data in %s; decisions fsynced by the event log, raw JetStream with its default (no per-message fsync)\n", url, dir)
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "%6s  %12s %9s %9s  %12s %9s %9s  %7s %7s  %9s %8s %8s %6s %s\n", "agents", "intents/s", "p50", "p99",
			"raw msgs/s", "raw p50", "raw p99", "ratio", "p99 x", "updates", "confl", "retries", "merged", "lost")
	}
	for _, n := range counts {
		res, err := loadgen.Run(ctx, loadgen.Config{URL: url, Prefix: conn.prefix, Agents: n, Keys: *keys, Skew: *skew, ProposeRatio: *propose, Duration: *duration})
		if err != nil {
			return err
		}
		if *asJSON {
			if err := json.NewEncoder(stdout).Encode(res); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(stdout, "%6d  %12.0f %9s %9s  %12.0f %9s %9s  %6.2fx %6.2fx  %9d %8d %8d %6d %d\n", n, res.Throughput,
				round(res.Latency.P50), round(res.Latency.P99), res.RawThroughput, round(res.RawLatency.P50), round(res.RawLatency.P99),
				res.Throughput/max(res.RawThroughput, 1), float64(res.Latency.P99)/float64(max(res.RawLatency.P99, 1)),
				res.Updates, res.Conflicts, res.Retries, res.Merged, res.Lost)
		}
		if res.Lost != 0 {
			return fmt.Errorf("bench: %d agents: the counters disagree with the applied increments by %d", n, res.Lost)
		}
		if res.Outcomes[intents.OutcomeApplied]+res.Outcomes[intents.OutcomeCommitted] == 0 {
			return fmt.Errorf("bench: %d agents: nothing was applied", n)
		}
	}
	return nil
}

func round(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
