package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/coagent/coagent/internal/loadgen"
)

// redisFsyncs are the appendfsync settings the Redis baseline runs under:
// always, which fsyncs every write before it answers, as the coordinator
// does, and everysec, Redis's default, which may lose the last second.
var redisFsyncs = []string{"always", "everysec"}

// redisBaselines runs cfg's workload against a Redis server of its own
// for each of redisFsyncs, started from the redis-server at path, and
// returns the results; none, with a note on stderr, when the workload has
// no Redis counterpart or there is no redis-server.
func redisBaselines(ctx context.Context, cfg loadgen.Config, path string, stderr io.Writer) ([]*loadgen.RedisResult, error) {
	if path == "off" || cfg.Workload != loadgen.WorkloadRMW && cfg.Workload != loadgen.WorkloadIncr {
		return nil, nil
	}
	if path == "" {
		found, err := exec.LookPath("redis-server")
		if err != nil {
			fmt.Fprintln(stderr, "bench: no redis-server on PATH, so no Redis + Lua baseline (apt-get install redis-server, or --redis PATH)")
			return nil, nil
		}
		path = found
	}
	var out []*loadgen.RedisResult
	for _, fsync := range redisFsyncs {
		addr, stop, err := startRedis(ctx, path, fsync)
		if err != nil {
			return nil, err
		}
		res, err := loadgen.RedisBaseline(ctx, cfg, addr, fsync)
		stop()
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// startRedis starts redis-server at path on a free loopback port, with an
// append-only file fsynced as fsync says and no snapshots, in a directory
// of its own, and waits until it answers; stop ends it and removes the
// directory.
func startRedis(ctx context.Context, path, fsync string) (addr string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "coagent-bench-redis-")
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	addr = "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(path, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--appendonly", "yes", "--appendfsync", fsync, "--save", "", "--daemonize", "no", "--logfile", "")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("--redis %s: %w", path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Kill()
		<-exited
		os.RemoveAll(dir)
	}
	// The port is dialled until it answers, rather than pinged through a
	// client, which logs each refused dial.
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr, stop, nil
		}
		select {
		case werr := <-exited:
			exited <- werr
			stop()
			return "", nil, fmt.Errorf("--redis %s: exited at start (%v): %w", path, werr, err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return "", nil, errors.Join(fmt.Errorf("--redis %s: no answer on %s within 10s", path, addr), err, ctx.Err())
		}
	}
}

// printRedis prints the Redis baselines beside the coordinator's updates:
// each one's updates and its ratio to them.
func printRedis(w io.Writer, r *loadgen.Result, rs []*loadgen.RedisResult) {
	for _, b := range rs {
		fmt.Fprintf(w, "%-26s %9.0f %9s %9s   coagent/redis %.2fx in updates/s; %.2f tries an update, %d reads, %d given up; check: %s\n",
			"redis + lua, aof "+b.Fsync, b.UpdateThroughput, round(b.UpdateLatency.P50), round(b.UpdateLatency.P99),
			r.UpdateThroughput/max(b.UpdateThroughput, 1e-9), b.TriesPerUpdate, b.Reads, b.GaveUp, redisCheck(b))
	}
}

func redisCheck(b *loadgen.RedisResult) string {
	if b.Lost == 0 {
		return "no update lost"
	}
	return fmt.Sprintf("%d updates off", b.Lost)
}
