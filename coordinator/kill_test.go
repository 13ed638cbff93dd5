package coordinator

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// TestServiceKill runs this test binary again as a child that is the whole
// coordinator service, connected to a NATS server that lives in the parent
// and so outlives every kill. The child says on stdout:
//
//	ready                  Start returned: it is serving
//	hash <hex> <rev>       after SIGTERM and Shutdown: the state it ended with
//	error <what>           it could not start or stop
//	holding                the write of the group with the incr of
//	                       $COAGENT_KILL_HOLD is held back from the log for
//	                       good (TestReadKilledBeforeDurable)
const (
	envKillNATS = "COAGENT_KILL_NATS"
	envKillDir  = "COAGENT_KILL_DIR"
	envKillHold = "COAGENT_KILL_HOLD"
)

// killAckWait is the child's AckWait: intents a killed child had fetched
// but not acknowledged come back within it.
const killAckWait = time.Second

func TestServiceKillChild(t *testing.T) {
	url, dir := os.Getenv(envKillNATS), os.Getenv(envKillDir)
	if url == "" || dir == "" {
		t.Skip("run by TestServiceKill")
	}
	fail := func(what string, err error) {
		fmt.Printf("error %s: %v\n", what, err)
		os.Exit(3)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	nc, err := nats.Connect(url)
	if err != nil {
		fail("connect", err)
	}
	opts := Options{AckWait: killAckWait}
	if path := os.Getenv(envKillHold); path != "" {
		opts.Core.holdWrite = holdIncr(path)
	}
	svc, err := Start(context.Background(), nc, dir, opts)
	if err != nil {
		fail("start", err)
	}
	fmt.Println("ready")
	<-term
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := svc.Shutdown(ctx); err != nil {
		fail("shutdown", err)
	}
	st := svc.Core().Engine().State()
	fmt.Printf("hash %s %d\n", replay.Hash(st), st.Rev())
	os.Exit(0)
}

// killChild is one run of TestServiceKillChild.
type killChild struct {
	cmd    *exec.Cmd
	lines  chan string
	waited bool
}

// startKillChild starts a coordinator child on dir and waits until it says
// it is serving; it returns when that was.
func startKillChild(t *testing.T, url, dir string) (*killChild, time.Time) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServiceKillChild$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), envKillNATS+"="+url, envKillDir+"="+dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &killChild{cmd: cmd, lines: make(chan string, 64)}
	t.Cleanup(func() {
		if !c.waited {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default: // nobody listens to a child that is being killed
			}
		}
	}()
	c.await(t, "ready", 30*time.Second)
	return c, time.Now()
}

// await returns the fields after word of the next line the child says
// starting with it.
func (c *killChild) await(t *testing.T, word string, timeout time.Duration) []string {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				t.Fatalf("the child ended before saying %q", word)
			}
			f := strings.Fields(line)
			if len(f) > 0 && f[0] == "error" {
				t.Fatalf("child: %s", line)
			}
			if len(f) > 0 && f[0] == word {
				return f[1:]
			}
		case <-timer.C:
			t.Fatalf("the child did not say %q within %s", word, timeout)
		}
	}
}

// kill ends the child with SIGKILL and reaps it.
func (c *killChild) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill: %v", err)
	}
	err := c.cmd.Wait()
	c.waited = true
	if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended %v (%v), not by SIGKILL", c.cmd.ProcessState, err)
	}
}

// stop ends the child with SIGTERM and returns the hash and rev of the
// state it shut down with.
func (c *killChild) stop(t *testing.T) (string, uint64) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("sigterm: %v", err)
	}
	f := c.await(t, "hash", 30*time.Second)
	err := c.cmd.Wait()
	c.waited = true
	if err != nil || len(f) != 2 {
		t.Fatalf("child stopped with %v after saying hash %v", err, f)
	}
	rev, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatalf("child said hash %v: %v", f, err)
	}
	return f[0], rev
}

// killProgress is an intent's first decision as a client saw it.
type killProgress struct {
	id string
	at time.Time
}

// killTracker is what the clients share with the test: the intents
// published and not yet decided, and each first decision in order.
type killTracker struct {
	mu        sync.Mutex
	undecided map[string]bool
	all       map[string]bool
	progress  chan killProgress

	republished, duplicates atomic.Int64
}

func (tr *killTracker) published(id string) {
	tr.mu.Lock()
	tr.undecided[id], tr.all[id] = true, true
	tr.mu.Unlock()
}

func (tr *killTracker) known(id string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.all[id]
}

func (tr *killTracker) decided(id string, at time.Time) {
	tr.mu.Lock()
	delete(tr.undecided, id)
	tr.mu.Unlock()
	tr.progress <- killProgress{id, at} // buffered for every intent
}

func (tr *killTracker) snapshot() map[string]bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make(map[string]bool, len(tr.undecided))
	for id := range tr.undecided {
		out[id] = true
	}
	return out
}

const (
	killClients = 8
	killPer     = 125 // intents per client
	killWindow  = 8   // intents a client has in flight at most
	// killRetry is how long a client waits for a decision before it
	// publishes the intent again under the same id.
	killRetry = 2 * time.Second
)

// killClient plays one agent: it publishes killPer incr intents on ctr.n,
// one per token, at most killWindow undecided at a time, each with
// Nats-Msg-Id = its id as SPEC §6 says. An intent without a decision for
// killRetry is published again with the same id; so that JetStream's
// deduplication does not swallow it (its first copy may be long acked, its
// decision lost with the process), odd clients send it with a fresh
// Nats-Msg-Id and even ones with none. The first decision of each intent
// must be applied (a duplicate repeating the recorded applied one counts);
// later ones are ignored.
func killClient(ctx context.Context, nc *nats.Conn, i int, tokens <-chan struct{}, tr *killTracker) error {
	agent := "k" + strconv.Itoa(i)
	subj := intents.Subjects{}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	decs := make(chan *nats.Msg, 4096)
	sub, err := nc.ChanSubscribe(subj.Decisions(agent), decs)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil { // the subscription is in place before the first intent
		return err
	}
	type pend struct {
		raw   []byte
		last  time.Time
		tries int
	}
	pending := map[string]*pend{}
	publish := func(id string, p *pend) error {
		m := nats.NewMsg(subj.Intents(agent))
		m.Data = p.raw
		switch {
		case p.tries == 0:
			m.Header.Set(jetstream.MsgIDHeader, id)
		case i%2 == 1:
			m.Header.Set(jetstream.MsgIDHeader, id+"-"+strconv.Itoa(p.tries))
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ack, err := js.PublishMsg(pctx, m)
		if err != nil {
			return fmt.Errorf("agent %s: publish %s (try %d): %w", agent, id, p.tries, err)
		}
		if ack.Duplicate {
			return fmt.Errorf("agent %s: publish %s (try %d) was taken for a duplicate", agent, id, p.tries)
		}
		p.last = time.Now()
		return nil
	}
	tick := time.NewTicker(killRetry / 10)
	defer tick.Stop()
	sent := 0
	for sent < killPer || len(pending) > 0 {
		var tok <-chan struct{}
		if sent < killPer && len(pending) < killWindow {
			tok = tokens
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent %s: %d sent, %d of them undecided: %w", agent, sent, len(pending), ctx.Err())
		case <-tok:
			id := ulid.Make().String()
			p := &pend{raw: fmt.Appendf(nil, `{"id":%q,"agent":%q,"kind":"apply","writes":[{"path":"ctr.n","op":"incr"}]}`, id, agent)}
			tr.published(id)
			if err := publish(id, p); err != nil {
				return err
			}
			pending[id] = p
			sent++
		case m := <-decs:
			id := m.Header.Get(intents.HeaderIntent)
			var d intents.Decision
			if err := json.Unmarshal(m.Data, &d); err != nil {
				return fmt.Errorf("agent %s: decision %s: %w", agent, m.Data, err)
			}
			if d.Intent != id || d.Agent != agent {
				return fmt.Errorf("agent %s: decision with header %s%s is %s", agent, intents.HeaderIntent, id, m.Data)
			}
			if pending[id] == nil {
				if !tr.known(id) {
					return fmt.Errorf("agent %s: decision for an intent never sent: %s", agent, m.Data)
				}
				continue // a later answer to an intent sent more than once
			}
			if d.Outcome != intents.OutcomeApplied {
				return fmt.Errorf("agent %s: decision %s", agent, m.Data)
			}
			if d.Duplicate {
				tr.duplicates.Add(1)
			}
			delete(pending, id)
			tr.decided(id, time.Now())
		case now := <-tick.C:
			for id, p := range pending {
				if now.Sub(p.last) < killRetry {
					continue
				}
				p.tries++
				tr.republished.Add(1)
				if err := publish(id, p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// The coordinator runs in a child process, killed with SIGKILL three times
// at random moments under load from 8 agents publishing 1,000 incr intents
// on one path, and restarted each time on the same data directory. The NATS
// server stays up in this process. Afterwards the counter is exactly 1,000,
// the log holds exactly one change and one final decision per intent,
// Verify passes, and replaying the log gives the state the child had.
// After each restart, the intents that were undecided when the child died
// are decided within seconds.
func TestServiceKill(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a child process 3 times")
	}
	began := time.Now()
	ns := natstest.Run(t)
	url := ns.ClientURL()
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("seed %d", seed)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()

	child, _ := startKillChild(t, url, dir)

	const total = killClients * killPer
	tr := &killTracker{undecided: map[string]bool{}, all: map[string]bool{}, progress: make(chan killProgress, total)}
	tokens := make(chan struct{}, total)
	issued := 0
	issue := func(n int) {
		for ; issued < min(n, total); issued++ {
			tokens <- struct{}{}
		}
	}
	clientErrs := make(chan error, killClients)
	var wg sync.WaitGroup
	for i := range killClients {
		nc := natstest.Connect(t, ns)
		wg.Go(func() {
			if err := killClient(ctx, nc, i, tokens, tr); err != nil {
				clientErrs <- err
			}
		})
	}
	defer wg.Wait()
	defer cancel()

	count := 0
	next := func() killProgress {
		t.Helper()
		select {
		case p := <-tr.progress:
			count++
			return p
		case err := <-clientErrs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("%d of %d intents decided: %v", count, total, ctx.Err())
		}
		panic("unreachable")
	}

	// Kill after a random number of decisions, with up to killSlack
	// intents handed out beyond it, so that many are in flight at every
	// stage (published, fetched, deciding, durable, acknowledged) when the
	// child dies.
	const killSlack = 100
	cut := 80 + rng.IntN(150)
	var cuts []int
	for range 3 {
		cuts = append(cuts, cut)
		cut += 150 + rng.IntN(100)
	}
	stream := intents.Subjects{}.Stream(intents.StreamIntents)
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	measured := 0 // kills that left an intent for the restarted child to decide
	for k, cut := range cuts {
		issue(cut + killSlack)
		for count < cut {
			next()
		}
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond) // a random moment, not a synchronisation
		killAt := time.Now()
		child.kill(t)
		outstanding := tr.snapshot()
		nOutstanding := len(outstanding)
		info := func() string {
			cons, err := js.Consumer(ctx, stream, "coordinator")
			if err != nil {
				return err.Error()
			}
			ci, err := cons.Info(ctx)
			if err != nil {
				return err.Error()
			}
			return fmt.Sprintf("%d fetched and unacknowledged, %d not yet delivered", ci.NumAckPending, ci.NumPending)
		}()
		var readyAt time.Time
		child, readyAt = startKillChild(t, url, dir)

		// Every intent undecided when the child died is decided now, by
		// JetStream delivering it again (or, if its decision was lost after
		// its acknowledgement, by the agent publishing it again).
		var first, all time.Duration
		firstSeen, inTransit := false, 0
		for len(outstanding) > 0 {
			p := next()
			if !outstanding[p.id] {
				continue
			}
			delete(outstanding, p.id)
			if p.at.Before(readyAt) {
				inTransit++ // published by the child before it died
				continue
			}
			if !firstSeen {
				first, firstSeen = p.at.Sub(readyAt), true
			}
			all = p.at.Sub(readyAt)
		}
		if !firstSeen {
			// Every intent in flight at the kill had been decided and its
			// decision was on its way: nothing to time recovery by this
			// time. Exactly-once is checked below all the same.
			t.Logf("kill %d after %d decisions (%d outstanding, all decided in transit): nothing left to time recovery with", k+1, cut, nOutstanding)
			continue
		}
		measured++
		t.Logf("kill %d after %d decisions (%d outstanding, %d decided in transit; consumer: %s): restarted in %s; "+
			"first earlier intent decided %s after ready, the last %s after",
			k+1, cut, nOutstanding, inTransit, info, readyAt.Sub(killAt).Round(time.Millisecond),
			first.Round(time.Millisecond), all.Round(time.Millisecond))
		if first > 5*time.Second {
			t.Errorf("kill %d: the first intent undecided at the kill was decided %s after the restart, want under 5s", k+1, first)
		}
		if all > 10*time.Second {
			t.Errorf("kill %d: the last intent undecided at the kill was decided %s after the restart, want under 10s", k+1, all)
		}
	}
	if measured == 0 {
		t.Fatal("no kill left an intent undecided: recovery was never timed")
	}
	issue(total)
	for count < total {
		next()
	}
	cancel()
	wg.Wait()
	close(clientErrs)
	for err := range clientErrs {
		t.Fatal(err)
	}
	t.Logf("%d intents decided; %d publications again under the same id, %d first answers were duplicates",
		total, tr.republished.Load(), tr.duplicates.Load())

	// The live child's counter.
	nc := natstest.Connect(t, ns)
	resp, err := nc.Request(intents.Subjects{}.API(intents.APIStateGet), []byte(`{"paths":["ctr.n"]}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var st stateReply
	if err := json.Unmarshal(resp.Data, &st); err != nil {
		t.Fatalf("state.get: %s: %v", resp.Data, err)
	}
	if v := st.Values["ctr.n"]; !v.Exists || v.Value != float64(total) {
		t.Fatalf("state.get: ctr.n is %s, want %d", resp.Data, total)
	}
	liveHash, liveRev := child.stop(t)
	if liveRev != st.Rev {
		t.Errorf("the child shut down at rev %d, state.get said %d", liveRev, st.Rev)
	}

	lastSeq, rev := checkKillLog(t, dir, tr, total, liveHash, liveRev)
	t.Logf("log ends at %d, rev %d; %s in all", lastSeq, rev, time.Since(began).Round(time.Millisecond))
}

// checkKillLog checks the log a kill test left in dir, once its child has
// stopped with liveHash at liveRev: exactly one change and one final
// decision for each of the total intents tr saw, Verify passes, and the
// replay is the child's state with the counter at total. It returns the
// log's last seq and the replay's rev.
func checkKillLog(t *testing.T, dir string, tr *killTracker, total int, liveHash string, liveRev uint64) (uint64, uint64) {
	t.Helper()
	log, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	changes, finals := appliedAndDecided(t, log)
	if len(changes) != total || len(finals) != total {
		t.Errorf("the log has changes for %d intent ids and final decisions for %d, want %d each", len(changes), len(finals), total)
	}
	for id := range tr.all {
		if changes[id] != 1 || finals[id] != 1 {
			t.Errorf("intent %s: %d changes and %d final decisions in the log, want 1 and 1", id, changes[id], finals[id])
		}
	}
	if _, err := replay.Verify(log, engine.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	eng, err := replay.Run(log, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tree := eng.State()
	if h := replay.Hash(tree); h != liveHash || tree.Rev() != liveRev {
		t.Errorf("replay: hash %s at rev %d, the child had %s at rev %d", h, tree.Rev(), liveHash, liveRev)
	}
	if v, _ := json.Marshal(tree.Lookup("ctr.n").Value); string(v) != strconv.Itoa(total) {
		t.Errorf("replay: ctr.n = %s, want %d", v, total)
	}
	return log.LastSeq(), tree.Rev()
}

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// A lease that runs out while the coordinator is down expires as soon as it
// starts again — the lease_expired notice and the expire event come without
// the clock moving on — and a commit on the old transaction with its fence
// is then fenced (SPEC §4), the detail saying the lease expired.
func TestLeaseExpiresWhileDown(t *testing.T) {
	ns := natstest.Run(t)
	dir := t.TempDir()
	clk := &fakeClock{now: t0}
	subj := intents.Subjects{}
	// The test's requests go on a connection of its own: Start flushes the
	// service's before it returns, so the API answers a request sent at
	// once.
	nc := natstest.Connect(t, ns)
	submit := func(in string) *intents.Decision {
		t.Helper()
		resp, err := nc.Request(subj.API(intents.APISubmit), []byte(in), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var d intents.Decision
		if err := json.Unmarshal(resp.Data, &d); err != nil {
			t.Fatalf("submit: %s: %v", resp.Data, err)
		}
		return &d
	}

	svc := startService(t, ns, dir, Options{Now: clk.Now})
	g := submit(`{"id":"01JD0000000000000000000001","agent":"a1","kind":"propose","lease_ms":1000,"writes":[{"path":"doc.x","op":"set"}]}`)
	if g.Outcome != intents.OutcomeGranted || g.Txn == "" || g.Fence == 0 || g.LeaseExpires == nil ||
		!g.LeaseExpires.Equal(t0.Add(time.Second)) {
		t.Fatalf("propose: %+v", g)
	}
	if err := svc.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Down past the lease.
	clk.Advance(2 * time.Second)
	notices, err := nc.SubscribeSync(subj.Notices("a1"))
	if err != nil {
		t.Fatal(err)
	}
	expires, err := nc.SubscribeSync(subj.Events(intents.EventExpire))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	startService(t, ns, dir, Options{Now: clk.Now})

	m, err := expires.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no expire event after the restart: %v", err)
	}
	var ev intents.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type != intents.EventExpire || ev.Release == nil || ev.Release.Txn != g.Txn || ev.Release.Cause != intents.CauseExpired ||
		!ev.Time.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("expire event %s", m.Data)
	}
	for {
		m, err := notices.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no lease_expired notice after the restart: %v", err)
		}
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Notice == nil {
			t.Fatalf("notice %s", m.Data)
		}
		if ev.Notice.Kind == intents.NoticeLeaseExpiring {
			// A warning is only noise once the expiry is due too; the
			// engine skips it, but it is not wrong.
			continue
		}
		if ev.Notice.Kind != intents.NoticeLeaseExpired || ev.Notice.Txn != g.Txn {
			t.Fatalf("notice %s", m.Data)
		}
		break
	}

	c := submit(fmt.Sprintf(`{"id":"01JD0000000000000000000002","agent":"a1","kind":"commit","txn":%q,"fence":%d,"writes":[{"path":"doc.x","op":"set","value":1}]}`,
		g.Txn, g.Fence))
	if c.Outcome != intents.OutcomeRejected || c.Reason != intents.ReasonFenced || c.Txn != g.Txn {
		t.Fatalf("commit after the lease ran out while down: %+v", c)
	}
	resp, err := nc.Request(subj.API(intents.APIStateGet), []byte(`{"paths":["doc.x"]}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var st stateReply
	if err := json.Unmarshal(resp.Data, &st); err != nil || st.Values["doc.x"].Exists {
		t.Fatalf("state.get after the rejected commit: %s, %v", resp.Data, err)
	}
}
