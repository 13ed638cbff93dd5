package loadgen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Path is how an agent's intents reach the coordinator.
type Path string

// The paths of SPEC §6.
const (
	// PathAPI submits by request/reply on <prefix>.api.submit.<agent>; the
	// reply is the decision.
	PathAPI Path = "api"
	// PathStream publishes on <prefix>.intents.<agent> with Nats-Msg-Id =
	// the intent id and reads the decision on <prefix>.decisions.<agent>.
	PathStream Path = "stream"
)

// Paths lists the paths in a stable order.
var Paths = []Path{PathAPI, PathStream}

// Workload is what the agents ask for.
type Workload string

// The workloads.
const (
	// WorkloadApply: each agent sets its own path, uncontended (or, with
	// Keys, paths chosen among shared keys, with ProposeRatio of the
	// updates as transactions).
	WorkloadApply Workload = "apply"
	// WorkloadRMW: read a hot key with state.get, then set it to its value
	// plus one with a versioned read and on_conflict reject; a stale read
	// or a conflict is tried again after a backoff, with the versions the
	// rejection carries instead of a new read.
	WorkloadRMW Workload = "rmw"
	// WorkloadIncr: incr a hot key by one, no read.
	WorkloadIncr Workload = "incr"
	// WorkloadTxn: propose a transaction that reads and increments a hot
	// key, then commit it.
	WorkloadTxn Workload = "txn"
)

// Workloads lists the workloads in a stable order.
var Workloads = []Workload{WorkloadApply, WorkloadRMW, WorkloadIncr, WorkloadTxn}

// The retry policy of a rejected update (conflict, stale read): exponential
// backoff with full jitter, at most MaxTries tries of one update.
const (
	BackoffBase = time.Millisecond
	BackoffCap  = 100 * time.Millisecond
	MaxTries    = 10
)

// Config says what load to make. Zero fields take their defaults.
type Config struct {
	// URL of the NATS server. Required.
	URL string
	// Prefix of the coordinator's subjects. The default is "coagent".
	Prefix string
	// Path is how intents reach the coordinator. The default is PathAPI.
	Path Path
	// Workload is what the agents do. The default is WorkloadApply.
	Workload Workload
	// Agents is how many agents send intents at once, each on its own
	// connection. The default is 16 for WorkloadApply and 50 for the
	// others.
	Agents int
	// Keys is how many keys the agents share. The default is 16, except
	// for WorkloadApply, where 0 gives each agent a path of its own.
	Keys int
	// Skew is the Zipf exponent of key choice among shared keys (> 1
	// concentrates load on a few hot keys). The default, 0, is uniform.
	Skew float64
	// ProposeRatio is the share of WorkloadApply's updates made as
	// propose+commit transactions on the same keys. The default is 0; it is
	// an error with another workload.
	ProposeRatio float64
	// Duration of each measurement: each baseline, then the coordinator.
	// The default is 5s.
	Duration time.Duration
	// RequestTimeout is how long an agent waits for the decision of an
	// intent before it sends the same intent again (on the stream path it
	// asks decision.get first); each new send waits twice as long, up to
	// 30s. The default is 5s.
	RequestTimeout time.Duration
	// Seed makes key choice and backoff jitter reproducible. The default
	// is 1.
	Seed uint64
	// Replicas is how many servers store the raw publish baseline's
	// stream, 1 to 5: on a JetStream cluster, 3 makes the baseline R3
	// synchronous publish, what the coordinator's replicated streams and
	// log do. More than 1 needs a cluster of as many JetStream servers. The
	// default is 1.
	Replicas int
	// Phase, if set, is called as the coordinator's measurement starts,
	// after the baselines', and the function it returns as it ends: a
	// profile taken between them covers the coordinator's work alone. The
	// default is nil.
	Phase func() (end func())
	// Responder is the connection the request/reply baseline's responder
	// answers on: `coagent bench` passes one made as the coordinator's is,
	// so that the baseline crosses the transport the coordinator does. The
	// default is a connection of its own to URL.
	Responder *nats.Conn
	// Metrics, if set, is the registry of the coordinator the bench runs
	// itself (coordinator.Service.Registry): Result.Stages, Syncs and
	// Fsyncs say what it did during Run. The default is nil: a
	// coordinator elsewhere, whose metrics are not read.
	Metrics prometheus.Gatherer
	// Shards, if set, names the shards the agents spread over (agent i on
	// Shards[i % len]): each shard gets a board of the run's own, moved to
	// it before the measurement (shard.release on the default shard, then
	// shard.adopt), the agents send to its own subjects, and the check
	// reads each shard. The default, nil, is one coordinator.
	Shards []string
}

// EnsureDefaults fills in the zero fields.
func (c *Config) EnsureDefaults() {
	if c.Path == "" {
		c.Path = PathAPI
	}
	if c.Workload == "" {
		c.Workload = WorkloadApply
	}
	if c.Agents == 0 {
		c.Agents = 16
		if c.Workload != WorkloadApply {
			c.Agents = 50
		}
	}
	if c.Keys == 0 && c.Workload != WorkloadApply {
		c.Keys = 16
	}
	if c.Duration == 0 {
		c.Duration = 5 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 5 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
}

// maxReplicas is the most replicas JetStream gives a stream.
const maxReplicas = 5

// Validate reports every problem of the load a Config asks for, once it
// has its defaults; a missing URL is Run's to report.
func (c *Config) Validate() error {
	var errs []error
	if !slices.Contains(Paths, c.Path) {
		errs = append(errs, fmt.Errorf("loadgen: path %q: want one of %v", c.Path, Paths))
	}
	if !slices.Contains(Workloads, c.Workload) {
		errs = append(errs, fmt.Errorf("loadgen: workload %q: want one of %v", c.Workload, Workloads))
	}
	if c.Agents < 0 {
		errs = append(errs, fmt.Errorf("loadgen: agents %d: want a positive number", c.Agents))
	}
	if c.Keys < 0 {
		errs = append(errs, fmt.Errorf("loadgen: keys %d: want a positive number", c.Keys))
	}
	if c.Skew < 0 {
		errs = append(errs, fmt.Errorf("loadgen: skew %g: want 0 (uniform) or more", c.Skew))
	}
	if c.ProposeRatio < 0 || c.ProposeRatio > 1 {
		errs = append(errs, fmt.Errorf("loadgen: propose ratio %g: want a share between 0 and 1", c.ProposeRatio))
	} else if c.ProposeRatio > 0 && c.Workload != WorkloadApply {
		errs = append(errs, fmt.Errorf("loadgen: propose ratio %g with workload %s: only workload %s mixes in transactions (%s is nothing but transactions)",
			c.ProposeRatio, c.Workload, WorkloadApply, WorkloadTxn))
	}
	if c.Duration < 0 {
		errs = append(errs, fmt.Errorf("loadgen: duration %v: want a positive duration", c.Duration))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("loadgen: request timeout %v: want a positive duration", c.RequestTimeout))
	}
	for _, sh := range c.Shards {
		if err := intents.CheckShard(sh); err != nil && sh != intents.DefaultShard {
			errs = append(errs, fmt.Errorf("loadgen: %w", err))
		}
	}
	if c.Replicas < 1 || c.Replicas > maxReplicas {
		errs = append(errs, fmt.Errorf("loadgen: replicas %d: want 1 to %d", c.Replicas, maxReplicas))
	}
	return errors.Join(errs...)
}

// ShardCount is what one shard decided in a run.
type ShardCount struct {
	Intents, Updates int
}

// Latency summarizes a set of durations.
type Latency struct {
	P50, P90, P99, Max time.Duration
	// Mean is what Little's law wants: with the coordinator's own means
	// (Result.Stages) it says where a round trip went.
	Mean time.Duration
}

func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Latency{P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: ds[len(ds)-1], Mean: sum / time.Duration(len(ds))}
}

// Ratio compares the coordinator's updates with a baseline: throughput over
// the baseline's, and latency over the baseline's (above 1 is slower).
type Ratio struct {
	Throughput, P50, P99 float64
}

func ratio(tput float64, lat Latency, baseTput float64, base Latency) Ratio {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	return Ratio{Throughput: div(tput, baseTput), P50: div(float64(lat.P50), float64(base.P50)),
		P99: div(float64(lat.P99), float64(base.P99))}
}

// Mismatch is a key whose state disagrees with the updates applied to it.
type Mismatch struct {
	Path    string
	Applied int    // updates the agents saw applied to the key
	Version uint64 // the key's version: how many commits changed it
	Value   string // the key's value as JSON ("" if absent)
}

// Result is what one run measured.
type Result struct {
	Workload Workload
	Path     Path
	Agents   int
	Keys     int // keys written: the shared keys, or one per agent
	// OwnPaths: each agent wrote a path of its own (WorkloadApply without
	// Keys).
	OwnPaths bool
	// Duration is the wall time of the coordinator's part, from the first
	// intent to the last decision (the intent under way at the end of the
	// measurement gets its decision, but a rejected one is not tried
	// again).
	Duration time.Duration

	// PerShard is, when Config.Shards is set, each shard's intents and
	// updates, by shard.
	PerShard map[string]ShardCount `json:",omitempty"`

	Intents          int     // intents decided (each try of an update counts)
	Updates          int     // updates applied: applied applies and sets, committed commits
	Throughput       float64 // intents decided per second
	UpdateThroughput float64 // updates applied per second
	// Latency of an intent, from its first send to its final decision,
	// sends of the same intent again included.
	Latency Latency
	// UpdateLatency of an update, from its first read or send to the
	// decision that applied it, every try and backoff included.
	UpdateLatency Latency
	Outcomes      map[intents.Outcome]int
	Conflicts     int // rejections for conflict or stale read
	Retries       int // tries after a retryable rejection, each with a fresh id
	Merged        int // decisions that name others in merged_with
	Tries         int // tries of an update: applies, rmw sets, proposes
	GaveUp        int // updates given up after MaxTries tries
	Reads         int // state.get requests of the rmw workload
	// Resends counts the same intent sent again (same id): after a request
	// timed out, the coordinator was unavailable or answered an interim
	// decision.
	Resends int
	// RoundTrips counts every request and reply the agents waited for:
	// reads, submits, sends again, decision.get.
	RoundTrips       int
	TriesPerUpdate   float64
	RoundTripsPerTry float64

	// The lost-update check: Checked keys read back, the Mismatches among
	// them, and Lost, the sum over keys of the difference between the
	// updates applied and the key's version — zero unless an update was
	// lost or applied twice.
	Checked    int
	Mismatches []Mismatch `json:",omitempty"`
	Lost       int64

	// RawThroughput and RawLatency: JetStream synchronous publish-and-ack to
	// a file stream, messages per second.
	RawThroughput float64
	RawLatency    Latency
	// RawReplicas is how many servers stored the raw publish baseline's
	// stream, as the server reported it when it made the stream: the peers
	// of its Raft group on a cluster (1 on a server alone).
	RawReplicas int
	// Servers counts the agents connected to each server, by its client
	// URL: with a cluster's URLs, where the agents' connections landed.
	Servers map[string]int
	// ReqReplyThroughput and ReqReplyLatency: core NATS request/reply to a
	// responder that does nothing, round trips per second.
	ReqReplyThroughput float64
	ReqReplyLatency    Latency
	// CPU, RawCPU and ReqReplyCPU are the bench process's CPU time, user
	// and system, per intent decided and per round trip of each baseline.
	// With the server embedded in the bench it is everything's: the
	// server's, the coordinator's and the agents'; with --nats, the
	// agents' (and the bench's coordinator's, if any) alone.
	CPU, RawCPU, ReqReplyCPU time.Duration
	// VsPublish and VsRequest compare UpdateThroughput and UpdateLatency
	// with each baseline.
	VsPublish, VsRequest Ratio
	// Redis are the Redis + Lua baselines of the same workload, one per
	// appendfsync setting, when `coagent bench` ran them (RedisBaseline).
	Redis []*RedisResult `json:",omitempty"`
	// Stages are the mean time an intent spent in each stage of the
	// coordinator (coagent_intent_stage_seconds: decide, commit,
	// durable, answer) and, as "coordinator", from its arrival to its
	// decision being durable (coagent_decision_latency_seconds), when
	// `coagent bench` ran the coordinator itself.
	Stages map[string]time.Duration `json:",omitempty"`
	// Syncs are the group commits of that coordinator's event log during
	// the measurement, and EventsPerSync the events each wrote on average
	// (its mean time is the stage "sync").
	Syncs         int     `json:",omitempty"`
	EventsPerSync float64 `json:",omitempty"`
	// Fsyncs are the fsyncs of that event log's write-ahead log during the
	// measurement (coagent_log_fsync_seconds): the system call alone.
	Fsyncs *Fsyncs `json:",omitempty"`
}

// Fsyncs sums up a coordinator's fsyncs over a measurement: how many,
// their mean, and the upper bounds of the histogram buckets their median
// and 99th percentile fall in.
type Fsyncs struct {
	Count          int
	Mean, P50, P99 time.Duration
}

// Run measures the two baselines, then the coordinator, with the same
// agents and connections, and checks the counts at the end. It returns an
// error for a bad Config, a connection that fails, or an agent that gets
// no decision; a failed lost-update check is in the Result (Lost,
// Mismatches), not an error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.URL == "" {
		return nil, errors.New("loadgen: URL is empty: a NATS server is required")
	}
	before := readMetrics(cfg.Metrics)
	conns := make([]*nats.Conn, cfg.Agents)
	for i := range conns {
		nc, err := nats.Connect(cfg.URL, nats.Name("coagent bench "+strconv.Itoa(i)))
		if err != nil {
			return nil, fmt.Errorf("loadgen: connect agent %d to %s: %w", i, cfg.URL, err)
		}
		defer nc.Close()
		conns[i] = nc
	}
	res := &Result{Workload: cfg.Workload, Path: cfg.Path, Agents: cfg.Agents, Keys: cfg.Keys,
		Outcomes: map[intents.Outcome]int{}, Servers: map[string]int{}}
	for _, nc := range conns {
		res.Servers[nc.ConnectedUrlRedacted()]++
	}
	// A run's paths and agent names are its own, so runs on one server
	// (and one coordinator) do not see each other's keys.
	run := ulid.Make().String()[:10]
	var err error
	if res.RawThroughput, res.RawLatency, res.RawReplicas, err = rawPublish(ctx, cfg, conns, run, &res.RawCPU); err != nil {
		return nil, err
	}
	if res.ReqReplyThroughput, res.ReqReplyLatency, err = rawRequest(ctx, cfg, conns, run, &res.ReqReplyCPU); err != nil {
		return nil, err
	}
	end := func() {}
	if cfg.Phase != nil {
		end = cfg.Phase()
	}
	err = coordinated(ctx, cfg, conns, run, res)
	end()
	if err != nil {
		return nil, err
	}
	res.VsPublish = ratio(res.UpdateThroughput, res.UpdateLatency, res.RawThroughput, res.RawLatency)
	res.VsRequest = ratio(res.UpdateThroughput, res.UpdateLatency, res.ReqReplyThroughput, res.ReqReplyLatency)
	res.addCoordinator(before, readMetrics(cfg.Metrics))
	return res, nil
}
