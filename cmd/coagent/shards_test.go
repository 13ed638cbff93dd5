package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// serveShard runs the coordinator of shard name on the server at url.
func serveShard(t *testing.T, url, data, name string) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		args := []string{"serve", "--data", data, "--nats", url, "--shard", name, "--http", "127.0.0.1:0"}
		done <- run(ctx, args, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	first, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("serve --shard %s said nothing: %v (%v)", name, err, <-done)
	}
	if !strings.Contains(first, "serving on") {
		cancel()
		t.Fatalf("serve --shard %s: start-up line %q", name, first)
	}
	go io.Copy(io.Discard, pr)
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("serve did not stop")
		}
	}
}

// TestShardsCommands runs two shards on one server, as processes speak
// to them: a board assigned to s2 goes there with its state, a put and a
// read through the default shard reach it, a stale client asking the
// default shard is sent on, an intent of both shards' boards is refused,
// and shards list says where each board is.
func TestShardsCommands(t *testing.T) {
	dir := t.TempDir()
	url, stop := serve(t, filepath.Join(dir, "data"))
	defer stop()
	stop2 := serveShard(t, url, filepath.Join(dir, "data2"), "s2")
	defer stop2()
	nats := []string{"--nats", url}
	run := func(status int, pattern string, args ...string) proc {
		t.Helper()
		p := runBin(t, nil, "", append(args, nats...)...)
		if p.status != status || !regexp.MustCompile(pattern).MatchString(p.stdout) {
			t.Fatalf("coagent %s: %+v, want status %d and %s", strings.Join(args, " "), p, status, pattern)
		}
		return p
	}
	run(0, `^applied`, "put", "report.title", `"Q3"`, "--agent", "w1")
	run(0, `^applied`, "put", "tasks.t1", `"open"`, "--agent", "w1")
	run(0, `^board report: moved from shard default to shard s2`, "shards", "assign", "report", "s2")
	// Its state and version went with it.
	p := run(0, `"Q3"`, "get", "report.title", "--shard", "s2", "-o", "json")
	if !strings.Contains(p.stdout, `"version": 1`) && !strings.Contains(p.stdout, `"version":1`) {
		t.Fatalf("report.title on s2 lost its version: %s", p.stdout)
	}
	// Boards of both shards: each answers at its revision.
	run(0, `(?s)^report\.title = "Q3" \(version 1, mod_rev \d+\)\ntasks\.t1 = "open" .*\nrev \d+ \(shard default\), rev \d+ \(shard s2\)\n$`, "get", "report.title", "tasks.t1")
	// Through the default shard, which sends both on to s2.
	run(0, `^applied`, "put", "report.title", `"Q4"`, "--agent", "w1")
	run(0, `"Q4"`, "get", "report.title", "-o", "json")
	run(0, `"Q4"`, "get", "report.title", "--shard", "s2", "-o", "json")
	if p := runBin(t, nil, "", "shards", "assign", "report", "s2", "--nats", url); p.status != 1 || !strings.Contains(p.stderr, "board report is shard s2's already; use shards move") {
		t.Fatalf("shards assign of a board assigned: %+v", p)
	}
	// Both shards' boards at once: an apply commits on both, a
	// transaction is refused.
	cross := fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"apply","writes":[{"path":"report.x","op":"set","value":1},{"path":"tasks.x","op":"set","value":1}]}`, ulid.Make().String())
	if p := runBin(t, nil, cross, "submit", "-", "--nats", url); p.status != 0 || !strings.Contains(p.stdout, "applied") {
		t.Fatalf("submit of an apply of both shards' boards: %+v", p)
	}
	run(0, `(?s)report\.x = 1 .*tasks\.x = 1 `, "get", "report.x", "tasks.x")
	cross = fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"propose","writes":[{"path":"report.y","op":"set"},{"path":"tasks.y","op":"set"}]}`, ulid.Make().String())
	p = runBin(t, nil, cross, "submit", "-", "--nats", url)
	if p.status != 1 || !strings.Contains(p.stdout, "out_of_scope") || !strings.Contains(p.stdout, "a transaction may touch one shard's boards") {
		t.Fatalf("submit of a propose of both shards' boards: %+v", p)
	}
	p = run(0, `report +s2`, "shards", "list")
	if !strings.Contains(p.stdout, "report went to s2") || !strings.Contains(p.stdout, "report is its own") {
		t.Fatalf("shards list: %s", p.stdout)
	}
	var list struct {
		Boards map[string]string `json:"boards"`
	}
	p = run(0, `^\{`, "shards", "list", "-o", "json")
	if json.Unmarshal([]byte(p.stdout), &list) != nil || list.Boards["report"] != "s2" {
		t.Fatalf("shards list -o json: %s", p.stdout)
	}
	p = run(0, `(?s)shard default: every board no other shard took\n.*alone.*\n\nshard s2: boards report\n.*alone`, "status")
	// A transaction on tasks keeps it where it is, until it ends.
	pid := ulid.Make().String()
	p = runBin(t, nil, fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"propose","writes":[{"path":"tasks.t2","op":"set"}]}`, pid), "submit", "-", "--nats", url, "-o", "json")
	var g struct {
		Txn   string `json:"txn"`
		Fence uint64 `json:"fence"`
	}
	if p.status != 0 || json.Unmarshal([]byte(p.stdout), &g) != nil || g.Txn == "" {
		t.Fatalf("propose on tasks: %+v", p)
	}
	p = runBin(t, nil, "", "shards", "move", "tasks", "s2", "--wait", "300ms", "--nats", url)
	if p.status != 1 || !strings.Contains(p.stderr, "transaction "+g.Txn+" of w1 holds tasks.t2") {
		t.Fatalf("shards move of a board a transaction holds: %+v", p)
	}
	abort := fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"abort","txn":%q,"fence":%d}`, ulid.Make().String(), g.Txn, g.Fence)
	if p := runBin(t, nil, abort, "submit", "-", "--nats", url); !strings.HasPrefix(p.stdout, "aborted ") {
		t.Fatalf("abort: %+v", p)
	}
	run(0, `^board tasks: moved from shard default to shard s2`, "shards", "move", "tasks", "s2")
	run(0, `"open"`, "get", "tasks.t1", "-o", "json")

	// And back: the default shard has it again, at the version s2 left.
	run(0, `^board report: moved from shard s2 to shard default`, "shards", "move", "report", "default")
	run(0, `"Q4"`, "get", "report.title", "-o", "json")
}

// startTwoShards starts three NATS nodes, shard s2 as a cluster of two
// coordinator processes, and the default shard as one, and gives s2 the
// board report.
func startTwoShards(t *testing.T) (*failoverCluster, string) {
	t.Helper()
	c := startFailoverCluster(t, 2, "--shard", "s2")
	urls := strings.Join(c.urls, ",")
	def := &coordProc{name: "d1", data: filepath.Join(c.dir, "d1"), args: []string{"serve", "--nats", urls, "--name", "d1",
		"--replicas", "3", "--lease-ttl", leaseTTL.String(), "--data", filepath.Join(c.dir, "d1"), "-v"}}
	def.launch(t)
	def.await(t)
	t.Cleanup(func() { def.n.kill(t) })
	select {
	case <-def.active:
	case <-time.After(30 * time.Second):
		t.Fatalf("the default shard's coordinator is not active; stderr:\n%s", def.n.stderr.String())
	}
	// The cluster's JetStream may not answer the shard map's bucket at
	// once (no responders while its meta leader is elected): nothing has
	// moved until the map answers, so the command is run again.
	natstest.CheckFor(t, 30*time.Second, "shards assign report s2", func() error {
		p := runBin(t, nil, "", "shards", "assign", "report", "s2", "--nats", urls)
		switch {
		case p.status == 0:
			return nil
		case strings.Contains(p.stderr, "the shard map: nats: no responders"):
			return errors.New(p.stderr)
		}
		t.Fatalf("shards assign: %+v", p)
		return nil
	})
	return c, urls
}

// TestShardFailover: shard s2 is a cluster of two coordinator processes
// and owns report; the default shard, one coordinator, owns tasks. The
// active coordinator of s2 is SIGKILLed under load: the default shard
// decides tasks all along, s2's standby takes over report, and every
// increment an agent was told was applied is in the state exactly once.
func TestShardFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 NATS nodes and 3 coordinators as processes")
	}
	c, urls := startTwoShards(t)

	// One agent a board, each incrementing its counter until told to stop;
	// an increment that got no decision in time is sent again, same id.
	var mu sync.Mutex
	applied := map[string]int{}
	var last [2]atomic.Int64 // when each board last had an increment applied
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, board := range []string{"tasks", "report"} {
		cl := c.connectAgent("w-" + board)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				d, err := cl.Apply(ctx, intents.Apply("count").Incr(board+".n", 1))
				cancel()
				if err != nil || d.Outcome != intents.OutcomeApplied {
					t.Errorf("incr of %s: %+v %v", board, d, err)
					return
				}
				mu.Lock()
				applied[board]++
				mu.Unlock()
				last[i].Store(time.Now().UnixNano())
			}
		})
	}
	count := func(board string) int {
		mu.Lock()
		defer mu.Unlock()
		return applied[board]
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		natstest.CheckFor(t, 30*time.Second, what, func() error {
			if !cond() {
				return errors.New("not yet")
			}
			return nil
		})
	}
	waitFor("increments on both boards", func() bool { return count("tasks") > 20 && count("report") > 20 })
	victim := c.activeCoord(15 * time.Second)
	killed := time.Now()
	victim.n.kill(t)
	tasksAt, reportAt := count("tasks"), count("report")
	// The default shard goes on deciding while s2 has no active coordinator.
	waitFor("tasks decided while s2 fails over", func() bool { return count("tasks") > tasksAt+20 })
	waitFor("report decided again on s2", func() bool { return last[1].Load() > killed.UnixNano() })
	back := time.Unix(0, last[1].Load()).Sub(killed)
	waitFor("report decided on s2", func() bool { return count("report") > reportAt+20 })
	next := c.activeCoord(15 * time.Second)
	t.Logf("s2's %s killed; %s active; report applied again %s after, tasks all along", victim.name, next.name, back.Round(time.Millisecond))
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, board := range []string{"tasks", "report"} {
		p := runBin(t, nil, "", "get", board+".n", "--nats", urls, "-o", "json")
		if p.status != 0 || !strings.Contains(p.stdout, fmt.Sprintf(`"value": %d`, count(board))) && !strings.Contains(p.stdout, fmt.Sprintf(`"value":%d`, count(board))) {
			t.Fatalf("%s.n after %d increments applied: %+v", board, count(board), p)
		}
	}
}

// TestCrossShardKill: agents apply to report (shard s2, a cluster of two
// coordinator processes) and tasks (the default shard, one process)
// together; s2, the shard of the first board, coordinates each apply.
// s2's active coordinator is SIGKILLed under that load, with commit
// points, finishes and answers in flight: its standby drives again what
// its log left begun, tells and answers what it committed, and the
// default shard's parts in doubt ask it. Each agent's counters on the two
// boards both equal the applies it was told applied; nothing is left
// prepared on either shard.
func TestCrossShardKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 NATS nodes and 3 coordinators as processes")
	}
	c, urls := startTwoShards(t)

	const workers = 3
	var applied [workers]atomic.Int64
	var total atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range workers {
		cl := c.connectAgent(fmt.Sprintf("x%d", i))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				d, err := cl.Apply(ctx, intents.Apply("both").Incr(fmt.Sprintf("report.n%d", i), 1).Incr(fmt.Sprintf("tasks.n%d", i), 1))
				cancel()
				switch {
				case err != nil:
					t.Errorf("cross-shard apply of x%d: %v", i, err)
					return
				case d.Outcome == intents.OutcomeApplied:
					applied[i].Add(1)
					total.Add(1)
				case d.Outcome == intents.OutcomeRejected && d.Retryable:
					// A vote that did not come in time: nothing of it applied.
				default:
					t.Errorf("cross-shard apply of x%d: %+v", i, d)
					return
				}
			}
		})
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		natstest.CheckFor(t, 60*time.Second, what, func() error {
			if !cond() {
				return errors.New("not yet")
			}
			return nil
		})
	}
	waitFor("cross-shard applies", func() bool { return total.Load() > 30 })
	victim := c.activeCoord(15 * time.Second)
	victim.n.kill(t)
	at := total.Load()
	waitFor("cross-shard applies after the kill", func() bool { return total.Load() > at+30 })
	next := c.activeCoord(15 * time.Second)
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("s2's %s killed after %d applies; %s active; %d applied in all", victim.name, at, next.name, total.Load())

	// Told applied means applied on both boards: read at once.
	cl := c.connectAgent("reader")
	for i := range workers {
		paths := []string{fmt.Sprintf("report.n%d", i), fmt.Sprintf("tasks.n%d", i)}
		st, err := cl.Read(context.Background(), paths...)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			if got := string(st.Values[p].Value); got != fmt.Sprint(applied[i].Load()) {
				t.Errorf("%s = %s after x%d was told of %d applies", p, got, i, applied[i].Load())
			}
		}
	}
	// Nothing is left prepared: each shard's parts in doubt are asked
	// after and ended.
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, shard := range []string{"default", "s2"} {
		natstest.CheckFor(t, 30*time.Second, "nothing in doubt on shard "+shard, func() error {
			info, err := natstest.RequestErr[intents.ShardInfo](nc, intents.Subjects{}.Shard(shard).API(intents.APIShardInfo), "{}", 5*time.Second)
			switch {
			case err != nil:
				return err
			case info.InDoubt != 0 || info.Unanswered != 0:
				return fmt.Errorf("%d parts in doubt, %d applies unanswered", info.InDoubt, info.Unanswered)
			}
			return nil
		})
	}
}
