package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// startTrimMember is startMember with no snapshot but those asked for,
// and a short window of intent ids in the engine.
func startTrimMember(t *testing.T, nc *nats.Conn, dir, node string, logs *lockedBuffer) *Member {
	t.Helper()
	opts := Options{Node: node, LeaseTTL: time.Second, TrimEvery: -1}
	opts.Replicas = 3
	// A window of 5 ids: a duplicate of an older intent is known only by
	// the log's records, which a snapshot must carry.
	opts.Core.Engine.DedupWindow = 5
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m, err := Start(context.Background(), nc, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	return m
}

// TestMemberSnapshotJoin: on a 3-node cluster the active member stores a
// snapshot and trims COAGENT_LOG below it (its first message moves up to
// the snapshot's); a member with an empty data directory joins from the
// snapshot and the log's tail; a standby that was stopped while the log
// was trimmed past it loads the snapshot when it comes back, its old log
// kept aside; and every log folds to the same state, each increment
// applied once.
func TestMemberSnapshotJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := natstest.RunCluster(t, 3)
	ctx := context.Background()
	client := c.Connect(t, 2)
	js, err := jetstream.New(client)
	if err != nil {
		t.Fatal(err)
	}
	logState := func() jetstream.StreamState {
		t.Helper()
		st, err := js.Stream(ctx, intents.Subjects{}.Stream(intents.StreamLog))
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State
	}
	var logsA, logsB, logsC lockedBuffer
	current := func(nodes ...string) {
		t.Helper()
		natstest.CheckFor(t, 15*time.Second, fmt.Sprint(nodes, " current"), func() error {
			st, err := statuses(client, len(nodes))
			if err != nil {
				return err
			}
			for _, n := range nodes {
				if st[n].LogSeq != st[n].LogLast || st[n].Seq != st["a"].Seq {
					return fmt.Errorf("%s at event %d message %d of %d; a at event %d\nc: %s", n, st[n].Seq, st[n].LogSeq, st[n].LogLast, st["a"].Seq, logsC.String())
				}
			}
			return nil
		})
	}
	dirA, dirB, dirC := t.TempDir(), t.TempDir(), t.TempDir()
	a := startTrimMember(t, c.Connect(t, 0), dirA, "a", &logsA)
	awaitActive(t, a, 10*time.Second)
	b := startTrimMember(t, c.Connect(t, 1), dirB, "b", &logsB)
	// An intent decided before the snapshot, sent again at the end to a
	// coordinator that joined from it, is answered as the duplicate it is.
	first := fmt.Sprintf(`{"id":%q,"agent":"w","kind":"apply","writes":[{"path":"c.n","op":"incr","value":1}]}`, ulid.Make().String())
	submit := func() intents.Decision {
		t.Helper()
		var d intents.Decision
		natstest.CheckFor(t, 15*time.Second, "decided", func() error {
			m, err := client.Request(intents.Subjects{}.Submit(""), []byte(first), 2*time.Second)
			if err != nil {
				return err
			}
			if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
				return errors.New(code)
			}
			return json.Unmarshal(m.Data, &d)
		})
		return d
	}
	if d := submit(); d.Outcome != intents.OutcomeApplied || d.Duplicate {
		t.Fatalf("the first intent: %+v", d)
	}
	incr(t, client, "c.n", 29)
	current("a", "b")

	if _, err := b.Snapshot(ctx); !errors.Is(err, ErrNotActive) {
		t.Fatalf("a standby's snapshot: %v, want ErrNotActive", err)
	}
	snap, err := a.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ls := logState(); ls.FirstSeq != snap.LogSeq || ls.FirstSeq < 20 {
		t.Fatalf("after a snapshot at message %d (event %d) the log's first message is %d", snap.LogSeq, snap.Seq, ls.FirstSeq)
	}

	// A member with an empty directory joins from the snapshot.
	cm := startTrimMember(t, c.Connect(t, 2), dirC, "c", &logsC)
	incr(t, client, "c.n", 10)
	current("a", "b", "c")
	st, err := statuses(client, 3)
	if err != nil {
		t.Fatal(err)
	}
	if s := st["c"].Snapshot; s == nil || s.Seq != snap.Seq {
		t.Fatalf("c's status says it loaded %+v, want the snapshot at event %d\nc's log:\n%s", s, snap.Seq, logsC.String())
	}
	if st["a"].LogFirst != snap.LogSeq {
		t.Fatalf("a's status: the log's first message %d, want %d", st["a"].LogFirst, snap.LogSeq)
	}

	// b is away while the log is trimmed past it: back, it loads the
	// snapshot.
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	bAt := st["b"].LogSeq
	incr(t, client, "c.n", 10)
	current("a", "c")
	snap2, err := a.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ls := logState(); ls.FirstSeq != snap2.LogSeq || ls.FirstSeq <= bAt+1 {
		t.Fatalf("after a snapshot at message %d with b away at %d, the log's first message is %d", snap2.LogSeq, bAt, ls.FirstSeq)
	}
	b = startTrimMember(t, c.Connect(t, 1), dirB, "b", &logsB)
	incr(t, client, "c.n", 10)
	current("a", "b", "c")
	if _, err := os.Stat(dirB + ".replaced"); err != nil {
		t.Fatalf("b's old log was not kept aside: %v\nb's log:\n%s", err, logsB.String())
	}
	if v := counter(t, client, "c.n"); v != 60 {
		t.Fatalf("c.n = %v after 60 increments", v)
	}

	// a away, b or c leads; they hold the first intent's record.
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if d := submit(); d.Outcome != intents.OutcomeApplied || !d.Duplicate {
		t.Fatalf("the first intent sent again to a coordinator that joined from the snapshot: %+v", d)
	}
	if v := counter(t, client, "c.n"); v != 60 {
		t.Fatalf("c.n = %v after 60 increments and a duplicate", v)
	}
	// The duplicate's group is answered once the stream has it, and the
	// standby folds it a moment later: both are level before they stop.
	natstest.CheckFor(t, 15*time.Second, "b and c level", func() error {
		st, err := statuses(client, 2)
		if err != nil {
			return err
		}
		if st["b"].Seq != st["c"].Seq || st["b"].LogSeq != st["b"].LogLast || st["c"].LogSeq != st["c"].LogLast {
			return fmt.Errorf("b %+v, c %+v", st["b"], st["c"])
		}
		return nil
	})
	for _, m := range []*Member{b, cm} {
		if err := m.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// a stopped before the duplicate's decision, the same state.
	var hashes []string
	var lasts []uint64
	for _, dir := range []string{dirA, dirB, dirC} {
		core, err := coordinator.OpenCore(dir, coordinator.CoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h, err := replay.Verify(core.Log(), engine.Config{}, nil)
		if err != nil {
			t.Fatalf("verify %s: %v", dir, err)
		}
		if h != replay.Hash(core.Engine().State()) {
			t.Fatalf("%s: the fold of the log %s, the engine %s", dir, h, replay.Hash(core.Engine().State()))
		}
		hashes, lasts = append(hashes, h), append(lasts, core.Log().LastSeq())
		first := core.Log().FirstSeq()
		core.Close()
		if dir != dirA && first <= 1 {
			t.Fatalf("%s starts at event %d: it did not load the snapshot", dir, first)
		}
	}
	if hashes[0] != hashes[1] || hashes[0] != hashes[2] || lasts[1] != lasts[2] {
		t.Fatalf("the logs fold to %v, at events %v", hashes, lasts)
	}
}

// TestMemberTrimHeldBack: a member that answers the status request holds
// the trim back at the message it has folded (here a member at the first,
// answered by hand), and a member with an empty data directory loads the
// snapshot even so, rather than fold the log from its first message.
func TestMemberTrimHeldBack(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	ctx := context.Background()
	behind, err := nc.Subscribe(intents.Subjects{}.Status(), func(m *nats.Msg) {
		m.Respond([]byte(`{"node":"slow","role":"standby","seq":1,"log_seq":1}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer behind.Unsubscribe()
	var logsA, logsB lockedBuffer
	opts := func(logs *lockedBuffer) Options {
		o := Options{Node: "a", LeaseTTL: time.Second, TrimEvery: -1}
		o.Replicas = 1
		o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		return o
	}
	a, err := Start(ctx, nc, t.TempDir(), opts(&logsA))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(ctx)
	awaitActive(t, a, 10*time.Second)
	incr(t, nc, "c.n", 10)
	snap, err := a.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, intents.Subjects{}.Stream(intents.StreamLog))
	if err != nil {
		t.Fatal(err)
	}
	if first := st.CachedInfo().State.FirstSeq; first != 1 {
		t.Fatalf("with a member at message 1, the log was trimmed to %d (the snapshot is at %d)", first, snap.LogSeq)
	}
	ob := opts(&logsB)
	ob.Node = "b"
	dirB := t.TempDir()
	b, err := Start(ctx, nc, dirB, ob)
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, "b current", func() error {
		sts, err := statuses(nc, 3)
		if err != nil {
			return err
		}
		if sts["b"].Seq != sts["a"].Seq || sts["b"].LogSeq != sts["b"].LogLast {
			return fmt.Errorf("b at %d, a at %d", sts["b"].Seq, sts["a"].Seq)
		}
		return nil
	})
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	core, err := coordinator.OpenCore(dirB, coordinator.CoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close()
	if first := core.Log().FirstSeq(); first != snap.Seq {
		t.Fatalf("b's log starts at event %d, not at the snapshot's %d:\n%s", first, snap.Seq, logsB.String())
	}
	if v := counter(t, nc, "c.n"); v != 10 {
		t.Fatalf("c.n = %v", v)
	}
}

// TestMemberTrimEvery: the active member stores a snapshot by itself once
// TrimEvery events were appended since the last, and trims the log.
func TestMemberTrimEvery(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	var logs lockedBuffer
	o := Options{Node: "a", LeaseTTL: time.Second, TrimEvery: 20}
	o.Replicas = 1
	o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a, err := Start(context.Background(), nc, t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	awaitActive(t, a, 10*time.Second)
	incr(t, nc, "c.n", 10)
	natstest.CheckFor(t, 10*time.Second, "a snapshot stored and the log trimmed", func() error {
		st, err := statuses(nc, 1)
		if err != nil {
			return err
		}
		if s := st["a"].Snapshot; s == nil || s.Seq < 20 || st["a"].LogFirst != s.LogSeq {
			return fmt.Errorf("status %+v snapshot %+v\n%s", st["a"], s, logs.String())
		}
		return nil
	})
}
