package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
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

// The hot-key workloads over both paths, briefly, from the command line:
// one JSON result each, with both baselines, and the check passed.
func TestBenchWorkloads(t *testing.T) {
	for _, args := range [][]string{
		{"--workload", "rmw", "--path", "api"},
		{"--workload", "txn", "--path", "stream"},
	} {
		out, _, err := runCmd(t, "", append([]string{"bench", "--agents", "3", "--keys", "2", "--duration", "200ms", "--json", "--redis", "off"}, args...)...)
		if err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, out)
		}
		var r struct {
			Workload, Path                    string
			Agents, Keys, Checked             int
			Updates, Tries, Conflicts         int
			Lost                              int64
			Mismatches                        []any
			RawThroughput, ReqReplyThroughput float64
			VsPublish, VsRequest              struct{ Throughput float64 }
			TriesPerUpdate, RoundTripsPerTry  float64
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, out)
		}
		if r.Workload != args[1] || r.Path != args[3] || r.Agents != 3 || r.Keys != 2 || r.Checked != 2 {
			t.Errorf("bench %v: %+v", args, r)
		}
		if r.Lost != 0 || len(r.Mismatches) > 0 || r.Updates == 0 || r.Tries < r.Updates || r.TriesPerUpdate < 1 || r.RoundTripsPerTry < 1 {
			t.Errorf("bench %v: counts %+v", args, r)
		}
		if r.RawThroughput <= 0 || r.ReqReplyThroughput <= 0 || r.VsPublish.Throughput <= 0 || r.VsRequest.Throughput <= 0 {
			t.Errorf("bench %v: baselines %+v", args, r)
		}
	}
}

// Without --json a run is one table: the coordinator, both baselines, the
// counts and the check.
func TestBenchText(t *testing.T) {
	out, _, err := runCmd(t, "", "bench", "--workload", "incr", "--agents", "2", "--duration", "200ms", "--redis", "off")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	for _, want := range []string{"incr over api: 2 agents, on 16 shared keys", "coagent updates", "raw JetStream publish (R1)",
		"raw request/reply", "tput/pub", "p99/rr", "1.00 tries an update", "check: each of 16 keys holds exactly the updates applied to it",
		"in the coordinator an intent waited, on average:", "to be decided", "for its group's commit", "for the group to be durable",
		"the event log committed", "fsyncs,", "an agent waited", "on the way there and back", "CPU of the bench process:", "a raw publish's", "a raw round trip's"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// --unsynced, a measuring switch, leaves the bench's own coordinator's log
// unsynced: its run has group commits and no fsync, where the default run
// fsyncs; both report the process's CPU per intent and per baseline op.
func TestBenchUnsynced(t *testing.T) {
	for _, unsynced := range []bool{false, true} {
		args := []string{"bench", "--agents", "2", "--duration", "200ms", "--json"}
		if unsynced {
			args = append(args, "--unsynced")
		}
		out, _, err := runCmd(t, "", args...)
		if err != nil {
			t.Fatalf("bench: %v\n%s", err, out)
		}
		var r struct {
			Syncs                    int
			Fsyncs                   *struct{ Count int }
			CPU, RawCPU, ReqReplyCPU int64
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if r.Syncs == 0 || r.CPU <= 0 || r.RawCPU <= 0 || r.ReqReplyCPU <= 0 {
			t.Errorf("unsynced %v: %s", unsynced, out)
		}
		// A synced group commit is one fsync, or shares one; unsynced,
		// only the store's own housekeeping syncs.
		fsyncs := 0
		if r.Fsyncs != nil {
			fsyncs = r.Fsyncs.Count
		}
		if fsynced := fsyncs*2 >= r.Syncs; fsynced == unsynced || unsynced && fsyncs*10 > r.Syncs {
			t.Errorf("unsynced %v, fsyncs %+v: %s", unsynced, r.Fsyncs, out)
		}
	}
}

// The Redis + Lua baseline of rmw: a redis-server of the bench's own with
// each appendfsync, the same agents and keys, every update counted and
// none lost. It needs redis-server on PATH; CI installs it and sets
// COAGENT_REDIS_REQUIRED=1, so that the test never passes by skipping
// there.
func TestBenchRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("COAGENT_REDIS_REQUIRED") != "" {
			t.Fatal("COAGENT_REDIS_REQUIRED is set and there is no redis-server on PATH")
		}
		t.Skip("no redis-server on PATH (apt-get install redis-server)")
	}
	out, _, err := runCmd(t, "", "bench", "--workload", "rmw", "--agents", "4", "--keys", "2", "--duration", "300ms", "--json")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	var r struct {
		Updates int
		Redis   []struct {
			Fsync                 string
			Updates, Tries, Reads int
			UpdateThroughput      float64
			Lost                  int64
		}
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(r.Redis) != 2 || r.Redis[0].Fsync != "always" || r.Redis[1].Fsync != "everysec" {
		t.Fatalf("redis baselines: %+v", r.Redis)
	}
	for _, b := range r.Redis {
		// 4 agents on 2 keys contend: some compare-and-sets fail and are
		// tried again with the version their answer gave.
		if b.Updates == 0 || b.Lost != 0 || b.Tries < b.Updates || b.Reads == 0 || b.UpdateThroughput <= 0 {
			t.Errorf("redis, aof %s: %+v", b.Fsync, b)
		}
	}
}

// Bad flags are named with their values before anything starts.
func TestBenchBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--path", "bus"}, `path "bus"`},
		{[]string{"--workload", "mix"}, `workload "mix"`},
		{[]string{"--workload", "rmw", "--propose", "0.5"}, "propose ratio 0.5 with workload rmw"},
		{[]string{"--agents", "4,x"}, `--agents "4,x"`},
		{[]string{"--keys", "-3"}, "keys -3"},
	} {
		_, _, err := runCmd(t, "", append([]string{"bench"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bench %v: %v; want an error naming %s", c.args, err, c.want)
		}
	}
}

// --replicas is the raw baseline's on a cluster: without --nats (the
// embedded server is alone) or out of JetStream's range it is a usage
// error naming the flag and its value, before anything starts.
func TestBenchReplicasFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--replicas", "3"}, "--replicas 3 needs --nats"},
		{[]string{"--replicas", "1"}, "--replicas 1 needs --nats"},
		{[]string{"--nats", "nats://127.0.0.1:1", "--replicas", "9"}, "--replicas 9: want 1 to 5"},
		{[]string{"--nats", "nats://127.0.0.1:1", "--replicas", "0"}, "--replicas 0: want 1 to 5"},
	} {
		_, _, err := runCmd(t, "", append([]string{"bench"}, c.args...)...)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bench %v: %v; want a usage error naming %s", c.args, err, c.want)
		}
	}
}

// Against a 3-node cluster, given every node's URL and --replicas 3: the
// raw baseline is R3 publish and says so, and the agents connect across
// the nodes.
func TestBenchCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node JetStream cluster")
	}
	c := natstest.RunCluster(t, 3)
	coordtest.Start(t, c.Servers[0], coordinator.Options{Replicas: 3})
	out, _, err := runCmd(t, "", "bench", "--nats", c.URLs(), "--replicas", "3", "--agents", "12", "--duration", "200ms")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	for _, want := range []string{"raw JetStream publish (R3)", "agents connected across ", "check: each of 12 keys holds exactly"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestBenchShards: bench --shards 2 runs two coordinator processes, the
// agents over both shards' boards, nothing lost, and says what each
// coordinator decided and the CPU it took.
func TestBenchShards(t *testing.T) {
	p := runBin(t, nil, "", "bench", "--shards", "2", "--workload", "incr", "--agents", "4", "--keys", "2", "--duration", "300ms", "--redis", "off")
	if p.status != 0 {
		t.Fatalf("bench --shards 2: %+v", p)
	}
	for _, want := range []string{"check: each of 4 keys holds exactly the updates applied to it", "2 shards, each its own coordinator process",
		"shard default ", "shard s2 ", "projection, one machine a shard"} {
		if !strings.Contains(p.stdout, want) {
			t.Errorf("bench --shards 2 does not say %q:\n%s", want, p.stdout)
		}
	}
	if !regexp.MustCompile(`shard s2 +[1-9]\d* intents`).MatchString(p.stdout) {
		t.Errorf("shard s2 decided nothing:\n%s", p.stdout)
	}
}
