package robustness

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/cluster"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/bugs"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "the seed of the run to replay (0: a fresh one, printed)")
	runsFlag  = flag.Int("runs", 2, "how many runs of the single-node kill, each with its own seed")
	forFlag   = flag.Duration("for", 6*time.Second, "how long each run's traffic lasts")
	faultFlag = flag.String("fault", "", "the fault of every run: kill, power-cut, restart-nats, clock-jump, pause, disk-error, disk-full or disk-flaky; for the cluster run, a comma-separated choice of kill-active, pause-active, kill-standby, restart-node, replace-node and jump-active (default: chosen by each run's seed among all)")
	bugsFlag  = flag.String("bugs", "", "deliberate bugs to plant in the coordinator (internal/bugs names, comma-separated), to see the checks catch them")
	outFlag   = flag.String("report", "", "directory for the history and porcupine's visualization of a failing run (default: a temporary one, printed)")
)

// The child is this test binary run again as the coordinator process, so
// that a fault can SIGKILL it: it connects to the parent's NATS server and
// serves from the data directory, and says "ready" on stdout once it
// serves.
const (
	envChildNATS = "COAGENT_ROBUSTNESS_NATS"
	envChildDir  = "COAGENT_ROBUSTNESS_DIR"
	envChildBugs = "COAGENT_ROBUSTNESS_BUGS" // internal/bugs names, planted in the child
	// envChildLossy, set, has the child note what its WAL's fsyncs made
	// durable and cut the WAL there when it starts (lossyFS): its SIGKILL
	// is then a power cut.
	envChildLossy = "COAGENT_ROBUSTNESS_LOSSY"
	// envChildDiskErr, set to an errno's name (EIO, ENOSPC), has the
	// child's disk fail every write and sync with it from its SIGUSR2 on
	// (failingFS); EIO/4 fails one in four of them with EIO.
	envChildDiskErr = "COAGENT_ROBUSTNESS_DISKERR"
	// envChildNode, set, makes the child a member of a cluster of that
	// name (cluster.Start), on the NATS URLs given.
	envChildNode = "COAGENT_ROBUSTNESS_NODE"
	// envChildShard, set, makes the child the coordinator of that shard
	// (docs/sharding.md).
	envChildShard = "COAGENT_ROBUSTNESS_SHARD"
)

// The faults a run's seed chooses among.
const (
	faultKill        = "kill"         // SIGKILL the coordinator and start it again
	faultPowerCut    = "power-cut"    // the same, losing what its WAL had not fsynced
	faultRestartNATS = "restart-nats" // stop the NATS server the coordinator uses and start it again
	faultClockJump   = "clock-jump"   // the coordinator's clock jumps forward by clockJump
	faultPause       = "pause"        // SIGSTOP the coordinator past every lease and wait of the traffic, then SIGCONT
	faultDiskError   = "disk-error"   // the coordinator's disk fails every write and sync (EIO), then it is killed and started again on a sound one
	faultDiskFull    = "disk-full"    // the same with ENOSPC: the disk is full, and then has room again
	faultDiskFlaky   = "disk-flaky"   // the disk fails one write, sync or file creation in four (EIO), the others succeed; then the same
)

// clockJump is how far the clock jumps at each clock-jump: past every
// lease and wait of the traffic (3 s and 1 s).
const clockJump = 5 * time.Second

func TestCoordinatorChild(t *testing.T) {
	url, dir := os.Getenv(envChildNATS), os.Getenv(envChildDir)
	if url == "" || dir == "" {
		t.Skip("run by the robustness tests")
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		fmt.Println("error connect:", err)
		os.Exit(3)
	}
	planted, err := bugs.Parse(os.Getenv(envChildBugs))
	if err != nil {
		fmt.Println("error bugs:", err)
		os.Exit(3)
	}
	opts := coordinator.Options{AckWait: time.Second, Bugs: &planted}
	if sh := os.Getenv(envChildShard); sh != "" {
		opts.Prefix, opts.Shard = intents.Subjects{}.Shard(sh).Prefix, sh
	}
	// SIGUSR1 makes the clock jump forward (the fault clock-jump).
	var ahead atomic.Int64
	jump := make(chan os.Signal, 1)
	signal.Notify(jump, syscall.SIGUSR1)
	go func() {
		for range jump {
			ahead.Add(int64(clockJump))
		}
	}()
	opts.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	if os.Getenv(envChildLossy) != "" {
		// What the last process had not fsynced is gone, as after a
		// power cut.
		if err := cutToSynced(dir); err != nil {
			fmt.Println("error cut the logs:", err)
			os.Exit(3)
		}
		opts.Core.Log.Pebble = &pebble.Options{FS: lossyFS{FS: vfs.Default}}
	}
	if name := os.Getenv(envChildDiskErr); name != "" {
		errno, oneIn := syscall.EIO, 0
		switch name {
		case "ENOSPC":
			errno = syscall.ENOSPC
		case "EIO/4":
			oneIn = 4
		}
		var failed atomic.Bool
		die := make(chan os.Signal, 1)
		signal.Notify(die, syscall.SIGUSR2)
		go func() {
			<-die
			failed.Store(true)
		}()
		opts.Core.Log.Pebble = &pebble.Options{FS: failingFS{FS: vfs.Default, failed: &failed, oneIn: oneIn,
			err: &fs.PathError{Op: "write", Path: "(the disk)", Err: errno}}}
	}
	stop := func(ctx context.Context) error { return nil }
	if node := os.Getenv(envChildNode); node != "" {
		// A lease of a second: a member paused for a few seconds is
		// deposed, and comes back to find it.
		opts.Replicas = 3
		m, err := cluster.Start(context.Background(), nc, dir,
			cluster.Options{Options: opts, Node: node, LeaseTTL: time.Second})
		if err != nil {
			fmt.Println("error start:", err)
			os.Exit(3)
		}
		stop = m.Stop
	} else {
		svc, err := coordinator.Start(context.Background(), nc, dir, opts)
		if err != nil {
			fmt.Println("error start:", err)
			os.Exit(3)
		}
		stop = svc.Shutdown
	}
	fmt.Println("ready")
	<-term
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = stop(ctx)
	os.Exit(0)
}

// natsServer is a single-node run's NATS server, which the fault
// restart-nats stops and starts again on its port and its JetStream
// directory: its clients, the coordinator's among them, reconnect.
type natsServer struct {
	t    *testing.T
	opts *server.Options
	ns   *server.Server
}

func runNATS(t *testing.T) *natsServer {
	s := &natsServer{t: t}
	s.ns = natstest.Run(t, func(o *server.Options) { s.opts = o })
	s.opts.Port = s.ns.Addr().(*net.TCPAddr).Port
	return s
}

func (s *natsServer) url() string { return s.ns.ClientURL() }

// restart shuts the server down and starts it again after down.
func (s *natsServer) restart(down time.Duration) {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	time.Sleep(down)
	ns, err := server.NewServer(s.opts.Clone())
	if err != nil {
		s.t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		s.t.Fatal("the NATS server did not start again")
	}
	s.t.Cleanup(ns.Shutdown)
	s.ns = ns
}

// child is one coordinator process.
type child struct {
	cmd   *exec.Cmd
	ready chan struct{}
	done  chan struct{}
}

// startChild starts a coordinator process on the NATS url(s) and dir, a
// member of a cluster if node is not "".
func startChild(t *testing.T, url, dir, node string, planted bugs.Set, fault string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCoordinatorChild$", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), envChildNATS+"="+url, envChildDir+"="+dir, envChildBugs+"="+planted.String(),
		envChildNode+"="+node)
	cmd.Env = append(cmd.Env, env...)
	switch fault {
	case faultPowerCut:
		cmd.Env = append(cmd.Env, envChildLossy+"=1")
	case faultDiskError:
		cmd.Env = append(cmd.Env, envChildDiskErr+"=EIO")
	case faultDiskFull:
		cmd.Env = append(cmd.Env, envChildDiskErr+"=ENOSPC")
	case faultDiskFlaky:
		cmd.Env = append(cmd.Env, envChildDiskErr+"=EIO/4")
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(c.ready)
			} else if strings.HasPrefix(sc.Text(), "error") {
				t.Errorf("coordinator child: %s", sc.Text())
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	select {
	case <-c.ready:
	case <-c.done:
		t.Fatal("the coordinator child ended before it served")
	case <-time.After(60 * time.Second):
		t.Fatal("the coordinator child did not serve within 60s")
	}
	return c
}

func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// failDisk makes the child's disk fail every write and sync from now on.
func (c *child) failDisk() {
	_ = c.cmd.Process.Signal(syscall.SIGUSR2)
}

// jump makes the child's clock jump forward by clockJump.
func (c *child) jump() {
	_ = c.cmd.Process.Signal(syscall.SIGUSR1)
}

// pause stops the child for d (SIGSTOP), then lets it go on (SIGCONT).
func (c *child) pause(d time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(d)
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
}

// pauseFor is how long the fault pause stops the coordinator: past every
// lease (3 s) and wait (1 s) of the traffic, and short of the intents
// consumer's AckWait (5 s), so that what it had fetched is not delivered
// again meanwhile (kill covers that).
const pauseFor = 3500 * time.Millisecond

// stop ends the child with SIGTERM: it shuts down cleanly.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.kill()
	}
}

// history records operations on one monotonic clock.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

// mix says how the claims, transactions and waits of the history went;
// reclaimed is how many reclaimed notices the agents got.
func (h *history) mix(reclaimed int) string {
	var claims, won, lost, releases, released, renews, renewed, refused, txns, committed, waits, waited int
	for _, op := range h.ops {
		in, out := op.Input.(Input), op.Output.(Output)
		switch {
		case in.Kind == Claim:
			claims++
			if out.Applied {
				won++
			} else if out.Failed || out.Fenced {
				lost++
			}
		case in.Kind == Release || in.Kind == Renew:
			n, ok := &releases, &released
			if in.Kind == Renew {
				n, ok = &renews, &renewed
			}
			*n++
			if out.Applied {
				*ok++
			} else if out.Fenced {
				refused++
			}
		case in.Kind == TxnSet:
			txns++
			if out.Applied {
				committed++
			}
		case in.Wait:
			waits++
			if out.Applied {
				waited++
			}
		}
	}
	return fmt.Sprintf("%d claims (%d won, %d found the task taken), %d releases (%d applied), %d renewals (%d renewed), %d of those two fenced, %d reclaims told, "+
		"%d transactions (%d committed), %d incrs that may wait (%d applied)",
		claims, won, lost, releases, released, renews, renewed, refused, reclaimed, txns, committed, waits, waited)
}

func (h *history) add(client int, in Input, call int64, out Output, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// agent drives operations on the paths, one at a time, until ctx ends.
type agent struct {
	id    int
	name  string
	nc    *nats.Conn
	subj  intents.Subjects
	rng   *rand.Rand
	paths []string
	tasks []string // the owner paths of the tasks claimed and released
	h     *history
	// unknown are the intents whose outcome no reply told, by index in
	// h.ops, to be asked of decision.get once the fault healed.
	unknown map[int]string
	// resends says the agent sends an intent that got no decision again,
	// with the same id, until one comes.
	resends bool
	resent  int // writes sent again
	// pair are the two paths transactions write together; cross says
	// they are two shards' (a sharded run), which a transaction cannot
	// span and one state.get does not read: the agent writes them
	// together by one cross-shard apply, and reads them one by one.
	pair  [2]string
	cross bool
	// decisions is where the decisions published on the agent's subject
	// arrive: those of the intents it publishes on the intents stream
	// (viaStream) instead of submitting them by request/reply, and the
	// final decisions of its submits answered queued.
	decisions chan *nats.Msg
	viaStream bool
	// held are the agent's claims, by task owner path; stale the fences of
	// its claims that ended, which it sends now and then as a worker that
	// lost its claim unawares would; notices its notices, where a
	// reclaimed one ends a claim. lease is the task rule's.
	held      map[string]*hold
	stale     map[string][]uint64
	notices   chan *nats.Msg
	lease     time.Duration
	reclaimed int // reclaimed notices of its claims
}

// hold is a claim an agent holds: its lease, its fence, and when it was
// last claimed or renewed (asked for: the lease runs from a moment after).
type hold struct {
	lease string
	fence uint64
	at    time.Time
}

const requestTimeout = 2 * time.Second

func (a *agent) run(ctx context.Context) {
	for ctx.Err() == nil {
		a.renewDue()
		path := a.paths[a.rng.IntN(len(a.paths))]
		switch r := a.rng.IntN(20); {
		case r < 7:
			a.read(path)
		case r < 12:
			// A compare-and-set at the version last read, or a guess.
			out, ok := a.read(path)
			v := out.Version
			if !ok {
				v = uint64(a.rng.IntN(4))
			}
			a.write(Input{Kind: CAS, Path: path, Version: v, Value: a.rng.Int64N(1 << 40), Intent: ulid.Make().String()})
		case r < 15:
			a.write(Input{Kind: Incr, Path: path, Intent: ulid.Make().String()})
		case r < 17:
			a.txn()
		case r < 18 && a.cross:
			a.read(a.pair[a.rng.IntN(2)])
		case r < 18:
			a.readBoth()
		case r < 19:
			// An incr of one path of the pair that waits for a
			// transaction in flight there to end.
			slot := a.rng.IntN(2)
			a.write(Input{Kind: Incr, Path: a.pair[slot], Slot: slot, Wait: true, Intent: ulid.Make().String()})
		default:
			a.task()
		}
	}
}

// task claims, releases or lets go of a task: released by its holder,
// under its fence, after a while; claimed by anyone else, first wins. An agent whose
// claim's outcome it never learnt reads before it acts, and leaves a task
// it finds itself the owner of to its lease, not knowing the fence. One
// time in three an agent that held the task before sends a release under
// an old fence, as a worker that lost its claim unawares would: it must be
// refused.
func (a *agent) task() {
	task := a.tasks[a.rng.IntN(len(a.tasks))]
	me := int64(a.id + 1)
	if h := a.held[task]; h != nil {
		// The holder works on the task a while, renewing its claim,
		// and releases it one time in six.
		if a.rng.IntN(6) == 0 {
			a.release(task, h.fence)
		}
		return
	}
	if old := a.stale[task]; len(old) > 0 && a.rng.IntN(3) == 0 {
		a.release(task, old[a.rng.IntN(len(old))])
		return
	}
	if out, ok := a.read(task); ok && out.Value == me {
		return
	}
	out, known := a.write(Input{Kind: Claim, Path: task, Value: me, Intent: ulid.Make().String()})
	if known && out.Applied {
		a.held[task] = &hold{lease: out.Lease, fence: out.Fence, at: time.Now()}
	}
}

// release releases task under fence; the agent forgets its claim whatever
// the answer: refused, the claim ended; unknown, it ends with the lease.
func (a *agent) release(task string, fence uint64) {
	a.write(Input{Kind: Release, Path: task, Value: int64(a.id + 1), Fence: fence, Intent: ulid.Make().String()})
	a.forget(task)
}

// forget ends the agent's claim of task, keeping its fence as stale.
func (a *agent) forget(task string) {
	if h := a.held[task]; h != nil {
		delete(a.held, task)
		a.stale[task] = append(a.stale[task], h.fence)
	}
}

// renewDue forgets the claims a reclaimed notice ended and renews those
// not renewed for a quarter of the lease: a live agent renews well inside
// it, so a claim is reclaimed only when a fault held up the agent or the
// coordinator.
func (a *agent) renewDue() {
	for drained := false; !drained; {
		select {
		case m := <-a.notices:
			var ev intents.Event
			if json.Unmarshal(m.Data, &ev) != nil || ev.Notice == nil || ev.Notice.Kind != intents.NoticeReclaimed {
				continue
			}
			for task, h := range a.held {
				if h.lease == ev.Notice.Txn {
					a.reclaimed++
					a.forget(task)
				}
			}
		default:
			drained = true
		}
	}
	for _, task := range a.tasks {
		h := a.held[task]
		if h == nil || time.Since(h.at) < a.lease/4 {
			continue
		}
		at := time.Now()
		out, known := a.write(Input{Kind: Renew, Path: task, Value: int64(a.id + 1), Fence: h.fence, Intent: ulid.Make().String()})
		switch {
		case known && out.Applied:
			h.at = at
		case known && out.Fenced:
			a.forget(task)
		}
	}
}

// read records a state.get of path; ok is false when no answer came.
func (a *agent) read(path string) (Output, bool) {
	in := Input{Kind: Read, Path: path, Task: slices.Contains(a.tasks, path)}
	if path == a.pair[1] {
		in.Slot = 1
	}
	return a.get(in)
}

// readBoth records one state.get of the pair's two paths.
func (a *agent) readBoth() {
	a.get(Input{Kind: ReadBoth, Path: a.pair[0], Path2: a.pair[1]})
}

// get records the state.get of in (Read or ReadBoth); ok is false when no
// answer came.
func (a *agent) get(in Input) (Output, bool) {
	paths := []string{in.Path}
	if in.Path2 != "" {
		paths = append(paths, in.Path2)
	}
	req, err := json.Marshal(map[string][]string{"paths": paths})
	if err != nil {
		panic(err)
	}
	call := a.h.now()
	m, err := a.nc.Request(a.subj.API(intents.APIStateGet), req, requestTimeout)
	ret := a.h.now()
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			time.Sleep(10 * time.Millisecond)
		}
		return Output{}, false // a read that told nothing constrains nothing
	}
	var r struct {
		Rev    uint64 `json:"rev"`
		Values map[string]struct {
			Exists  bool            `json:"exists"`
			Value   json.RawMessage `json:"value"`
			Version uint64          `json:"version"`
		} `json:"values"`
	}
	if apiError(m) != "" {
		return Output{}, false
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return Output{}, false
	}
	value := func(path string) (int64, uint64) {
		v := r.Values[path]
		var n int64
		var owner string
		if v.Exists && json.Unmarshal(v.Value, &owner) == nil {
			// A task's owner, the agent rbN: its number is N+1.
			id, err := strconv.Atoi(strings.TrimPrefix(owner, "rb"))
			if err != nil {
				panic(fmt.Sprintf("state.get %s: owner %q is no agent of the traffic", path, owner))
			}
			return int64(id + 1), v.Version
		}
		if v.Exists {
			if err := json.Unmarshal(v.Value, &n); err != nil {
				panic(fmt.Sprintf("state.get %s: value %s is not an integer", path, v.Value))
			}
		}
		return n, v.Version
	}
	out := Output{Rev: r.Rev}
	out.Value, out.Version = value(in.Path)
	if in.Path2 != "" {
		out.Value2, out.Version2 = value(in.Path2)
	}
	a.h.add(a.id, in, call, out, ret)
	return out, true
}

// txn records a transaction over the pair: it reads both, proposes to
// write both with its reads at the versions it saw (waiting for a
// transaction in flight there), and, granted, commits each value read
// plus one. It goes by request/reply, whatever the agent's path for
// single writes.
func (a *agent) txn() {
	if a.cross {
		a.crossTxn()
		return
	}
	read, ok := a.get(Input{Kind: ReadBoth, Path: a.pair[0], Path2: a.pair[1]})
	if !ok {
		return
	}
	va, vb := read.Version, read.Version2
	propose := &intents.Intent{ID: ulid.Make().String(), Agent: a.name, Kind: intents.KindPropose, LeaseMS: 3000,
		OnConflict: intents.OnConflictWait, WaitMS: 1000,
		Reads:  []intents.Read{{Path: a.pair[0], Version: &va}, {Path: a.pair[1], Version: &vb}},
		Writes: []intents.Write{{Path: a.pair[0], Op: intents.OpSet}, {Path: a.pair[1], Op: intents.OpSet}}}
	in := Input{Kind: TxnSet, Path: a.pair[0], Path2: a.pair[1], Version: va, Version2: vb,
		Value: read.Value + 1, Value2: read.Value2 + 1, Intent: propose.ID}
	call := a.h.now()
	m, ok := a.submit(propose)
	if !ok {
		// Not granted as far as anyone was told: no commit goes, so
		// the pair did not change (a grant nobody learnt of ends with
		// its lease).
		return
	}
	var d intents.Decision
	if err := json.Unmarshal(m.Data, &d); err != nil {
		panic(err)
	}
	if d.Outcome != intents.OutcomeGranted {
		out, _ := decisionOutput(m, in) // refused: nothing changed
		a.record(in, call, out, true)
		return
	}
	commit := &intents.Intent{ID: ulid.Make().String(), Agent: a.name, Kind: intents.KindCommit, Txn: d.Txn, Fence: d.Fence,
		Writes: []intents.Write{
			{Path: a.pair[0], Op: intents.OpSet, Value: json.RawMessage(strconv.FormatInt(in.Value, 10))},
			{Path: a.pair[1], Op: intents.OpSet, Value: json.RawMessage(strconv.FormatInt(in.Value2, 10))}}}
	in.Intent = commit.ID
	out, known := Output{Unknown: true}, false
	if m, ok := a.submit(commit); ok {
		out, known = decisionOutput(m, in)
	}
	a.record(in, call, out, known)
}

// crossTxn records the pair's transaction when its paths are two shards':
// it reads each, then applies each value read plus one in one apply whose
// reads are at the versions it saw. The shards commit it by two-phase
// commit; the model holds it to what it holds a transaction to.
func (a *agent) crossTxn() {
	ra, ok := a.read(a.pair[0])
	if !ok {
		return
	}
	rb, ok := a.read(a.pair[1])
	if !ok {
		return
	}
	va, vb := ra.Version, rb.Version
	in := Input{Kind: TxnSet, Path: a.pair[0], Path2: a.pair[1], Version: va, Version2: vb,
		Value: ra.Value + 1, Value2: rb.Value + 1, Intent: ulid.Make().String()}
	apply := &intents.Intent{ID: in.Intent, Agent: a.name, Kind: intents.KindApply,
		Reads: []intents.Read{{Path: a.pair[0], Version: &va}, {Path: a.pair[1], Version: &vb}},
		Writes: []intents.Write{
			{Path: a.pair[0], Op: intents.OpSet, Value: json.RawMessage(strconv.FormatInt(in.Value, 10))},
			{Path: a.pair[1], Op: intents.OpSet, Value: json.RawMessage(strconv.FormatInt(in.Value2, 10))}}}
	call := a.h.now()
	out, known := Output{Unknown: true}, false
	if m, ok := a.submit(apply); ok {
		out, known = decisionOutput(m, in)
	}
	a.record(in, call, out, known)
}

// submit sends it by request/reply, again with its id while no decision
// comes (a few times), and returns its final decision: the reply, or, for
// one answered queued, the final one on the agent's decisions subject.
func (a *agent) submit(it *intents.Intent) (*nats.Msg, bool) {
	data, err := json.Marshal(it)
	if err != nil {
		panic(err)
	}
	for try := 0; try < 5; try++ {
		if try > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		m, err := a.nc.Request(a.subj.Submit(a.name), data, requestTimeout)
		if err != nil || apiError(m) != "" {
			continue
		}
		if queued(m) {
			return a.await(it.ID, 3*requestTimeout)
		}
		return m, true
	}
	return nil, false
}

// queued reports whether m is a decision that says its intent was parked.
func queued(m *nats.Msg) bool {
	var d intents.Decision
	return json.Unmarshal(m.Data, &d) == nil && d.Outcome == intents.OutcomeQueued
}

// await returns the final decision of intent from the agent's decisions
// subject, if it comes within wait.
func (a *agent) await(intent string, wait time.Duration) (*nats.Msg, bool) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case m := <-a.decisions:
			if m.Header.Get(intents.HeaderIntent) == intent && !queued(m) {
				return m, true
			}
		case <-timer.C:
			return nil, false
		}
	}
}

// write records an intent of in and returns what it was told; one whose
// reply told no final decision is unknown (known false), to be resolved
// later.
func (a *agent) write(in Input) (out Output, known bool) {
	w := intents.Write{Path: in.Path, Op: intents.OpIncr}
	it := &intents.Intent{ID: in.Intent, Agent: a.name, Kind: intents.KindApply}
	switch in.Kind {
	case CAS:
		v := in.Version
		w = intents.Write{Path: in.Path, Op: intents.OpSet, Value: json.RawMessage(strconv.FormatInt(in.Value, 10))}
		it.Reads = []intents.Read{{Path: in.Path, Version: &v}}
	case Claim:
		w = intents.Write{Path: in.Path, Op: intents.OpSet, Value: json.RawMessage(strconv.Quote(a.name))}
		it.Pre = []string{fmt.Sprintf("state.%s == nil", in.Path)}
	case Release:
		w = intents.Write{Path: in.Path, Op: intents.OpDelete}
		it.Fence = in.Fence
	case Renew:
		it.Kind, it.Fence = intents.KindRenew, in.Fence
		it.Txn = a.held[in.Path].lease
	}
	if in.Kind != Renew {
		it.Writes = []intents.Write{w}
	}
	if in.Wait {
		it.OnConflict, it.WaitMS = intents.OnConflictWait, 1000
	}
	data, err := json.Marshal(it)
	if err != nil {
		panic(err)
	}
	if a.viaStream {
		return a.publish(in, data)
	}
	call := a.h.now()
	m, err := a.nc.Request(a.subj.Submit(a.name), data, requestTimeout)
	if errors.Is(err, nats.ErrNoResponders) {
		// No coordinator took the request: nothing happened. The
		// coordinator is down; wait a moment rather than spin.
		time.Sleep(10 * time.Millisecond)
		return Output{}, false
	}
	out, known = Output{Unknown: true}, false
	if err == nil {
		out, known = decisionOutput(m, in)
		if queued(m) {
			if m, ok := a.await(in.Intent, 3*requestTimeout); ok {
				out, known = decisionOutput(m, in)
			}
		}
	}
	// Half the agents send an intent that got no decision again, with the
	// same id, as the SDK does (the idempotency key makes that safe); the
	// others leave it to decision.get after the run.
	for try := 0; !known && a.resends && try < 30; try++ {
		if try == 0 {
			a.resent++
		}
		time.Sleep(100 * time.Millisecond)
		if m, err = a.nc.Request(a.subj.Submit(a.name), data, requestTimeout); err == nil {
			out, known = decisionOutput(m, in)
		}
	}
	// One write in ten is sent twice, as a client does whose reply was
	// lost: the second answer must be the recorded decision, and it is the
	// one the history keeps, so a write applied twice shows as a version
	// skipped.
	if known && a.rng.IntN(10) == 0 {
		if m, err := a.nc.Request(a.subj.Submit(a.name), data, requestTimeout); err == nil {
			if again, ok := decisionOutput(m, in); ok {
				out = again
			}
		}
	}
	a.record(in, call, out, known)
	return out, known
}

// publish records an intent published on the intents stream with its id
// as the message id (the stream keeps one copy however often it is sent),
// its outcome the decision that comes on the agent's decisions subject.
// One not published for certain, or whose decision did not come within
// the wait, is unknown: the stream may still hold it, decided later.
func (a *agent) publish(in Input, data []byte) (Output, bool) {
	m := nats.NewMsg(a.subj.Intents(a.name))
	m.Data = data
	m.Header.Set(nats.MsgIdHdr, in.Intent)
	call := a.h.now()
	out, known := Output{Unknown: true}, false
	// JetStream answers the publish once the intent is stored.
	if _, err := a.nc.RequestMsg(m, requestTimeout); err == nil {
		if d, ok := a.await(in.Intent, 3*requestTimeout); ok {
			out, known = decisionOutput(d, in)
		}
	}
	a.record(in, call, out, known)
	return out, known
}

// record adds a write invoked at call to the history, returning now; one
// whose outcome is not known returns at the end of time and is kept for
// decision.get.
func (a *agent) record(in Input, call int64, out Output, known bool) {
	ret := a.h.now()
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	if !known {
		a.unknown[len(a.h.ops)] = in.Intent
		ret = math.MaxInt64
	}
	a.h.ops = append(a.h.ops, porcupine.Operation{ClientId: a.id, Input: in, Call: call, Output: out, Return: ret})
}

// decisionOutput reads a decision (or an API error) as an operation's
// output; known is false for an error or an interim decision.
func decisionOutput(m *nats.Msg, in Input) (out Output, known bool) {
	var r intents.Decision
	if apiError(m) != "" {
		return Output{Unknown: true}, false
	}
	if err := json.Unmarshal(m.Data, &r); err != nil || !r.Outcome.Final() {
		return Output{Unknown: true}, false
	}
	switch r.Outcome {
	case intents.OutcomeApplied, intents.OutcomeCommitted:
		out := Output{Applied: true, Version: r.Versions[in.Path], Rev: r.Rev, Fence: r.Fence, Lease: r.Txn}
		if in.Path2 != "" {
			out.Version2 = r.Versions[in.Path2]
		}
		return out, true
	case intents.OutcomeRenewed:
		// A renewal changes no state: its decision stands at no
		// revision of its own, so checkRevs leaves it out.
		return Output{Applied: true, Fence: r.Fence, Lease: r.Txn}, true
	case intents.OutcomeRejected:
		return Output{Stale: r.Reason == intents.ReasonStaleRead, Failed: r.Reason == intents.ReasonPreconditionFailed,
			Fenced: r.Reason == intents.ReasonFenced || r.Reason == intents.ReasonLeaseExpired || r.Reason == intents.ReasonUnauthorized}, true
	}
	return Output{Unknown: true}, false
}

// awaitIntake waits until the coordinator has taken and acknowledged
// every intent of the stream, so that decision.get finds no decision only
// for an intent never to be decided.
func awaitIntake(t *testing.T, nc *nats.Conn, subj intents.Subjects) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 60*time.Second, "the intents stream drained", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		cons, err := js.Consumer(ctx, subj.Stream(intents.StreamIntents), "coordinator")
		if err != nil {
			return err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending > 0 || info.NumAckPending > 0 {
			return fmt.Errorf("%d intents pending, %d taken and not acknowledged", info.NumPending, info.NumAckPending)
		}
		return nil
	})
}

// apiError is the code of the API's error reply m, "" for an answer.
func apiError(m *nats.Msg) string {
	return m.Header.Get(micro.ErrorCodeHeader)
}

// resolve asks decision.get for each unknown intent and sets what it
// learns: the decision (its return, the moment it was learnt), or, when
// none exists, that the operation never took effect (dropped).
func resolve(t *testing.T, nc *nats.Conn, subj intents.Subjects, h *history, unknown map[int]string) (resolved, dropped int) {
	t.Helper()
	drop := map[int]bool{}
	for i, id := range unknown {
		in := h.ops[i].Input.(Input)
		var last []byte
		for try := 0; ; try++ {
			m, err := nc.Request(subj.API(intents.APIDecisionGet), []byte(`{"intent":"`+id+`"}`), requestTimeout)
			if err == nil {
				last = m.Data
				if apiError(m) == "not_found" {
					drop[i] = true
					break
				}
				if out, ok := decisionOutput(m, in); ok {
					h.ops[i].Output, h.ops[i].Return = out, h.now()
					resolved++
					break
				}
			}
			if try == 50 {
				t.Fatalf("decision.get %s: no answer after 50 tries: %v %s", id, err, last)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	ops := h.ops[:0]
	for i, op := range h.ops {
		if !drop[i] {
			ops = append(ops, op)
		}
	}
	h.ops = ops
	return resolved, len(drop)
}

// TestKillCoordinator is the single-node run: eight agents on ten paths
// over request/reply, the coordinator SIGKILLed at moments the seed
// chooses and restarted on its data directory, and the history checked.
func TestKillCoordinator(t *testing.T) {
	planted := runsPlanted(t)
	forSeeds(t, func(t *testing.T, seed uint64) {
		fault := *faultFlag
		if fault == "" {
			faults := []string{faultKill, faultPowerCut, faultRestartNATS, faultClockJump, faultDiskError, faultDiskFull, faultDiskFlaky, faultPause}
			fault = faults[seed%uint64(len(faults))]
		}
		t.Logf("seed %d, fault %s: go test ./tests/robustness -run 'TestKillCoordinator' -seed %d -fault %s -bugs '%s'", seed, fault, seed, fault, planted)
		if err := killRun(t, run{seed: seed, planted: planted, fault: fault, traffic: *forFlag,
			every: [2]time.Duration{500 * time.Millisecond, 2 * time.Second}, resends: true, report: true}); err != nil {
			t.Fatal(err)
		}
	})
}

// runsPlanted skips a run test under -short and returns the bugs -bugs
// plants.
func runsPlanted(t *testing.T) bugs.Set {
	t.Helper()
	if testing.Short() {
		t.Skip("the robustness runs take seconds each")
	}
	planted, err := bugs.Parse(*bugsFlag)
	if err != nil {
		t.Fatal(err)
	}
	return planted
}

// forSeeds runs body in a subtest named by its seed, once for each run
// the flags ask for: -runs runs with fresh seeds, or the one of -seed.
func forSeeds(t *testing.T, body func(t *testing.T, seed uint64)) {
	for i := range *runsFlag {
		seed := *seedFlag
		if seed == 0 {
			seed = rand.Uint64()
		} else if i > 0 {
			break
		}
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { body(t, seed) })
	}
}

// run is one run's setting.
type run struct {
	seed    uint64
	planted bugs.Set
	fault   string        // faultKill or faultPowerCut; a cluster run's faults are in faults
	faults  []string      // a cluster run's, the seed choosing among them (default all)
	traffic time.Duration // how long the agents work
	// every is the range of the pauses before each fault.
	every [2]time.Duration
	// resends has half the agents send a write that got no decision again
	// with its id. A write lost and sent again takes effect late, which
	// makes what a dirty read saw of it legal: the planted dirty reads
	// are caught without.
	resends bool
	report  bool // write a failing run's history and visualization
	// sharded: the traffic's board rb1 is shard s2's, the others the
	// default shard's; every agent goes by request/reply to the default
	// shard, which sends on what s2 decides.
	sharded bool
}

// killRun runs the traffic with the faults the seed chooses against a
// coordinator with the bugs planted, and returns what the checks found.
func killRun(t *testing.T, r run) error {
	seed, planted, fault := r.seed, r.planted, r.fault
	rng := rand.New(rand.NewPCG(seed, 0))
	ns := runNATS(t)
	url := ns.url()
	connect := func() *nats.Conn {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	dir := t.TempDir()
	coord := startChild(t, url, dir, "", planted, fault)
	t.Cleanup(func() { coord.kill() })
	ctx, cancel := context.WithTimeout(context.Background(), r.traffic)
	defer cancel()
	tr := startTraffic(ctx, t, r, connect)
	ws := startWatchers(t, connect)
	kills := 0
	for {
		pause := r.every[0] + time.Duration(rng.Int64N(int64(r.every[1]-r.every[0])))
		select {
		case <-ctx.Done():
		case <-time.After(pause):
			kills++
			down := time.Duration(rng.IntN(300)) * time.Millisecond
			switch fault {
			case faultRestartNATS:
				ns.restart(down)
				continue
			case faultClockJump:
				coord.jump()
				continue
			case faultPause:
				coord.pause(pauseFor)
				continue
			case faultDiskError, faultDiskFull, faultDiskFlaky:
				// The disk dies, or fills, under the coordinator, which
				// must answer nothing it did not make durable before; the
				// process is then killed and started on a sound disk.
				coord.failDisk()
				time.Sleep(300 * time.Millisecond)
			}
			coord.kill()
			time.Sleep(down)
			coord = startChild(t, url, dir, "", planted, fault)
			continue
		}
		break
	}
	tr.wg.Wait()
	nc := connect()
	st := tr.settle(t, nc)
	streamed := 0
	for _, op := range tr.h.ops {
		if op.ClientId < len(tr.agents) && tr.agents[op.ClientId].viaStream && !op.Input.(Input).Kind.read() {
			streamed++
		}
	}
	t.Logf("%d operations (%d writes by the intents stream; %s), %d faults (%s), %s",
		len(tr.h.ops), streamed, tr.h.mix(tr.reclaimed()), kills, fault, st)
	err := awaitWatchers(ws, nc, tr.subj, 30*time.Second)
	coord.stop()
	changes, lerr := logChanges(dir)
	if err = errors.Join(err, lerr); lerr == nil {
		err = errors.Join(err, checkWatchers(ws, changes, false))
	}
	return errors.Join(checkLog(t, "the coordinator", dir, tr.h.ops), checkRevs(tr.h.ops), checkFences(tr.h.ops), check(t, seed, tr.h.ops, r.report), err)
}

// traffic is a run's eight agents at work on its ten paths, over three
// boards, and the history they record.
type traffic struct {
	subj   intents.Subjects
	paths  []string
	tasks  []string
	pair   [2]string
	cross  bool // the pair is two shards'
	h      *history
	agents []*agent
	wg     sync.WaitGroup // the agents at work
}

// startTraffic sets the agents to work until ctx ends, each on a
// connection of its own from connect: six over request/reply (half of
// them sending a write that got no decision again, if r.resends), two by
// the intents stream.
func startTraffic(ctx context.Context, t *testing.T, r run, connect func() *nats.Conn) *traffic {
	t.Helper()
	tr := &traffic{paths: make([]string, 10), tasks: []string{"rb0.task.owner", "rb1.task.owner", "rb2.task.owner"}, pair: [2]string{"rb0.t.a", "rb0.t.b"},
		h: &history{start: time.Now()}, cross: r.sharded}
	if r.sharded {
		tr.pair[1] = shardBoard + ".t.b"
	}
	lease := setRules(t, connect())
	for i := range tr.paths {
		tr.paths[i] = fmt.Sprintf("rb%d.k%d", i%3, i)
	}
	for i := range 8 {
		a := &agent{id: i, name: "rb" + strconv.Itoa(i), nc: connect(), subj: tr.subj,
			rng: rand.New(rand.NewPCG(r.seed, uint64(i+1))), paths: tr.paths, tasks: tr.tasks, pair: tr.pair, cross: tr.cross, h: tr.h, unknown: map[int]string{}, resends: r.resends && i%2 == 1}
		// Two agents of eight go by the intents stream.
		a.viaStream = i >= 6 && !r.sharded
		a.decisions = make(chan *nats.Msg, 256)
		if _, err := a.nc.ChanSubscribe(tr.subj.Decisions(a.name), a.decisions); err != nil {
			t.Fatal(err)
		}
		a.held, a.stale, a.lease = map[string]*hold{}, map[string][]uint64{}, lease
		a.notices = make(chan *nats.Msg, 256)
		if _, err := a.nc.ChanSubscribe(tr.subj.Notices(a.name), a.notices); err != nil {
			t.Fatal(err)
		}
		if err := a.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		tr.agents = append(tr.agents, a)
		tr.wg.Go(func() { a.run(ctx) })
	}
	return tr
}

// reclaimed is how many reclaimed notices the agents got for the claims
// they held; call it once they stopped.
func (tr *traffic) reclaimed() int {
	n := 0
	for _, a := range tr.agents {
		n += a.reclaimed
	}
	return n
}

// rulesFile is put in force at the start of each run: it makes the
// traffic's tasks (rbN.task) records of a task rule whose lease (2 s) is
// shorter than most faults' outages, so that claims are reclaimed in the
// runs where a fault holds up the agents or the coordinator, and four
// times the agents' renewal period, so that they are not otherwise.
const rulesFile = "testdata/rules.json"

// setRules puts rulesFile in force through rules.set on nc, once a
// coordinator answers, and returns the lease of its task rule.
func setRules(t *testing.T, nc *nats.Conn) time.Duration {
	t.Helper()
	file, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Rules []struct {
			Lease string `json:"lease"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(file, &f); err != nil || len(f.Rules) == 0 {
		t.Fatalf("%s: %v, %d rules", rulesFile, err, len(f.Rules))
	}
	lease, err := time.ParseDuration(f.Rules[0].Lease)
	if err != nil {
		t.Fatalf("%s: rules[0] lease = %q: %v", rulesFile, f.Rules[0].Lease, err)
	}
	natstest.CheckFor(t, 30*time.Second, "rules.set", func() error {
		m, err := nc.Request(intents.Subjects{}.API(intents.APIRulesSet), file, requestTimeout)
		if err != nil {
			return err
		}
		if code := apiError(m); code != "" {
			return fmt.Errorf("rules.set: %s %s", code, m.Data)
		}
		return nil
	})
	return lease
}

// settled is what settle found.
type settled struct{ resent, unknown, resolved, dropped int }

func (s settled) String() string {
	return fmt.Sprintf("%d writes sent again with their id, %d unknown outcomes: %d resolved by decision.get, %d never decided",
		s.resent, s.unknown, s.resolved, s.dropped)
}

// settle, once the agents stopped and the faults healed, waits until every
// intent of the stream is taken, asks decision.get for each unknown
// outcome, and reads every path once more, through nc.
func (tr *traffic) settle(t *testing.T, nc *nats.Conn) settled {
	t.Helper()
	unknown := map[int]string{}
	var st settled
	for _, a := range tr.agents {
		for i, id := range a.unknown {
			unknown[i] = id
		}
		st.resent += a.resent
	}
	st.unknown = len(unknown)
	awaitIntake(t, nc, tr.subj)
	st.resolved, st.dropped = resolve(t, nc, tr.subj, tr.h, unknown)
	final := &agent{id: len(tr.agents), nc: nc, subj: tr.subj, pair: tr.pair, cross: tr.cross, tasks: tr.tasks, h: tr.h}
	for _, p := range slices.Concat(tr.paths, tr.tasks, tr.pair[:]) {
		natstest.CheckFor(t, 30*time.Second, "the final read of "+p, func() error {
			if _, ok := final.read(p); !ok {
				return errors.New("no answer")
			}
			return nil
		})
	}
	return st
}

// checkRevs checks that the log's order respects real time: an operation
// invoked after another returned stands at a revision no lower, and a
// write at a higher one (its change is newer than anything the other saw
// or made). Reads and applied writes with a known answer take part.
func checkRevs(ops []porcupine.Operation) error {
	var known []porcupine.Operation
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if out.Unknown || out.Rev == 0 || !in.Kind.read() && !out.Applied {
			continue
		}
		known = append(known, op)
	}
	byReturn := slices.Clone(known)
	slices.SortFunc(byReturn, func(a, b porcupine.Operation) int { return cmp.Compare(a.Return, b.Return) })
	slices.SortFunc(known, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	// Sweep the operations by invocation, keeping the highest revision
	// among those that had returned before it.
	var before porcupine.Operation
	highest, next := uint64(0), 0
	for _, b := range known {
		for next < len(byReturn) && byReturn[next].Return < b.Call {
			if rev := byReturn[next].Output.(Output).Rev; rev > highest {
				highest, before = rev, byReturn[next]
			}
			next++
		}
		rev, write := b.Output.(Output).Rev, !b.Input.(Input).Kind.read()
		if rev < highest || write && rev == highest {
			return fmt.Errorf("%s stands at revision %d, invoked after %s had returned at revision %d",
				Model.DescribeOperation(b.Input, b.Output), rev, Model.DescribeOperation(before.Input, before.Output), highest)
		}
	}
	return nil
}

// checkFences checks the fences the claims of the history were given,
// which come from one counter of the coordinator that only grows: no two
// claims share one, and a claim invoked after another returned has a
// higher one, whatever their tasks (the model sees one task at a time).
func checkFences(ops []porcupine.Operation) error {
	var claims []porcupine.Operation
	by := map[uint64]porcupine.Operation{}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind != Claim || !out.Applied {
			continue
		}
		if other, ok := by[out.Fence]; ok {
			return fmt.Errorf("%s and %s were given one fence", Model.DescribeOperation(other.Input, other.Output), Model.DescribeOperation(in, out))
		}
		by[out.Fence] = op
		claims = append(claims, op)
	}
	byReturn := slices.Clone(claims)
	slices.SortFunc(byReturn, func(a, b porcupine.Operation) int { return cmp.Compare(a.Return, b.Return) })
	slices.SortFunc(claims, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var before porcupine.Operation
	highest, next := uint64(0), 0
	for _, b := range claims {
		for next < len(byReturn) && byReturn[next].Return < b.Call {
			if f := byReturn[next].Output.(Output).Fence; f > highest {
				highest, before = f, byReturn[next]
			}
			next++
		}
		if f := b.Output.(Output).Fence; f <= highest {
			return fmt.Errorf("%s, invoked after %s had returned, has a fence no higher",
				Model.DescribeOperation(b.Input, b.Output), Model.DescribeOperation(before.Input, before.Output))
		}
	}
	return nil
}

// checkLog reads the log of the coordinator that served from dir, once it
// has stopped: nothing lost, nothing doubled. Every intent has at most one
// final decision that is not a duplicate's answer (or unauthorized, which
// is decided again each time it is sent), and every write the
// history knows the outcome of has exactly that decision in the log. It
// logs how many transactions and waits the log holds, under name.
func checkLog(t *testing.T, name, dir string, ops []porcupine.Operation) error {
	l, err := eventlog.Open(dir, &eventlog.Options{})
	if err != nil {
		return fmt.Errorf("open the log: %w", err)
	}
	defer l.Close()
	decided := map[string][]*intents.Decision{}
	grants, expired, waits, reclaims := 0, 0, 0, 0
	// A transaction changes the state only while it is in flight: a
	// change of one after its end (its lease expired, say) is a commit the
	// fence should have refused.
	ended := map[string]uint64{}
	var late []error
	err = l.Scan(l.FirstSeq(), l.LastSeq(), func(ev *intents.Event) error {
		if d := ev.Decision; d != nil && !d.Duplicate && d.Outcome.Final() {
			decided[d.Intent] = append(decided[d.Intent], d)
		}
		switch ev.Type {
		case intents.EventGrant:
			grants++
		case intents.EventExpire:
			expired++
		case intents.EventWait:
			waits++
		case intents.EventChange:
			if ev.Intent == "" {
				reclaims++ // the one change no intent makes
			}
		}
		switch {
		case ev.Release != nil && (ev.Type == intents.EventExpire || ev.Type == intents.EventRelease):
			ended[ev.Release.Txn] = ev.Seq
		case ev.Type == intents.EventChange && ev.Txn != "":
			if at, ok := ended[ev.Txn]; ok && len(late) < 5 {
				late = append(late, fmt.Errorf("txn %s changed the state at revision %d, after it ended at seq %d", ev.Txn, ev.Seq, at))
			}
		}
		return nil
	})
	t.Logf("the log of %s: %d transactions granted (%d expired), %d intents parked behind one, %d tasks reclaimed", name, grants, expired, waits, reclaims)
	if err != nil {
		return fmt.Errorf("read the log: %w", err)
	}
	errs := late
	doubled := 0
	for id, ds := range decided {
		// An unauthorized decision never takes its id, which may be
		// another agent's (engine.takes): the same intent sent again
		// is decided again. A release under a stale fence of a task
		// another agent holds is one.
		ds = slices.DeleteFunc(slices.Clone(ds), func(d *intents.Decision) bool { return d.Reason == intents.ReasonUnauthorized })
		if len(ds) > 1 {
			if doubled++; doubled <= 5 {
				errs = append(errs, fmt.Errorf("intent %s has %d final decisions in the log: %s and %s", id, len(ds), ds[0].Outcome, ds[1].Outcome))
			}
		}
	}
	if doubled > 5 {
		errs = append(errs, fmt.Errorf("and %d more intents with more than one final decision", doubled-5))
	}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind.read() || out.Unknown {
			continue
		}
		ds := decided[in.Intent]
		switch {
		case len(ds) == 0:
			errs = append(errs, fmt.Errorf("%s(%s) %s was told a decision the log does not hold", in.Kind, in.Path, in.Intent))
		case out.Applied && (ds[0].Outcome != intents.OutcomeApplied && ds[0].Outcome != intents.OutcomeCommitted && ds[0].Outcome != intents.OutcomeRenewed ||
			ds[0].Versions[in.Path] != out.Version || ds[0].Fence != out.Fence):
			errs = append(errs, fmt.Errorf("%s(%s) %s was told applied at version %d; the log holds %s at %d",
				in.Kind, in.Path, in.Intent, out.Version, ds[0].Outcome, ds[0].Versions[in.Path]))
		case !out.Applied && ds[0].Outcome != intents.OutcomeRejected:
			errs = append(errs, fmt.Errorf("%s(%s) %s was told rejected; the log holds %s", in.Kind, in.Path, in.Intent, ds[0].Outcome))
		}
		if len(errs) >= 10 {
			errs = append(errs, errors.New("and perhaps more"))
			break
		}
	}
	return errors.Join(errs...)
}

// check runs porcupine over ops and, if they are not linearizable, returns
// an error that says so and, with report, writes the history and its
// visualization where -report says.
func check(t *testing.T, seed uint64, ops []porcupine.Operation, report bool) error {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(Model, ops, time.Minute)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		t.Logf("porcupine gave up on %d operations within a minute: not checked", len(ops))
		return nil
	}
	// Name the paths whose histories fail, checked alone: porcupine's
	// answer is for the whole.
	var failed []string
	for _, part := range Model.Partition(ops) {
		if porcupine.CheckOperationsTimeout(Model, part, 10*time.Second) == porcupine.Illegal {
			failed = append(failed, part[0].Input.(Input).Path)
		}
	}
	if !report {
		return fmt.Errorf("seed %d: the history of %d operations is not linearizable (paths %v)", seed, len(ops), failed)
	}
	dir := *outFlag
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "coagent-robustness-"); err != nil {
			t.Fatal(err)
		}
	}
	base := filepath.Join(dir, "seed-"+strconv.FormatUint(seed, 10))
	if f, err := os.Create(base + ".html"); err == nil {
		_ = porcupine.Visualize(Model, info, f)
		f.Close()
	}
	if data, err := json.MarshalIndent(ops, "", " "); err == nil {
		_ = os.WriteFile(base+".json", data, 0o644)
	}
	return fmt.Errorf("seed %d: the history of %d operations is not linearizable (paths %v); history and visualization in %s.{json,html}",
		seed, len(ops), failed, base)
}

// TestChecksCatchBugs plants each deliberate bug of internal/bugs in turn
// and runs the power cut, every 0.2–0.8 s, until the checks catch it, eight
// runs at most: a check that passes a planted bug proves nothing. The
// power cut loses what was answered and never fsynced, where a plain kill
// keeps it in the page cache, so each bug shows at nearly every cut.
func TestChecksCatchBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("the robustness runs take seconds each")
	}
	for _, name := range bugs.Names() {
		if bugs.InCluster(name) {
			continue // TestClusterChecksCatchBugs
		}
		// A change the killed process made durable and did not publish
		// is more often there after a plain kill, which keeps what it
		// wrote to the WAL without syncing it: the feed's gap shows then.
		// A watcher asks for a new feed consumer when its server
		// restarts.
		fault := faultPowerCut
		switch name {
		case "feed-gap":
			fault = faultKill
		case "watch-resume-skip":
			fault = faultRestartNATS
		case "skip-fence", "claim-fence":
			// Leases end when the clock jumps past them, with commits
			// on their way, and claims come back while their holders
			// still hold their fences.
			fault = faultClockJump
		}
		t.Run(name, func(t *testing.T) {
			planted, err := bugs.Parse(name)
			if err != nil {
				t.Fatal(err)
			}
			for try := 1; try <= 8; try++ {
				seed := rand.Uint64()
				var found error
				t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
					found = killRun(t, run{seed: seed, planted: planted, fault: fault, traffic: 3 * time.Second,
						every: [2]time.Duration{200 * time.Millisecond, 800 * time.Millisecond}})
				})
				if found != nil {
					t.Logf("caught at run %d: %v", try, found)
					return
				}
			}
			t.Errorf("eight runs with %s planted passed the checks", name)
		})
	}
}
