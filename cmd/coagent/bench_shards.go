package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/loadgen"
)

// shardProc is a coordinator of `bench --shards N`: `coagent serve
// --shard` run as a process of its own, so that its CPU is its own to
// measure.
type shardProc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	// cpu is its CPU time when the measurement started, and used how much
	// it took during it.
	cpu, used time.Duration
}

// startShards runs n coordinators, the default shard and s2…sN, on the
// server at url, each with its data under dir.
func startShards(ctx context.Context, n int, url, dir string, stderr io.Writer) ([]*shardProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var procs []*shardProc
	for j := range n {
		name := intents.DefaultShard
		if j > 0 {
			name = "s" + strconv.Itoa(j+1)
		}
		args := []string{"serve", "--nats", url, "--data", filepath.Join(dir, "shard-"+name), "--http", "off", "--shard", name}
		cmd := exec.CommandContext(ctx, self, args...)
		cmd.Stderr = stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			stopShards(procs)
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			stopShards(procs)
			return nil, fmt.Errorf("bench: start shard %s: %w", name, err)
		}
		p := &shardProc{name: name, cmd: cmd, done: make(chan struct{})}
		procs = append(procs, p)
		up := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				select {
				case up <- sc.Text():
				default:
				}
			}
		}()
		go func() {
			_ = cmd.Wait()
			close(p.done)
		}()
		select {
		case line := <-up:
			if !strings.Contains(line, "serving on") {
				stopShards(procs)
				return nil, fmt.Errorf("bench: shard %s said %q", name, line)
			}
		case <-p.done:
			stopShards(procs)
			return nil, fmt.Errorf("bench: shard %s ended before it served", name)
		case <-time.After(60 * time.Second):
			stopShards(procs)
			return nil, fmt.Errorf("bench: shard %s did not serve within 60s", name)
		}
	}
	return procs, nil
}

// stopShards ends the coordinators and waits for them.
func stopShards(procs []*shardProc) {
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
		}
	}
}

// procCPU is the CPU time, user and system, process pid has used, from
// /proc (Linux); 0 where it cannot be read.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's name, which is in parentheses and may
	// hold spaces: utime and stime are the 14th and 15th fields.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0
	}
	// Clock ticks of USER_HZ, 100 a second on Linux.
	return time.Duration(u+st) * 10 * time.Millisecond
}

// measureShards wraps phase so that each coordinator's CPU during the
// measurement is taken.
func measureShards(procs []*shardProc, phase func() func()) func() func() {
	return func() func() {
		end := func() {}
		if phase != nil {
			end = phase()
		}
		for _, p := range procs {
			p.cpu = procCPU(p.cmd.Process.Pid)
		}
		return func() {
			for _, p := range procs {
				p.used = procCPU(p.cmd.Process.Pid) - p.cpu
			}
			end()
		}
	}
}

// printShards says what each coordinator decided and the CPU it took, and
// what that projects for one machine a shard.
func printShards(w io.Writer, r *loadgen.Result, procs []*shardProc) {
	fmt.Fprintf(w, "%d shards, each its own coordinator process on this machine, %.0f intents/s in all:\n", len(procs), r.Throughput)
	var perIntent []time.Duration
	for _, p := range procs {
		c := r.PerShard[p.name]
		per := time.Duration(0)
		if c.Intents > 0 {
			per = p.used / time.Duration(c.Intents)
			perIntent = append(perIntent, per)
		}
		fmt.Fprintf(w, "  shard %-8s %7d intents (%.0f/s), its coordinator %s CPU in all, %s an intent: one core would decide %.0f/s\n",
			p.name, c.Intents, float64(c.Intents)/r.Duration.Seconds(), p.used.Round(10*time.Millisecond), per.Round(time.Microsecond), perSecond(per))
	}
	if len(perIntent) == len(procs) {
		var sum time.Duration
		for _, d := range perIntent {
			sum += d
		}
		mean := sum / time.Duration(len(perIntent))
		fmt.Fprintf(w, "projection, one machine a shard (its coordinator's CPU per intent against one core; the server and agents elsewhere): %.0f intents/s a shard, %.0f for %d\n",
			perSecond(mean), perSecond(mean)*float64(len(procs)), len(procs))
	}
	if r.CPU > 0 {
		fmt.Fprintf(w, "the bench process (the NATS server and the agents) took %s an intent besides\n", r.CPU.Round(time.Microsecond))
	}
}

func perSecond(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(time.Second) / float64(d)
}
