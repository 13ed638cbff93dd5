package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// TestSnapshotRequest: a request on Subjects.ClusterSnapshot is answered
// by the active member alone (the standby does not subscribe), which
// stores a snapshot and trims the log below it; once no member is active
// the request has no responders.
func TestSnapshotRequest(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	start := func(node string) *Member {
		var logs lockedBuffer
		o := Options{Node: node, LeaseTTL: time.Second, TrimEvery: -1}
		o.Replicas = 1
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		m, err := Start(context.Background(), natstest.Connect(t, ns), t.TempDir(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Stop(context.Background()) })
		return m
	}
	subject := intents.Subjects{}.ClusterSnapshot()
	subscribers := func() int {
		t.Helper()
		sz, err := ns.Subsz(&server.SubszOptions{Subscriptions: true, Test: subject})
		if err != nil {
			t.Fatal(err)
		}
		return sz.Total
	}
	a := start("a")
	awaitActive(t, a, 10*time.Second)
	incr(t, nc, "c.n", 5)
	b := start("b")
	natstest.CheckFor(t, 10*time.Second, "b current", func() error {
		st, err := statuses(nc, 2)
		if err != nil {
			return err
		}
		if st["b"].LogSeq != st["b"].LogLast || st["b"].Seq != st["a"].Seq {
			return errors.New("b behind")
		}
		return nil
	})
	if n := subscribers(); n != 1 {
		t.Fatalf("%d subscriptions on %s with one member active and one standby, want 1", n, subject)
	}
	m, err := nc.Request(subject, nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r intents.SnapshotReply
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("snapshot: %s: %s", code, m.Header.Get("Nats-Service-Error"))
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatal(err)
	}
	st, err := statuses(nc, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Node != "a" || r.Seq != st["a"].Seq || r.LogSeq < 2 || r.LogFirst != r.LogSeq || st["a"].LogFirst != r.LogFirst ||
		st["a"].Snapshot == nil || st["a"].Snapshot.Seq != r.Seq || r.Stored.IsZero() {
		t.Fatalf("snapshot reply %+v; status %+v", r, st)
	}

	b.Stop(context.Background())
	a.Stop(context.Background())
	// The server learns of the unsubscription from the member's own
	// connection, which a request on this one may overtake.
	natstest.CheckFor(t, 5*time.Second, "no subscription left", func() error {
		if n := subscribers(); n != 0 {
			return fmt.Errorf("%d subscriptions", n)
		}
		return nil
	})
	_, err = nc.Request(subject, nil, 5*time.Second)
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("snapshot with no member active: %v, want no responders", err)
	}
}
