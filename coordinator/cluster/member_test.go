package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// startMember starts a member on nc in dir and stops it at the end.
func startMember(t *testing.T, nc *nats.Conn, dir, node string, replicas int, logs *lockedBuffer) *Member {
	t.Helper()
	opts := Options{Node: node, LeaseTTL: time.Second}
	opts.Replicas = replicas
	if logs != nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	m, err := Start(context.Background(), nc, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	return m
}

// awaitActive waits until m is the active coordinator.
func awaitActive(t *testing.T, m *Member, d time.Duration) {
	t.Helper()
	natstest.CheckFor(t, d, "member "+m.opts.Node+" active", func() error {
		if m.Role() != intents.RoleActive {
			return errors.New(m.Role())
		}
		return nil
	})
}

// statuses gathers every member's status; an error unless want answered.
func statuses(nc *nats.Conn, want int) (map[string]intents.MemberStatus, error) {
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(intents.Subjects{}.Status(), inbox, nil); err != nil {
		return nil, err
	}
	got := map[string]intents.MemberStatus{}
	for len(got) < want {
		m, err := sub.NextMsg(2 * time.Second)
		if err != nil {
			return got, fmt.Errorf("%d of %d members answered the status request: %w", len(got), want, err)
		}
		var st intents.MemberStatus
		if err := json.Unmarshal(m.Data, &st); err != nil {
			return got, err
		}
		got[st.Node] = st
	}
	return got, nil
}

// incr submits n increments of path, resending each (the same id) until a
// coordinator answers it, as the SDK does over a failover.
func incr(t *testing.T, nc *nats.Conn, path string, n int) {
	t.Helper()
	for range n {
		id := ulid.Make().String()
		body := fmt.Sprintf(`{"id":%q,"agent":"w","kind":"apply","writes":[{"path":%q,"op":"incr","value":1}]}`, id, path)
		deadline := time.Now().Add(30 * time.Second)
		for {
			m, err := nc.Request(intents.Subjects{}.Submit(""), []byte(body), 2*time.Second)
			if err == nil && m.Header.Get("Nats-Service-Error-Code") == "" {
				var d intents.Decision
				if err := json.Unmarshal(m.Data, &d); err != nil || d.Outcome != intents.OutcomeApplied {
					t.Fatalf("incr %s: %s %v", path, m.Data, err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("incr %s: no coordinator answered within 30s: %v", path, err)
			}
		}
	}
}

// counter reads a number at path through state.get.
func counter(t *testing.T, nc *nats.Conn, path string) float64 {
	t.Helper()
	st := natstest.Request[stateReply](t, nc, intents.Subjects{}.API(intents.APIStateGet), fmt.Sprintf(`{"paths":[%q]}`, path))
	v, _ := st.Values[path].Value.(float64)
	return v
}

// localHash is the hash and last event of the event log in dir, folded.
func localHash(t *testing.T, dir string) (string, uint64) {
	t.Helper()
	c, err := coordinator.OpenCore(dir, coordinator.CoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return replay.Hash(c.Engine().State()), c.Log().LastSeq()
}

// tipOf is the link at the end of the log in dir.
func tipOf(t *testing.T, dir string) link {
	t.Helper()
	c, err := coordinator.OpenCore(dir, coordinator.CoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tip, err := logTip(c.Log())
	if err != nil {
		t.Fatal(err)
	}
	return tip
}

// TestMemberTakeover: on a 3-node cluster, of two members one becomes
// active and decides; the other follows the replicated log into its own
// (its status says how far); when the active one stops, the standby takes
// over at once (the key is handed over) and decides from where the other
// stopped; the first, started again, follows; and every log folds to the
// same state and the same events as the replicated log holds.
func TestMemberTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := natstest.RunCluster(t, 3)
	dirA, dirB := t.TempDir(), t.TempDir()
	var logsA, logsB lockedBuffer
	a := startMember(t, c.Connect(t, 0), dirA, "a", 3, &logsA)
	awaitActive(t, a, 10*time.Second)
	b := startMember(t, c.Connect(t, 1), dirB, "b", 3, &logsB)
	client := c.Connect(t, 2)
	incr(t, client, "c.n", 20)

	natstest.CheckFor(t, 10*time.Second, "b current", func() error {
		st, err := statuses(client, 2)
		if err != nil {
			return err
		}
		if st["a"].Role != intents.RoleActive || st["b"].Role != intents.RoleStandby || st["b"].Leader != "a" {
			return fmt.Errorf("roles %+v", st)
		}
		if st["b"].Seq != st["a"].Seq || st["b"].LagGroups != 0 {
			return fmt.Errorf("b at event %d (%d groups behind), a at %d", st["b"].Seq, st["b"].LagGroups, st["a"].Seq)
		}
		return nil
	})

	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	awaitActive(t, b, 5*time.Second)
	incr(t, client, "c.n", 20)
	// The log b followed with reports its group commits to b's Service
	// now that it decides with it.
	if svc := b.Active(); svc == nil {
		t.Fatal("b is not active")
	} else if f := gather(t, svc.Registry())["coagent_log_sync_events"]; f == nil || f.Metric[0].Histogram.GetSampleCount() == 0 {
		t.Fatal("b's Service counted no group commit of its log after 20 increments")
	}
	a = startMember(t, c.Connect(t, 0), dirA, "a", 3, &logsA)
	natstest.CheckFor(t, 10*time.Second, "a current", func() error {
		st, err := statuses(client, 2)
		if err != nil {
			return err
		}
		if st["a"].Role != intents.RoleStandby || st["a"].Seq != st["b"].Seq {
			return fmt.Errorf("%+v\na's log:\n%s", st, logsA.String())
		}
		return nil
	})
	if v := counter(t, client, "c.n"); v != 40 {
		t.Fatalf("c.n = %v after 40 increments", v)
	}
	a.Stop(context.Background())
	b.Stop(context.Background())
	hashA, lastA := localHash(t, dirA)
	hashB, lastB := localHash(t, dirB)
	if hashA != hashB || lastA != lastB {
		t.Fatalf("a's log folds to %s at event %d, b's to %s at %d", hashA, lastA, hashB, lastB)
	}
	// The replicated log holds exactly those events.
	js, err := jetstream.New(client)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(context.Background(), intents.Subjects{}.Stream(intents.StreamLog))
	if err != nil {
		t.Fatal(err)
	}
	if pos, err := logPosition(context.Background(), stream, tipOf(t, dirA)); err != nil || pos != stream.CachedInfo().State.LastSeq+1 {
		t.Fatalf("the replicated log after event %d: position %d (%v), want its end %d", lastA, pos, err, stream.CachedInfo().State.LastSeq+1)
	}
	if !strings.Contains(logsB.String(), "active: this coordinator decides") {
		t.Fatalf("b never logged that it became active:\n%s", logsB.String())
	}
	// b decided with the Core it had followed the log with: its engine
	// was not rebuilt from the log at the takeover.
	if !strings.Contains(logsB.String(), "replayed=0 warm=true") {
		t.Fatalf("b's start rebuilt the engine rather than take the one it followed with:\n%s", logsB.String())
	}
}

// TestMemberFenced: a group appended by another writer since the active
// coordinator last appended (a leader that was deposed while paused sees
// exactly this) makes its next append fail the expected-sequence check:
// the intent it decided is answered unavailable and is in no log; the
// member steps down, follows the log past the other writer's message, and
// decides the same intent, sent again, once it leads again.
func TestMemberFenced(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	dir := t.TempDir()
	var logs lockedBuffer
	m := startMember(t, nc, dir, "a", 1, &logs)
	awaitActive(t, m, 10*time.Second)
	incr(t, nc, "c.n", 3)

	// Another writer appends: here, the last group again (a follower
	// skips a group it holds), which moves the stream past what the
	// active coordinator expects.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stream, err := js.Stream(ctx, intents.Subjects{}.Stream(intents.StreamLog))
	if err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, intents.Subjects{}.Log())
	if err != nil {
		t.Fatal(err)
	}
	again := nats.NewMsg(last.Subject)
	again.Header, again.Data = last.Header, last.Data
	again.Header.Del(nats.MsgIdHdr) // another writer's message has an id of its own
	if _, err := js.PublishMsg(ctx, again, jetstream.WithExpectLastSequence(last.Sequence)); err != nil {
		t.Fatal(err)
	}

	id := ulid.Make().String()
	body := []byte(fmt.Sprintf(`{"id":%q,"agent":"w","kind":"apply","writes":[{"path":"c.n","op":"incr","value":1}]}`, id))
	reply, err := nc.Request(intents.Subjects{}.Submit(""), body, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "unavailable" {
		t.Fatalf("the fenced coordinator answered %q %s, want unavailable", code, reply.Data)
	}
	natstest.CheckFor(t, 10*time.Second, "stepped down", func() error {
		if !strings.Contains(logs.String(), "stepped down") {
			return errors.New(logs.String())
		}
		return nil
	})
	// Sent again, it is decided once the member leads again: exactly one
	// increment, the one it was refused with not in any log.
	var d intents.Decision
	natstest.CheckFor(t, 10*time.Second, "decided again", func() error {
		reply, err := nc.Request(intents.Subjects{}.Submit(""), body, 2*time.Second)
		if err != nil {
			return err
		}
		if reply.Header.Get("Nats-Service-Error-Code") != "" {
			return fmt.Errorf("%s", reply.Data)
		}
		return json.Unmarshal(reply.Data, &d)
	})
	if d.Outcome != intents.OutcomeApplied || d.Duplicate {
		t.Fatalf("the intent sent again: %+v, want applied, not a duplicate", d)
	}
	if v := counter(t, nc, "c.n"); v != 4 {
		t.Fatalf("c.n = %v, want 4", v)
	}
	m.Stop(ctx)
	log, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	if _, err := replay.Verify(log, coordinator.CoreOptions{}.Engine, nil); err != nil {
		t.Fatal(err)
	}
}

// TestMemberSeeds: a coordinator that ran alone becomes the first member
// of a cluster: it seeds the empty replicated log with its own log and
// goes on from it; a member with an empty directory folds the whole of it;
// one whose log holds another history is refused, not merged.
func TestMemberSeeds(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	alone, other := t.TempDir(), t.TempDir()
	for _, dir := range []string{other, alone} {
		svc := startService(t, ns, dir, coordinator.Options{})
		incr(t, nc, "c.n", 3)
		if err := svc.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		// The other history must not reach the replicated log: its
		// decisions stream is shared, but the next coordinator folds only
		// its own log.
	}
	var logs lockedBuffer
	a := startMember(t, nc, alone, "a", 1, &logs)
	awaitActive(t, a, 10*time.Second)
	if !strings.Contains(logs.String(), "seeded the replicated log") {
		t.Fatalf("a did not seed the log:\n%s", logs.String())
	}
	incr(t, nc, "c.n", 1)
	if v := counter(t, nc, "c.n"); v != 4 {
		t.Fatalf("c.n = %v after the seed and one more increment, want 4", v)
	}
	fresh := t.TempDir()
	b := startMember(t, natstest.Connect(t, ns), fresh, "b", 1, nil)
	natstest.CheckFor(t, 10*time.Second, "b current", func() error {
		st, err := statuses(nc, 2)
		if err != nil {
			return err
		}
		if st["b"].Seq != st["a"].Seq || st["b"].Seq == 0 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	var otherLogs lockedBuffer
	c := startMember(t, natstest.Connect(t, ns), other, "c", 1, &otherLogs)
	select {
	case <-c.Done():
		if err := c.Err(); !errors.Is(err, coordinator.ErrAhead) || !strings.Contains(err.Error(), "another history") {
			t.Fatalf("a member with another history stopped with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a member with another history did not stop:\n%s", otherLogs.String())
	}
	c.Stop(context.Background())
	a.Stop(context.Background())
	b.Stop(context.Background())
	hashA, lastA := localHash(t, alone)
	hashB, lastB := localHash(t, fresh)
	if hashA != hashB || lastA != lastB {
		t.Fatalf("a folds to %s at %d, b to %s at %d", hashA, lastA, hashB, lastB)
	}
}

// TestMemberRidesLogLeaderLoss: when the node that leads COAGENT_LOG goes
// away, the active coordinator sends its unconfirmed groups again to the
// stream's new leader and stays active: decisions pause, none is lost, and
// it does not step down.
func TestMemberRidesLogLeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := natstest.RunCluster(t, 3)
	var logs lockedBuffer
	// The member connects to a node that will not lead the log: the log's
	// leader is known once the stream exists, so it is made first.
	boot, err := nats.Connect(c.Servers[0].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer boot.Close()
	js, err := jetstream.New(boot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), logStreamConfig(intents.Subjects{}, 3)); err != nil {
		t.Fatal(err)
	}
	leader := c.StreamLeader(intents.Subjects{}.Stream(intents.StreamLog))
	var urls []string
	for i, s := range c.Servers {
		if i != leader {
			urls = append(urls, s.ClientURL())
		}
	}
	connect := func() *nats.Conn {
		nc, err := nats.Connect(strings.Join(urls, ","), nats.DontRandomize(), nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	m := startMember(t, connect(), t.TempDir(), "a", 3, &logs)
	awaitActive(t, m, 10*time.Second)
	client := connect()
	incr(t, client, "c.n", 5)
	c.Stop(leader)
	began := time.Now()
	incr(t, client, "c.n", 5)
	t.Logf("decisions went on %s after the log's leader stopped", time.Since(began).Round(time.Millisecond))
	if m.Role() != intents.RoleActive || strings.Contains(logs.String(), "stepped down") {
		t.Fatalf("the member stepped down:\n%s", logs.String())
	}
	if v := counter(t, client, "c.n"); v != 10 {
		t.Fatalf("c.n = %v, want 10", v)
	}
}

// TestMemberKeepsLeaseWhileSeeding: a member renews the leadership key
// from the moment it takes it, so a seed (or a catch-up) longer than the
// lease does not let another member take the key from under it: a member
// that lost it while seeding would leave a standby deciding on a log
// seeded only in part.
func TestMemberKeepsLeaseWhileSeeding(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds a log of 400,000 events")
	}
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	alone := t.TempDir()
	l, err := eventlog.Open(alone, &eventlog.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	appendIncrements(t, l, 400_000)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var logsA, logsB lockedBuffer
	began := time.Now()
	a := startMember(t, nc, alone, "a", 1, &logsA)
	// b waits for a's key, which a takes first: b's stream is made by a.
	natstest.CheckFor(t, 10*time.Second, "a holds the key", func() error {
		if !strings.Contains(logsA.String(), "it will seed the replicated log") {
			return errors.New("not yet")
		}
		return nil
	})
	b := startMember(t, natstest.Connect(t, ns), t.TempDir(), "b", 1, &logsB)
	natstest.CheckFor(t, 2*time.Minute, "a active", func() error {
		if a.Role() != intents.RoleActive {
			return fmt.Errorf("%s:\n%s", a.Role(), logsA.String())
		}
		return nil
	})
	took := time.Since(began)
	if took < a.opts.LeaseTTL*5/4 {
		t.Fatalf("the seed took %s, not longer than the lease (%s): the test proves nothing; give it a longer log", took, a.opts.LeaseTTL)
	}
	if !strings.Contains(logsA.String(), "seeded the replicated log") || strings.Contains(logsA.String(), "stepping down") {
		t.Fatalf("a did not seed and stay active:\n%s", logsA.String())
	}
	if strings.Contains(logsB.String(), "active: this coordinator decides") || b.Role() != intents.RoleStandby {
		t.Fatalf("b became active while a seeded (%s):\n%s", b.Role(), logsB.String())
	}
	t.Logf("seeded in %s with a %s lease", took.Round(time.Millisecond), a.opts.LeaseTTL)
}

// TestMemberLargeIntents: a cluster's group is one message of the
// replicated log, so what an active member decides at once must fit one:
// a burst of intents near the size limit is cut into several groups,
// instead of a group the stream refuses (which fenced the member, and its
// successor with the same burst redelivered).
func TestMemberLargeIntents(t *testing.T) {
	ns := natstest.Run(t, func(o *server.Options) { o.MaxPayload = coordinator.MaxWireMessage })
	nc := natstest.Connect(t, ns)
	dir := t.TempDir()
	first := startMember(t, nc, dir, "a", 1, nil)
	awaitActive(t, first, 10*time.Second)
	// Sent while no coordinator runs, the burst is fetched at once by the
	// next, which decides it in one batch.
	if err := first.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	var futures []jetstream.PubAckFuture
	send := func(id, body string) {
		f, err := js.PublishAsync(protoIntents+"a", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		ids, futures = append(ids, id), append(futures, f)
	}
	// Each near the limit with a value as large, so that its events (the
	// intent, the change) take twice its bytes.
	for range 12 {
		send(protoIntent(`{"id":%q,"agent":"a","kind":"apply","writes":[{"path":"big.x","op":"set","value":%q}]}`,
			strings.Repeat("v", intents.MaxIntentSize-200)))
	}
	send(padIntent(t, coordinator.MaxWireMessage-4<<10)) // invalid: its record keeps its start (engine's TestOversizeRecordKeepsItsStart)
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		}
	}
	var logs lockedBuffer
	m := startMember(t, nc, dir, "a", 1, &logs)
	awaitActive(t, m, 10*time.Second)
	for i, id := range ids {
		natstest.CheckFor(t, 20*time.Second, "decision of "+id, func() error {
			resp, err := nc.Request(intents.Subjects{}.API(intents.APIDecisionGet), []byte(`{"intent":"`+id+`"}`), 5*time.Second)
			if err != nil {
				return err
			}
			var d intents.Decision
			if err := json.Unmarshal(resp.Data, &d); err != nil || d.Intent != id {
				return fmt.Errorf("%s: %v", resp.Data, err)
			}
			want := intents.OutcomeApplied
			if i == len(ids)-1 {
				want = intents.OutcomeRejected
			}
			if d.Outcome != want {
				t.Fatalf("intent %d: %s %s, want %s", i, d.Outcome, d.Reason, want)
			}
			return nil
		})
	}
	if strings.Contains(logs.String(), "stepping down") || m.Role() != intents.RoleActive {
		t.Fatalf("the member stepped down (%s):\n%s", m.Role(), logs.String())
	}
}

// stallingReader delivers the first `after` messages of the replicated
// log and then nothing, while it stays open: a reader that waits for good
// on a healthy cluster, as one was seen to after a node was killed.
type stallingReader struct {
	jetstream.MessagesContext
	after   int
	stopped chan struct{}
}

func (r *stallingReader) Next(opts ...jetstream.NextOpt) (jetstream.Msg, error) {
	if r.after == 0 {
		<-r.stopped
		return nil, jetstream.ErrMsgIteratorClosed
	}
	r.after--
	return r.MessagesContext.Next(opts...)
}

func (r *stallingReader) Stop() {
	select {
	case <-r.stopped:
	default:
		close(r.stopped)
	}
	r.MessagesContext.Stop()
}

// TestMemberFollowerStall: a standby whose reader of the replicated log
// stops delivering while the log grows replaces it with a new one, from
// the message after the last it folded, and catches up.
func TestMemberFollowerStall(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	a := startMember(t, nc, t.TempDir(), "a", 1, nil)
	awaitActive(t, a, 10*time.Second)
	incr(t, nc, "c.n", 3)

	var logs lockedBuffer
	opts := Options{Node: "b", LeaseTTL: time.Second, followStall: 500 * time.Millisecond}
	opts.Replicas = 1
	opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var readers atomic.Int32
	opts.wrapFollow = func(it jetstream.MessagesContext) jetstream.MessagesContext {
		if readers.Add(1) > 1 {
			return it
		}
		return &stallingReader{MessagesContext: it, after: 2, stopped: make(chan struct{})}
	}
	b, err := Start(context.Background(), nc, t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Stop(context.Background()) })
	incr(t, nc, "c.n", 20)
	natstest.CheckFor(t, 10*time.Second, "b current", func() error {
		st, err := statuses(nc, 2)
		if err != nil {
			return err
		}
		if st["b"].Seq != st["a"].Seq || st["b"].LagGroups != 0 {
			return fmt.Errorf("b at event %d (%d groups behind), a at %d", st["b"].Seq, st["b"].LagGroups, st["a"].Seq)
		}
		return nil
	})
	if n := readers.Load(); n != 2 {
		t.Fatalf("b opened %d readers of the log, want 2", n)
	}
	if !strings.Contains(logs.String(), "delivered nothing while the log holds more") {
		t.Fatalf("b did not say why it read the log anew:\n%s", logs.String())
	}
}

// TestMemberWatchesLapsedLease: a standby takes a key whose lease has
// lapsed by the end written in it only once it has itself seen the key
// unchanged for a whole lease, while the holder is still in the cluster:
// a bucket that answers again after its election shows the active
// member's lease lapsed, and the active member must have the time to
// renew it. A holder gone from the cluster (nobody answers on its own
// subjects) has nothing to renew it with, and its key is taken without
// that wait.
func TestMemberWatchesLapsedLease(t *testing.T) {
	for _, present := range []bool{true, false} {
		t.Run(map[bool]string{true: "holder present", false: "holder gone"}[present], func(t *testing.T) {
			ns := natstest.Run(t)
			nc := natstest.Connect(t, ns)
			a := startMember(t, nc, t.TempDir(), "a", 1, nil)
			awaitActive(t, a, 10*time.Second)
			if err := a.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			kv, err := js.KeyValue(context.Background(), intents.Subjects{}.LeaderBucket())
			if err != nil {
				t.Fatal(err)
			}
			if present {
				// The holder lives, though its renewals do not get
				// through: it answers on its own subjects.
				sub, err := nc.Subscribe(intents.Subjects{}.NodeAPI("h", intents.APIStateGet), func(m *nats.Msg) { m.Respond([]byte(`{}`)) })
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Unsubscribe()
			}
			stale, _ := json.Marshal(lease{Node: "h", Until: time.Now().Add(-time.Hour)})
			if _, err := kv.Put(context.Background(), intents.LeaderKey, stale); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			logs := &lockedBuffer{}
			b := startMember(t, nc, t.TempDir(), "b", 1, logs)
			awaitActive(t, b, 10*time.Second)
			took := time.Since(began)
			saidGone := strings.Contains(logs.String(), "holder is gone from the cluster")
			switch {
			case present && took < b.opts.LeaseTTL:
				t.Fatalf("b took a lease it had watched for %s, less than the lease %s, from a holder that answers", took, b.opts.LeaseTTL)
			case present && saidGone:
				t.Fatalf("b took the holder that answers for gone:\n%s", logs)
			case !present && !saidGone:
				t.Fatalf("b took the key of a holder gone from the cluster after watching it (%s):\n%s", took, logs)
			}
		})
	}
}

// TestMemberLostTail: the replicated log loses a tail a member's log holds,
// as a stream whose nodes had not synced it does when their power goes
// (here it is made anew, under the stopped cluster, with its first
// messages only). The member, started again, does not stop: it says which
// events are lost, keeps its log aside, follows the replicated log and
// leads from it, serving the state the stream holds.
func TestMemberLostTail(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "eventlog")
	a := startMember(t, nc, dir, "a", 1, nil)
	awaitActive(t, a, 10*time.Second)
	incr(t, nc, "lost.n", 10)
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := intents.Subjects{}.Stream(intents.StreamLog)
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	var msgs []*jetstream.RawStreamMsg
	for seq := st.CachedInfo().State.FirstSeq; seq <= st.CachedInfo().State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	// The stream keeps all but its last four groups, and the increments
	// of those it keeps.
	kept, want := msgs[:len(msgs)-4], 0
	for _, m := range kept {
		evs, err := eventlog.DecodeGroup(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == intents.EventChange && ev.Change.Writes[0].Path == "lost.n" {
				want++
			}
		}
	}
	lastKept, err := eventlog.DecodeGroup(kept[len(kept)-1].Data)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, m := range kept {
		out := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
		for _, h := range []string{headerFirst, headerLast, headerPrev} {
			out.Header.Set(h, m.Header.Get(h))
		}
		if _, err := js.PublishMsg(ctx, out); err != nil {
			t.Fatal(err)
		}
	}

	var logs lockedBuffer
	a = startMember(t, nc, dir, "a", 1, &logs)
	awaitActive(t, a, 10*time.Second)
	if got := counter(t, nc, "lost.n"); got != float64(want) || want == 10 {
		t.Fatalf("lost.n = %v once the member leads from the shortened log, want the %d increments it holds", got, want)
	}
	lost := fmt.Sprintf("lost_from_event=%d", lastKept[len(lastKept)-1].Seq+1)
	if !strings.Contains(logs.String(), "the replicated log lost the tail of this coordinator's log") || !strings.Contains(logs.String(), lost) {
		t.Fatalf("the member did not say what was lost (%s):\n%s", lost, logs.String())
	}
	aside, err := filepath.Glob(dir + ".ahead-*")
	if err != nil || len(aside) != 1 {
		t.Fatalf("the log kept aside: %v %v", aside, err)
	}
	incr(t, nc, "lost.n", 1)
	if got := counter(t, nc, "lost.n"); got != float64(want+1) {
		t.Fatalf("lost.n = %v after one more increment, want %d", got, want+1)
	}
}
