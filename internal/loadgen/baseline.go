package loadgen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The sizes of the baselines' messages: about an intent's and a decision's.
const (
	requestSize = 160
	replySize   = 200
)

// measure runs each agent's loop on its connection until the measurement's
// end and returns the round trips it timed per second of wall time, and
// their latency; cpu is set to the process's CPU time per round trip. One
// failed step ends the measurement with its error.
func measure(ctx context.Context, d time.Duration, conns []*nats.Conn, cpu *time.Duration,
	step func(ctx context.Context, i int, nc *nats.Conn) error) (float64, Latency, error) {
	lat := make([][]time.Duration, len(conns))
	errs := make([]error, len(conns))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	used := ProcessCPU()
	start := time.Now()
	deadline := start.Add(d)
	for i, nc := range conns {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t := time.Now()
				if err := step(ctx, i, nc); err != nil {
					errs[i] = err
					cancel()
					return
				}
				lat[i] = append(lat[i], time.Since(t))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, Latency{}, err
	}
	if err := ctx.Err(); err != nil {
		return 0, Latency{}, err
	}
	all := slices.Concat(lat...)
	*cpu = cpuPer(used, len(all))
	return float64(len(all)) / elapsed.Seconds(), summarize(all), nil
}

// reachable calls step on every connection until it succeeds once there,
// before a baseline is measured: on a cluster a subscription made through
// one node (the responder's, a stream's) reaches the other nodes over the
// routes a moment later, and a request sent through one of them before
// finds no responders. Nothing signals the interest's arrival, so it
// tries again after a backoff, for at most maxRequestTimeout; an error
// other than no responders ends it at once.
func reachable(ctx context.Context, conns []*nats.Conn, step func(ctx context.Context, i int, nc *nats.Conn) error) error {
	for i, nc := range conns {
		deadline := time.Now().Add(maxRequestTimeout)
		for try := 1; ; try++ {
			err := step(ctx, i, nc)
			if err == nil {
				break
			}
			noResponders := errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
			if !noResponders || time.Now().After(deadline) {
				return fmt.Errorf("agent %d on %s: %w", i, nc.ConnectedUrlRedacted(), err)
			}
			if !pause(ctx, backoff(try, nil)) {
				return ctx.Err()
			}
		}
	}
	return nil
}

// rawPublish measures synchronous JetStream publish-and-ack from every
// agent to a file stream of its own with cfg.Replicas replicas, with
// JetStream's default durability. It returns the replicas the server says
// the stream has: on a cluster, the peers of its Raft group.
func rawPublish(ctx context.Context, cfg Config, conns []*nats.Conn, run string, cpu *time.Duration) (float64, Latency, int, error) {
	js, err := jetstream.New(conns[0])
	if err != nil {
		return 0, Latency{}, 0, fmt.Errorf("loadgen: raw publish: %w", err)
	}
	name := "COAGENT_BENCH_RAW_" + run
	subject := "coagent-bench-raw." + run
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject + ".>"},
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas})
	if err != nil {
		return 0, Latency{}, 0, fmt.Errorf("loadgen: raw publish: stream %s with %d replicas: %w", name, cfg.Replicas, err)
	}
	defer js.DeleteStream(context.WithoutCancel(ctx), name)
	replicas := streamReplicas(stream.CachedInfo())
	agents := make([]jetstream.JetStream, len(conns))
	for i, nc := range conns {
		if agents[i], err = jetstream.New(nc); err != nil {
			return 0, Latency{}, 0, fmt.Errorf("loadgen: raw publish: %w", err)
		}
	}
	payload := make([]byte, requestSize)
	publish := func(ctx context.Context, i int, _ *nats.Conn) error {
		_, err := agents[i].Publish(ctx, subject+"."+strconv.Itoa(i), payload)
		return err
	}
	if err := reachable(ctx, conns, publish); err != nil {
		return 0, Latency{}, 0, fmt.Errorf("loadgen: raw publish: stream %s: %w", name, err)
	}
	tput, lat, err := measure(ctx, cfg.Duration, conns, cpu, publish)
	if err != nil {
		return 0, Latency{}, 0, fmt.Errorf("loadgen: raw publish: %w", err)
	}
	return tput, lat, replicas, nil
}

// streamReplicas is how many servers store a stream, from the info the
// server answered its creation with: on a cluster the stream's leader
// answers, naming its Raft group's peers; a server alone names none, and
// the stream's configuration counts.
func streamReplicas(info *jetstream.StreamInfo) int {
	if info.Cluster != nil && info.Cluster.Leader != "" {
		return 1 + len(info.Cluster.Replicas)
	}
	return info.Config.Replicas
}

// rawRequest measures core NATS request/reply from every agent to one
// responder that answers at once: the most the transport does for a round
// trip, through the same server, to one connection on its other side, as
// the coordinator is.
func rawRequest(ctx context.Context, cfg Config, conns []*nats.Conn, run string, cpu *time.Duration) (float64, Latency, error) {
	rc := cfg.Responder
	if rc == nil {
		nc, err := nats.Connect(cfg.URL, nats.Name("coagent bench responder"))
		if err != nil {
			return 0, Latency{}, fmt.Errorf("loadgen: raw request: connect the responder to %s: %w", cfg.URL, err)
		}
		defer nc.Close()
		rc = nc
	}
	subject := "coagent-bench-rr." + run
	reply := make([]byte, replySize)
	sub, err := rc.Subscribe(subject+".*", func(m *nats.Msg) { _ = m.Respond(reply) })
	if err != nil {
		return 0, Latency{}, fmt.Errorf("loadgen: raw request: responder: %w", err)
	}
	defer sub.Unsubscribe()
	// The agents' requests must not race the subscription to the server
	// (to the responder's; reachable waits for the others of a cluster).
	if err := rc.FlushTimeout(maxRequestTimeout); err != nil {
		return 0, Latency{}, fmt.Errorf("loadgen: raw request: responder: %w", err)
	}
	payload := make([]byte, requestSize)
	request := func(ctx context.Context, i int, nc *nats.Conn) error {
		rctx, cancel := context.WithTimeout(ctx, maxRequestTimeout)
		defer cancel()
		_, err := nc.RequestWithContext(rctx, subject+"."+strconv.Itoa(i), payload)
		return err
	}
	if err := reachable(ctx, conns, request); err != nil {
		return 0, Latency{}, fmt.Errorf("loadgen: raw request: responder: %w", err)
	}
	tput, lat, err := measure(ctx, cfg.Duration, conns, cpu, request)
	if err != nil {
		return 0, Latency{}, fmt.Errorf("loadgen: raw request: %w", err)
	}
	return tput, lat, nil
}
