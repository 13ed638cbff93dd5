package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// The process-level failover tests of SPEC §10: three `coagent serve
// --coordinator=false` NATS nodes, coordinators on them (`coagent serve
// --nats`), agents of this process under load, and processes killed,
// paused and restarted under it. Each ends with the same checks: every
// counter is the number of increments the agents were told were applied,
// every intent has one final decision in every coordinator's log, and
// every log folds to the same state, the one the live coordinator
// answered.

// leaseTTL is the coordinators' --lease-ttl.
const leaseTTL = 2 * time.Second

// failoverCluster is the NATS nodes and coordinators of one test.
type failoverCluster struct {
	t        *testing.T
	dir      string
	urls     []string   // the NATS nodes' client URLs
	nodeArgs [][]string // each node's serve arguments, to restart it
	nodes    []*node
	coords   []*coordProc
	// coordArgs are more serve arguments of every coordinator.
	coordArgs []string
}

// coordProc is one `coagent serve --nats` coordinator process; a restart
// replaces n and the channels.
type coordProc struct {
	name, data string
	args       []string
	n          *node
	conn       string        // the NATS URL it connected to, from its start-up line
	started    chan struct{} // closed at its start-up line
	gone       chan struct{} // closed when its stdout ends
	active     chan time.Time
	past       []string // the stderr of its earlier processes
}

// startFailoverCluster starts three NATS nodes and coords coordinators on
// them, each given coordArgs besides, and waits until one coordinator is
// active.
func startFailoverCluster(t *testing.T, coords int, coordArgs ...string) *failoverCluster {
	t.Helper()
	c := &failoverCluster{t: t, dir: t.TempDir(), coordArgs: coordArgs}
	var args [][]string
	c.urls, args = clusterNodes(t, c.dir)
	for i := range 3 {
		c.nodeArgs = append(c.nodeArgs, append([]string{"serve", "--coordinator=false"}, args[i]...))
	}
	// A node prints its start-up line once the cluster has formed, which
	// takes the others: they start together.
	for i := range 3 {
		c.nodes = append(c.nodes, launchNode(t, c.urls[i], c.nodeArgs[i]...))
	}
	for _, n := range c.nodes {
		n.await(t)
	}
	for i := range coords {
		c.coords = append(c.coords, c.launchCoord(fmt.Sprintf("c%d", i+1), filepath.Join(c.dir, fmt.Sprintf("c%d", i+1))))
	}
	for _, co := range c.coords {
		co.await(t)
	}
	c.activeCoord(30 * time.Second)
	// A failure shows what each coordinator logged, in all its lives
	// (the publisher's warnings left out: one a change it could not send).
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, co := range c.coords {
			for i, s := range append(co.past, co.n.stderr.String()) {
				var b strings.Builder
				for _, l := range strings.SplitAfter(s, "\n") {
					if !strings.Contains(l, `msg="publish failed"`) {
						b.WriteString(l)
					}
				}
				t.Logf("coordinator %s, process %d, stderr:\n%s", co.name, i+1, b.String())
			}
		}
	})
	return c
}

// clusterNodes picks the addresses of three nodes of one cluster on
// loopback, named n1, n2 and n3 with their data under dir, and returns
// their client URLs and the serve flags of each.
func clusterNodes(t *testing.T, dir string) (urls []string, args [][]string) {
	t.Helper()
	ports := natstest.FreePorts(t, 6)
	var routes []string
	for i := range 3 {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+i]))
	}
	for i := range 3 {
		name := fmt.Sprintf("n%d", i+1)
		args = append(args, []string{"--name", name, "--data", filepath.Join(dir, name),
			"--listen", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--cluster", fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			"--routes", strings.Join(routes, ",")})
	}
	return urls, args
}

// launchCoord starts coordinator name on data and returns at once.
func (c *failoverCluster) launchCoord(name, data string) *coordProc {
	c.t.Helper()
	co := &coordProc{name: name, data: data, args: []string{"serve", "--nats", strings.Join(c.urls, ","), "--name", name,
		"--replicas", "3", "--lease-ttl", leaseTTL.String(), "--data", data, "-v"}}
	co.args = append(co.args, c.coordArgs...)
	co.launch(c.t)
	return co
}

// launch starts co's process (again) and reads its stdout: the start-up
// line, and each line saying it became active.
func (co *coordProc) launch(t *testing.T) {
	t.Helper()
	co.started, co.gone, co.active = make(chan struct{}), make(chan struct{}), make(chan time.Time, 64)
	co.conn = ""
	if co.n != nil {
		co.past = append(co.past, co.n.stderr.String())
	}
	n := launchNode(t, co.name, co.args...)
	co.n = n
	started, gone, active := co.started, co.gone, co.active
	go func() {
		defer close(gone)
		up := false
		for l := range n.lines {
			switch {
			case !up && strings.HasPrefix(l, "coagent: serving on "):
				co.conn, _, _ = strings.Cut(strings.TrimPrefix(l, "coagent: serving on "), ";")
				up = true
				close(started)
			case strings.Contains(l, "is the active coordinator"):
				select {
				case active <- time.Now():
				default:
				}
			}
		}
	}()
}

// await waits for co's start-up line.
func (co *coordProc) await(t *testing.T) {
	t.Helper()
	select {
	case <-co.started:
	case <-co.gone:
		t.Fatalf("coordinator %s exited before it served; stderr:\n%s", co.name, co.n.stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("coordinator %s did not serve within a minute; stderr:\n%s", co.name, co.n.stderr.String())
	}
}

// stop sends co SIGTERM and waits for it to exit; one that has not within
// 30s is sent SIGQUIT, whose goroutine dump the failure shows. It reports
// whether co stopped by itself.
func (co *coordProc) stop(t *testing.T) bool {
	t.Helper()
	n := co.n
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n.done:
		n.waited = true
		if err != nil {
			t.Errorf("coordinator %s: exit %v; stderr:\n%s", co.name, err, tail(n.stderr.String(), 40))
		}
		return err == nil
	case <-time.After(30 * time.Second):
	}
	n.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-n.done:
		n.waited = true
	case <-time.After(10 * time.Second):
	}
	t.Errorf("coordinator %s did not stop within 30s of SIGTERM; stderr, with the goroutines SIGQUIT dumped:\n%s", co.name, n.stderr.String())
	return false
}

// coord returns the coordinator named name.
func (c *failoverCluster) coord(name string) *coordProc {
	for _, co := range c.coords {
		if co.name == name {
			return co
		}
	}
	c.t.Fatalf("no coordinator %q", name)
	return nil
}

// status runs `coagent status -o json` through the node at url.
func (c *failoverCluster) status(url string) (coordinator.ClusterStatus, error) {
	args := []string{"status", "--nats", url, "-o", "json", "--wait", "500ms"}
	if i := slices.Index(c.coordArgs, "--shard"); i >= 0 && i+1 < len(c.coordArgs) {
		args = append(args, "--shard", c.coordArgs[i+1]) // the coordinators' shard
	}
	p := runBin(c.t, nil, "", args...)
	var st coordinator.ClusterStatus
	if p.status != 0 {
		return st, fmt.Errorf("status through %s: exit %d: %s", url, p.status, strings.TrimSpace(p.stderr))
	}
	if err := json.Unmarshal([]byte(p.stdout), &st); err != nil {
		return st, fmt.Errorf("status through %s: %w: %s", url, err, p.stdout)
	}
	return st, nil
}

// activeCoord waits until status shows exactly one active coordinator,
// which every member answering names as the leader, and returns it.
func (c *failoverCluster) activeCoord(d time.Duration) *coordProc {
	c.t.Helper()
	var name string
	natstest.CheckFor(c.t, d, "one active coordinator", func() error {
		st, err := c.status(strings.Join(c.urls, ","))
		if err != nil {
			return err
		}
		if len(st.Active) != 1 {
			return fmt.Errorf("active %v", st.Active)
		}
		for _, m := range st.Members {
			if m.Leader != st.Active[0] {
				return fmt.Errorf("%s is active, %s sees %q as the leader", st.Active[0], m.Node, m.Leader)
			}
		}
		name = st.Active[0]
		return nil
	})
	return c.coord(name)
}

// level waits until every coordinator answers status, one is active and
// all hold the same last event, none lagging; it returns that event.
func (c *failoverCluster) level(d time.Duration) uint64 {
	c.t.Helper()
	var seq uint64
	var behind []string // the members that lag, at the last status
	level := func() error {
		st, err := c.status(strings.Join(c.urls, ","))
		if err != nil {
			return err
		}
		if len(st.Members) != len(c.coords) || len(st.Active) != 1 {
			return fmt.Errorf("%d members of %d answered, active %v", len(st.Members), len(c.coords), st.Active)
		}
		behind = behind[:0]
		last := slices.MaxFunc(st.Members, func(a, b intents.MemberStatus) int { return cmp.Compare(a.Seq, b.Seq) }).Seq
		for _, m := range st.Members {
			if m.Seq != last || m.LagGroups != 0 || m.LogSeq != m.LogLast {
				behind = append(behind, m.Node)
			}
		}
		if len(behind) > 0 {
			return fmt.Errorf("members %+v", st.Members)
		}
		seq = last
		return nil
	}
	err := level()
	for deadline := time.Now().Add(d); err != nil && time.Now().Before(deadline); err = level() {
		time.Sleep(100 * time.Millisecond)
	}
	if err == nil {
		return seq
	}
	// Where a member stopped following, its goroutines tell where: each
	// one behind is sent SIGQUIT, and the failure shows its dump.
	for _, co := range c.coords {
		if slices.Contains(behind, co.name) && !co.n.waited {
			co.n.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-co.n.done:
				co.n.waited = true
			case <-time.After(10 * time.Second):
			}
		}
	}
	c.t.Fatalf("waiting for every coordinator level with the active one: %v (after %s); those behind were sent SIGQUIT: %v", err, d, behind)
	return 0
}

// connectAgent connects agent name to every node of the cluster, on a
// connection of its own that reconnects for ever and notices a lost
// server within a second.
func (c *failoverCluster) connectAgent(name string, opts ...agents.Option) *agents.Client {
	c.t.Helper()
	nc, err := nats.Connect(strings.Join(c.urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.PingInterval(500*time.Millisecond), nats.MaxPingsOutstanding(2), nats.Name(name))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := agents.Connect(ctx, nc, name, opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// The paths the load writes.
const (
	counters   = 4
	txnAgents  = 8
	incrAgents = 8
	probePath  = "probe.n"
)

func counterPath(i int) string { return fmt.Sprintf("ctr.c%d", i) }
func txnPath(agent, k int) string {
	return fmt.Sprintf("txn.a%d.k%d", agent, k)
}

// callTimeout bounds each call of the load: long enough that the SDK
// sends the same intent again over a failover.
const callTimeout = 60 * time.Second

// load is the agents' work and what they were told.
type load struct {
	t     *testing.T
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	probe *agents.Client

	mu struct {
		sync.Mutex
		// strict are the ids that must have exactly one final decision:
		// every intent of the load; maybe those of probes, which may never
		// have reached a coordinator.
		strict, maybe map[string]bool
		got           map[string]intents.Outcome // the final outcome each call was told
		incrs         [counters]int              // increments applied, by counter
		probes        int                        // probe increments applied
		txns          map[string]int             // each transaction path's last committed value
		ops           int                        // calls that got a final decision
		dups          int                        // of which answered as duplicates: sent again, over a failover
		failures      int                        // calls that failed
	}
	progress chan struct{} // a call got a final decision
}

// startLoad starts incrAgents agents incrementing the shared counters and
// txnAgents agents each committing transactions on paths of its own.
func (c *failoverCluster) startLoad() *load {
	c.t.Helper()
	l := &load{t: c.t, stop: make(chan struct{}), progress: make(chan struct{}, 1)}
	l.mu.strict, l.mu.maybe, l.mu.got, l.mu.txns = map[string]bool{}, map[string]bool{}, map[string]intents.Outcome{}, map[string]int{}
	l.probe = c.connectAgent("probe", agents.WithResend(300*time.Millisecond))
	for i := range incrAgents {
		cl := c.connectAgent(fmt.Sprintf("inc%d", i))
		l.wg.Add(1)
		go l.incrLoop(cl, i)
	}
	for i := range txnAgents {
		cl := c.connectAgent(fmt.Sprintf("txn%d", i))
		l.wg.Add(1)
		go l.txnLoop(cl, i)
	}
	// Before the clients close: cleanups run last first.
	c.t.Cleanup(l.finish)
	return l
}

func (l *load) failures() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.failures
}

func (l *load) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// decided records the final decision d of a call.
func (l *load) decided(d *intents.Decision) {
	l.mu.Lock()
	l.mu.got[d.Intent] = d.Outcome
	l.mu.ops++
	if d.Duplicate {
		l.mu.dups++
	}
	l.mu.Unlock()
	select {
	case l.progress <- struct{}{}:
	default:
	}
}

func (l *load) sent(id string, strict bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if strict {
		l.mu.strict[id] = true
	} else {
		l.mu.maybe[id] = true
	}
}

// noDecisionID is the intent id in the error of a call that got no final
// decision.
var noDecisionID = regexp.MustCompile(`intent (\w+): no final decision`)

// failed records a call of the load that failed: a product failure, as a
// call waits a minute for its decision. The first 20 are reported.
func (l *load) failed(agent, what string, err error) {
	if m := noDecisionID.FindStringSubmatch(err.Error()); m != nil {
		l.sent(m[1], false)
	}
	l.mu.Lock()
	l.mu.failures++
	n := l.mu.failures
	l.mu.Unlock()
	switch {
	case n <= 20:
		l.t.Errorf("%s at %s: %s: %v", agent, time.Now().Format("15:04:05.000"), what, err)
	case n == 21:
		l.t.Errorf("more calls failed; the count is at the end")
	}
}

// incrLoop increments counter i%counters by 1 until the load stops.
func (l *load) incrLoop(cl *agents.Client, i int) {
	defer l.wg.Done()
	path := counterPath(i % counters)
	for !l.stopped() {
		in, err := intents.Apply("incr").Incr(path, 1).Build()
		if err != nil {
			panic(err) // a constant intent
		}
		in.ID = ulid.Make().String()
		l.sent(in.ID, true)
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		d, err := cl.Submit(ctx, in)
		cancel()
		if err != nil {
			l.failed(cl.Name(), "incr "+in.ID, err)
			continue
		}
		if d.Outcome == intents.OutcomeApplied {
			l.mu.Lock()
			l.mu.incrs[i%counters]++
			l.mu.Unlock()
		} else {
			l.failed(cl.Name(), "incr "+in.ID, fmt.Errorf("%s %s: %s", d.Outcome, d.Reason, d.Detail))
		}
		l.decided(d)
	}
}

// txnLoop proposes a transaction over one of its own paths, then commits
// the next value there, until the load stops.
func (l *load) txnLoop(cl *agents.Client, i int) {
	defer l.wg.Done()
	for n := 1; !l.stopped(); n++ {
		path := txnPath(i, n%3)
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		txn, err := cl.Propose(ctx, intents.Propose("txn").Write(path, intents.OpSet).Lease(30*time.Second))
		cancel()
		if err != nil {
			var rej *agents.RejectedError
			if errors.As(err, &rej) {
				l.sent(rej.Decision.Intent, true)
				l.decided(rej.Decision)
			}
			l.failed(cl.Name(), "propose "+path, err)
			continue
		}
		l.sent(txn.Grant().Intent, true)
		l.decided(txn.Grant())
		ctx, cancel = context.WithTimeout(context.Background(), callTimeout)
		d, err := txn.Commit(ctx, intents.Apply("txn").Set(path, n))
		cancel()
		if d != nil {
			l.sent(d.Intent, true)
			l.decided(d)
		}
		switch {
		case err == nil:
			l.mu.Lock()
			l.mu.txns[path] = n
			l.mu.Unlock()
		case errors.Is(err, agents.ErrLeaseExpired) || errors.Is(err, agents.ErrFenced):
			l.failed(cl.Name(), fmt.Sprintf("the commit of granted transaction %s (fence %d) was refused", txn.ID(), txn.Fence()), err)
		default:
			l.failed(cl.Name(), "commit "+path, err)
		}
	}
}

// probeApplied submits fresh increments of the probe path, each given
// 300ms, until one is applied, and returns when it was.
func (l *load) probeApplied(d time.Duration) (time.Time, error) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		in, err := intents.Apply("probe").Incr(probePath, 1).Build()
		if err != nil {
			return time.Time{}, err
		}
		in.ID = ulid.Make().String()
		l.sent(in.ID, false)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		dec, err := l.probe.Submit(ctx, in)
		cancel()
		if err != nil || dec.Outcome != intents.OutcomeApplied {
			continue
		}
		at := time.Now()
		l.mu.Lock()
		l.mu.probes++
		l.mu.got[dec.Intent] = dec.Outcome
		l.mu.Unlock()
		return at, nil
	}
	return time.Time{}, fmt.Errorf("no probe increment was applied within %s", d)
}

// awaitOps waits until the load has had n more final decisions.
func (l *load) awaitOps(n int, d time.Duration) {
	l.t.Helper()
	l.mu.Lock()
	want := l.mu.ops + n
	l.mu.Unlock()
	deadline := time.After(d)
	for {
		l.mu.Lock()
		ops := l.mu.ops
		l.mu.Unlock()
		if ops >= want {
			return
		}
		select {
		case <-l.progress:
		case <-deadline:
			l.t.Fatalf("the load had %d of %d more decisions in %s", ops-(want-n), n, d)
		}
	}
}

// finish stops the agents and waits for their calls in flight.
func (l *load) finish() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// paths are every path the load writes.
func (l *load) paths() []string {
	ps := []string{probePath}
	for i := range counters {
		ps = append(ps, counterPath(i))
	}
	for i := range txnAgents {
		for k := range 3 {
			ps = append(ps, txnPath(i, k))
		}
	}
	return ps
}

// logView is what a coordinator's log, stopped, folds to.
type logView struct {
	name   string
	hash   string
	first  uint64 // its first event: past 1 for one that joined from a snapshot
	last   uint64
	rev    uint64
	values map[string]string // path → its entry as JSON
	finals map[string][]intents.Outcome
	// recorded counts the ids of finals read from the idempotency
	// records, not from events: decided before the log's first event.
	recorded int
}

// readLog opens a stopped coordinator's event log and folds it. The
// final decisions are those of its events; a log that starts past event 1
// (a coordinator that joined from a snapshot: its log starts at the
// snapshot's event) holds those decided before only as idempotency
// records, which the snapshot carries: for each of ids with no final
// decision among the events, the record's, if final, is taken. A
// decision both before the snapshot and after it would show as one there;
// the logs of the coordinators that folded the whole stream, compared
// beside it, hold every event and would show two.
func readLog(t *testing.T, name, data string, paths []string, ids []string) logView {
	t.Helper()
	core, err := coordinator.OpenCore(filepath.Join(data, "eventlog"), coordinator.CoreOptions{})
	if err != nil {
		t.Fatalf("coordinator %s's log: %v", name, err)
	}
	defer core.Close()
	tree := core.Engine().State()
	v := logView{name: name, hash: replay.Hash(tree), first: max(core.Log().FirstSeq(), 1), last: core.Log().LastSeq(), rev: tree.Rev(),
		values: map[string]string{}, finals: map[string][]intents.Outcome{}}
	for _, p := range paths {
		e := tree.Lookup(p)
		b, _ := json.Marshal(map[string]any{"exists": e.Exists, "value": e.Value, "version": e.Version, "mod_rev": e.ModRev})
		v.values[p] = string(b)
	}
	err = core.Log().Scan(v.first, 0, func(ev *intents.Event) error {
		if d := ev.Decision; d != nil && !d.Duplicate && d.Outcome.Final() {
			v.finals[d.Intent] = append(v.finals[d.Intent], d.Outcome)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("coordinator %s's log: %v", name, err)
	}
	if v.first == 1 {
		return v
	}
	for _, id := range ids {
		if len(v.finals[id]) > 0 {
			continue
		}
		d, err := core.Log().Decision(id)
		switch {
		case errors.Is(err, eventlog.ErrNotFound):
		case err != nil:
			t.Fatalf("coordinator %s's log: %v", name, err)
		case d.Outcome.Final():
			v.finals[id] = []intents.Outcome{d.Outcome}
			v.recorded++
		}
	}
	return v
}

// liveValue is a state.get entry in readLog's form.
func liveValue(v agents.Value) string {
	var val any
	if len(v.Value) > 0 {
		json.Unmarshal(v.Value, &val)
	}
	b, _ := json.Marshal(map[string]any{"exists": v.Exists, "value": val, "version": v.Version, "mod_rev": v.ModRev})
	return string(b)
}

// finish stops the load, reads the live state, stops every coordinator
// (the standbys first, so that the active one's log is the longest if
// anything differs) and checks their logs: the counters are the applied
// increments, every intent one final decision (the outcome its agent was
// told), every log the same events and state, the live one. It returns
// the logs it compared.
func (c *failoverCluster) finish(l *load) []logView {
	t := c.t
	t.Helper()
	l.finish()
	if n := l.failures(); n > 0 {
		t.Errorf("%d calls of the load failed", n)
	}
	seq := c.level(30 * time.Second)
	paths := l.paths()
	var live *agents.State
	natstest.CheckFor(t, 30*time.Second, "state.get", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		live, err = l.probe.Read(ctx, paths...)
		return err
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, want := range l.mu.incrs {
		var got float64
		if err := live.Values[counterPath(i)].Decode(&got); err != nil || got != float64(want) {
			t.Errorf("%s = %s, the agents were told of %d increments applied", counterPath(i), live.Values[counterPath(i)].Value, want)
		}
	}
	for p, want := range l.mu.txns {
		var got float64
		if err := live.Values[p].Decode(&got); err != nil || got != float64(want) {
			t.Errorf("%s = %s, the last commit there was of %d", p, live.Values[p].Value, want)
		}
	}
	var probes float64
	live.Values[probePath].Decode(&probes)
	if probes < float64(l.mu.probes) {
		t.Errorf("%s = %v, %d probes were told they were applied", probePath, probes, l.mu.probes)
	}

	active := c.activeCoord(10 * time.Second)
	clean := map[*coordProc]bool{}
	for _, co := range c.coords {
		if co != active {
			clean[co] = co.stop(t)
		}
	}
	clean[active] = active.stop(t)
	// A coordinator that had to be killed may have lost the unsynced tail
	// of its local log (the replicated log is the log of record, and it
	// would catch up from it): only the others' logs are compared.
	ids := slices.Collect(maps.Keys(l.mu.strict))
	ids = slices.AppendSeq(ids, maps.Keys(l.mu.maybe))
	var views []logView
	for _, co := range c.coords {
		if !clean[co] {
			t.Logf("coordinator %s's log is not compared: it was killed", co.name)
			continue
		}
		views = append(views, readLog(t, co.name, co.data, paths, ids))
	}
	if len(views) == 0 {
		t.Fatal("no coordinator stopped by itself")
	}
	for _, v := range views {
		if v.hash != views[0].hash || v.last != views[0].last || v.rev != views[0].rev {
			t.Errorf("coordinator %s's log: hash %.12s, last event %d, rev %d; %s's: %.12s, %d, %d",
				v.name, v.hash, v.last, v.rev, views[0].name, views[0].hash, views[0].last, views[0].rev)
		}
		if v.last < seq {
			t.Errorf("coordinator %s's log ends at event %d; status said every log had %d", v.name, v.last, seq)
		}
		if v.rev != live.Rev {
			t.Errorf("coordinator %s's log folds to rev %d; state.get answered at rev %d", v.name, v.rev, live.Rev)
		}
		for _, p := range paths {
			if lv := liveValue(live.Values[p]); v.values[p] != lv {
				t.Errorf("coordinator %s's log has %s = %s; state.get answered %s", v.name, p, v.values[p], lv)
			}
		}
		bad := 0
		for id := range l.mu.strict {
			if f := v.finals[id]; len(f) != 1 && bad < 10 {
				bad++
				t.Errorf("coordinator %s's log: intent %s has final decisions %v, want one", v.name, id, f)
			}
		}
		for id := range l.mu.maybe {
			if f := v.finals[id]; len(f) > 1 && bad < 10 {
				bad++
				t.Errorf("coordinator %s's log: probe intent %s has final decisions %v, want at most one", v.name, id, f)
			}
		}
		for id, o := range l.mu.got {
			if f := v.finals[id]; len(f) == 0 || f[0] != o {
				if bad < 10 {
					bad++
					t.Errorf("coordinator %s's log: intent %s has final decisions %v; its agent was told %s", v.name, id, f, o)
				}
			}
		}
	}
	t.Logf("%d intents decided (%d answered as duplicates, %d probes applied); every log ends at event %d, rev %d, hash %.12s",
		l.mu.ops, l.mu.dups, l.mu.probes, views[0].last, views[0].rev, views[0].hash)
	return views
}

// pace waits between 1 and 3 seconds, drawn from rng: when the next fault
// comes is the test's choice, not something to wait for.
func pace(rng *rand.Rand) {
	time.Sleep(time.Second + time.Duration(rng.Int64N(int64(2*time.Second))))
}

// failoverSeed draws the seed of a test's pauses, and logs it.
func failoverSeed(t *testing.T) *rand.Rand {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(uint64(seed), 0))
}

// TestFailoverUnderLoad: five times, at random moments, the active
// coordinator is killed under the load of 16 agents; a standby takes over
// (the failover times are logged), and the killed one is started again on
// its data. No increment is lost or applied twice, no granted transaction
// is refused its commit, every intent has one final decision, and every
// log is the same.
func TestFailoverUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 NATS nodes and 3 coordinators as processes")
	}
	rng := failoverSeed(t)
	c := startFailoverCluster(t, 3)
	l := c.startLoad()
	l.awaitOps(50, 30*time.Second)
	var times []time.Duration
	for round := range 5 {
		pace(rng)
		victim := c.activeCoord(15 * time.Second)
		killed := time.Now()
		victim.n.kill(t)
		at, err := l.probeApplied(30 * time.Second)
		if err != nil {
			t.Fatalf("round %d: %s killed: %v; stderr of the others:\n%s", round+1, victim.name, err, c.stderrs(victim))
		}
		times = append(times, at.Sub(killed))
		next := c.activeCoord(15 * time.Second)
		t.Logf("round %d: %s killed, %s active after %s", round+1, victim.name, next.name, at.Sub(killed).Round(time.Millisecond))
		victim.launch(t)
		victim.await(t)
	}
	l.awaitOps(50, 30*time.Second)
	c.finish(l)
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	var parts []string
	for _, d := range times {
		parts = append(parts, d.Round(time.Millisecond).String())
	}
	t.Logf("failover times: %s; median %s, max %s", strings.Join(parts, " "),
		sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond))
}

// stderrs is the stderr of every coordinator but skip, for a failure's
// message.
func (c *failoverCluster) stderrs(skip *coordProc) string {
	var b strings.Builder
	for _, co := range c.coords {
		if co != skip {
			fmt.Fprintf(&b, "--- %s:\n%s", co.name, tail(co.n.stderr.String(), 40))
		}
	}
	return b.String()
}

// warnings are the lines of warning and error level the coordinators
// logged on stderr.
func (c *failoverCluster) warnings() string {
	var b strings.Builder
	for _, co := range c.coords {
		for _, l := range strings.SplitAfter(co.n.stderr.String(), "\n") {
			if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
				fmt.Fprintf(&b, "%s: %s", co.name, l)
			}
		}
	}
	return b.String()
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// logReplicas reads COAGENT_LOG's stream info through the node at url.
func logReplicas(url string) (*jetstream.StreamInfo, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, intents.Subjects{}.Stream(intents.StreamLog))
	if err != nil {
		return nil, err
	}
	return st.CachedInfo(), nil
}

// TestNATSNodeKillUnderLoad: a NATS node (not the active coordinator's) is
// killed under load; decisions go on being applied, and the node, started
// again on its data, rejoins the log's replicas; nothing is lost or
// decided twice.
func TestNATSNodeKillUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 NATS nodes and 3 coordinators as processes")
	}
	rng := failoverSeed(t)
	c := startFailoverCluster(t, 3)
	l := c.startLoad()
	l.awaitOps(50, 30*time.Second)
	pace(rng)
	active := c.activeCoord(15 * time.Second)
	victim := -1
	for i, u := range c.urls {
		if u != active.conn && (victim < 0 || rng.IntN(2) == 0) {
			victim = i
		}
	}
	leader := "?"
	if info, err := logReplicas(c.urls[(victim+1)%3]); err == nil && info.Cluster != nil {
		leader = info.Cluster.Leader
	}
	t.Logf("%s is active, connected to %s; COAGENT_LOG's leader is %s; killing node n%d (%s)", active.name, active.conn, leader, victim+1, c.urls[victim])
	killed := time.Now()
	c.nodes[victim].kill(t)
	at, err := l.probeApplied(30 * time.Second)
	if err != nil {
		t.Fatalf("node n%d killed: %v; coordinators' stderr:\n%s", victim+1, err, c.stderrs(nil))
	}
	t.Logf("a decision applied %s after the kill; %s active; the coordinators' warnings:\n%s",
		at.Sub(killed).Round(time.Millisecond), c.activeCoord(15*time.Second).name, c.warnings())
	l.awaitOps(50, 30*time.Second)

	c.nodes[victim] = launchNode(t, c.urls[victim], c.nodeArgs[victim]...)
	c.nodes[victim].await(t)
	other := c.urls[(victim+1)%3]
	natstest.CheckFor(t, 45*time.Second, "COAGENT_LOG with 3 current replicas", func() error {
		info, err := logReplicas(other)
		if err != nil {
			return err
		}
		ci := info.Cluster
		if ci == nil || ci.Leader == "" || len(ci.Replicas) != 2 {
			return fmt.Errorf("cluster %+v", ci)
		}
		for _, r := range ci.Replicas {
			if !r.Current || r.Offline {
				return fmt.Errorf("replica %s: current %v, offline %v, lag %d", r.Name, r.Current, r.Offline, r.Lag)
			}
		}
		return nil
	})
	t.Logf("node n%d rejoined %s after the kill", victim+1, time.Since(killed).Round(time.Millisecond))
	l.awaitOps(50, 30*time.Second)
	c.finish(l)
}

// TestBucketLeaderNodeKilled: the NATS node that leads the leadership
// bucket's stream (not the active coordinator's node) is killed under
// load. Its stream elects a new leader, which takes longer than the lease,
// and meanwhile nobody can write the key: the active coordinator rides it
// out rather than step down, deciding and logging, though answering
// nothing until the key is renewed; nothing is lost or decided twice.
func TestBucketLeaderNodeKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 NATS nodes and 2 coordinators as processes")
	}
	c := startFailoverCluster(t, 2)
	l := c.startLoad()
	l.awaitOps(50, 30*time.Second)
	active := c.activeCoord(15 * time.Second)
	bucket := "KV_" + intents.Subjects{}.LeaderBucket()
	nc, err := nats.Connect(strings.Join(c.urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The bucket's leader is moved off the active coordinator's node, so
	// that killing it leaves the coordinator connected.
	victim := -1
	natstest.CheckFor(t, 30*time.Second, "the bucket led by a node other than the active coordinator's", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, bucket)
		if err != nil {
			return err
		}
		info := st.CachedInfo()
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return errors.New("no leader")
		}
		i, _ := strconv.Atoi(strings.TrimPrefix(info.Cluster.Leader, "n"))
		if i < 1 || i > 3 {
			return fmt.Errorf("leader %q", info.Cluster.Leader)
		}
		if c.urls[i-1] == active.conn {
			_, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+bucket, nil, 2*time.Second)
			return fmt.Errorf("led by the active coordinator's node %s; stepped down (%v)", info.Cluster.Leader, err)
		}
		victim = i - 1
		return nil
	})
	kv, err := js.KeyValue(context.Background(), intents.Subjects{}.LeaderBucket())
	if err != nil {
		t.Fatal(err)
	}
	lease, err := kv.Get(context.Background(), intents.LeaderKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s is active, connected to %s; killing n%d, the leader of %s", active.name, active.conn, victim+1, bucket)
	killed := time.Now()
	c.nodes[victim].kill(t)
	if _, err := l.probeApplied(30 * time.Second); err != nil {
		t.Fatalf("node n%d killed: %v; coordinators' stderr:\n%s", victim+1, err, c.stderrs(nil))
	}
	l.awaitOps(50, 30*time.Second)
	// While the lease has lapsed, another coordinator could take the key
	// as soon as the bucket answers, so the active one refuses reads.
	if strings.Contains(active.n.stderr.String(), "its lease has lapsed") {
		m, err := nc.Request(intents.Subjects{}.API(intents.APIStateGet), []byte(`{"paths":["ctr"]}`), 2*time.Second)
		switch {
		case err != nil:
			t.Fatalf("a read while the lease had lapsed: %v", err)
		case m.Header.Get("Nats-Service-Error-Code") == "unavailable":
		default:
			natstest.CheckFor(t, 5*time.Second, "the read answered because the lease was renewed", func() error {
				if !strings.Contains(active.n.stderr.String(), "reads are answered again") {
					return fmt.Errorf("answered %s while the lease had lapsed", m.Data)
				}
				return nil
			})
		}
	}
	// Renewals going through again, twice, say that the bucket has a
	// leader once more: the election is over.
	natstest.CheckFor(t, 60*time.Second, "the key renewed after the bucket's election", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		e, err := kv.Get(ctx, intents.LeaderKey)
		switch {
		case err != nil:
			return err
		case e.Revision() < lease.Revision()+2:
			return fmt.Errorf("revision %d, %d at the kill", e.Revision(), lease.Revision())
		case !strings.Contains(string(e.Value()), `"`+active.name+`"`):
			return fmt.Errorf("the key is %s", e.Value())
		}
		if s := active.n.stderr.String(); strings.Contains(s, "its lease has lapsed") && !strings.Contains(s, "reads are answered again") {
			return errors.New("renewed, but the coordinator has not said so yet")
		}
		return nil
	})
	if !strings.Contains(active.n.stderr.String(), "its lease has lapsed") {
		t.Logf("the key was renewed within the lease throughout (%s after the kill): riding an election out was not needed", time.Since(killed).Round(time.Millisecond))
	}
	if now := c.activeCoord(15 * time.Second); now != active || strings.Contains(active.n.stderr.String(), "stepping down") {
		t.Fatalf("%s stepped down (%s active now):\n%s", active.name, now.name, tail(active.n.stderr.String(), 40))
	}
	t.Logf("%s stayed active through the bucket's election; the coordinators' warnings:\n%s", active.name, c.warnings())
	c.finish(l)
}

// TestPausedLeaderFenced: the active coordinator is paused (SIGSTOP) for
// more than three leases while the agents submit; another takes over.
// Resumed, the paused one finds itself deposed: it steps down, answers as a
// standby, and whatever it took in during the pause is answered by no
// decision the log lacks.
func TestPausedLeaderFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 NATS nodes and 3 coordinators as processes")
	}
	c := startFailoverCluster(t, 3)
	l := c.startLoad()
	l.awaitOps(50, 30*time.Second)
	paused := c.activeCoord(15 * time.Second)
	var others []string
	for _, u := range c.urls {
		if u != paused.conn {
			others = append(others, u)
		}
	}
	stepDowns := strings.Count(paused.n.stderr.String(), "stepped down")
	if err := paused.n.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	var next string
	natstest.CheckFor(t, 30*time.Second, "another coordinator active", func() error {
		st, err := c.status(strings.Join(others, ","))
		if err != nil {
			return err
		}
		if len(st.Active) != 1 || st.Active[0] == paused.name {
			return fmt.Errorf("active %v", st.Active)
		}
		next = st.Active[0]
		return nil
	})
	t.Logf("%s paused; %s active after %s", paused.name, next, time.Since(stoppedAt).Round(time.Millisecond))
	// The agents go on through the new one, for more than three leases
	// of the paused one's.
	for time.Since(stoppedAt) < 3*leaseTTL+time.Second {
		l.awaitOps(1, 30*time.Second)
	}
	if err := paused.n.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	natstest.CheckFor(t, 30*time.Second, paused.name+" stepped down", func() error {
		if s := paused.n.stderr.String(); strings.Count(s, "stepped down") == stepDowns {
			return fmt.Errorf("stderr:\n%s", tail(s, 10))
		}
		return nil
	})
	natstest.CheckFor(t, 30*time.Second, paused.name+" a standby", func() error {
		st, err := c.status(strings.Join(c.urls, ","))
		if err != nil {
			return err
		}
		for _, m := range st.Members {
			if m.Node == paused.name && m.Role == intents.RoleStandby && m.Leader != paused.name {
				return nil
			}
		}
		return fmt.Errorf("members %+v", st.Members)
	})
	t.Logf("%s a standby %s after it resumed", paused.name, time.Since(resumed).Round(time.Millisecond))
	l.awaitOps(50, 30*time.Second)
	c.finish(l)
}

// TestLateJoiner: the coordinators store a snapshot of the replicated
// log every 500 events (serve --snapshot-every) and trim COAGENT_LOG
// below it while 16 agents load them; then `coagent snapshot` asks the
// active one for another, and a fourth coordinator with an empty data
// directory joins: with the log's first messages gone it cannot fold it
// from the start, so it loads the snapshot and follows the tail, catches
// up with the active one, and its log, stopped, is the others' (its own
// starting at the snapshot's event, the decisions before it in its
// idempotency records).
func TestLateJoiner(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 NATS nodes and 4 coordinators as processes")
	}
	c := startFailoverCluster(t, 3, "--snapshot-every", "500")
	l := c.startLoad()
	l.awaitOps(1000, 60*time.Second)
	l.finish()
	urls := strings.Join(c.urls, ",")
	// A snapshot every 500 events: 1000 decisions are a few thousand
	// events, so the active coordinator has stored one by itself and
	// trimmed the log below it.
	natstest.CheckFor(t, 30*time.Second, "a snapshot stored by itself and COAGENT_LOG trimmed", func() error {
		st, err := c.status(urls)
		if err != nil {
			return err
		}
		if len(st.Active) != 1 || st.Log == nil {
			return fmt.Errorf("active %v, log %+v", st.Active, st.Log)
		}
		for _, m := range st.Members {
			if m.Node == st.Active[0] && m.Snapshot != nil && m.Snapshot.Seq >= 500 && st.Log.FirstSeq > 1 && m.LogFirst == st.Log.FirstSeq {
				return nil
			}
		}
		return fmt.Errorf("members %+v, log from %d", st.Members, st.Log.FirstSeq)
	})
	active := c.activeCoord(10 * time.Second)
	p := runBin(t, nil, "", "snapshot", "--nats", urls)
	got := snapshotLine.FindStringSubmatch(p.stdout)
	if p.status != 0 || got == nil || got[3] != active.name {
		t.Fatalf("coagent snapshot: %+v; want a line of %s's", p, active.name)
	}
	snapSeq, _ := strconv.ParseUint(got[1], 10, 64)
	first, _ := strconv.ParseUint(got[4], 10, 64)
	st, err := c.status(urls)
	if err != nil {
		t.Fatal(err)
	}
	if first <= 1 || st.Log == nil || st.Log.FirstSeq != first {
		t.Fatalf("coagent snapshot said %q; the log is %+v", p.stdout, st.Log)
	}
	t.Logf("%s", strings.TrimSpace(p.stdout))

	late := c.launchCoord("c4", filepath.Join(c.dir, "c4"))
	c.coords = append(c.coords, late)
	late.await(t)
	joined := time.Now()
	seq := c.level(30 * time.Second)
	t.Logf("c4 level with the others at event %d %s after it started", seq, time.Since(joined).Round(time.Millisecond))
	if st, err = c.status(urls); err != nil {
		t.Fatal(err)
	}
	var c4 *intents.MemberStatus
	for i := range st.Members {
		if st.Members[i].Node == "c4" {
			c4 = &st.Members[i]
		}
	}
	if c4 == nil || c4.Snapshot == nil || c4.Snapshot.Seq != snapSeq {
		t.Fatalf("c4's status %+v names no snapshot at event %d it loaded", c4, snapSeq)
	}
	views := c.finish(l)
	if !strings.Contains(late.n.stderr.String(), "loaded the snapshot of the replicated log") ||
		!strings.Contains(late.n.stderr.String(), "following the replicated log") {
		t.Errorf("c4 never said it loaded the snapshot and followed the log; stderr:\n%s", tail(late.n.stderr.String(), 20))
	}
	if !slices.ContainsFunc(views, func(v logView) bool { return v.name == "c4" }) {
		t.Errorf("c4's log was not compared")
	}
	for _, v := range views {
		switch {
		case v.name == "c4" && (v.first != snapSeq || v.recorded == 0):
			t.Errorf("c4's log starts at event %d, %d final decisions from its records; want the snapshot's event %d and the decisions before it", v.first, v.recorded, snapSeq)
		case v.name != "c4" && v.first != 1:
			t.Errorf("coordinator %s's log starts at event %d: it folded the whole stream", v.name, v.first)
		}
	}
}
