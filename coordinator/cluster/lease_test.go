package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestLeaseKeptWhileItsWriteIsPending: after a bucket's election, the
// compare-and-set of a renewal can fail while the key still reads as the
// member's own, at its revision: a write of its own is still in the
// stream's pipeline, ahead of the read. The member keeps the key and tries
// again, and renews once its write lands; it does not step down, which
// would leave the cluster without an active coordinator for a lease and
// more (TestBucketLeaderNodeKilled, under load, saw it).
func TestLeaseKeptWhileItsWriteIsPending(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: intents.Subjects{}.LeaderBucket(), Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	m := &Member{nc: nc, kv: kv, opts: Options{Node: "a", LeaseTTL: 600 * time.Millisecond},
		log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	rev, until, err := m.putLease(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The keeper holds the next revision, which the key does not have yet:
	// its write is the one still pending.
	k := m.keepLease(rev+1, until)
	defer k.stop()
	natstest.CheckFor(t, 10*time.Second, "a renewal tried again while the key reads as the member's", func() error {
		select {
		case err := <-k.lost:
			t.Fatalf("the key was given up: %v", err)
		default:
		}
		if !strings.Contains(logs.String(), "the key still reads as this member") {
			return errors.New("not yet")
		}
		return nil
	})
	// The pending write lands.
	if _, _, err := m.putLease(ctx, rev); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, "the key renewed by the keeper", func() error {
		select {
		case err := <-k.lost:
			t.Fatalf("the key was given up: %v", err)
		default:
		}
		e, err := kv.Get(ctx, intents.LeaderKey)
		if err != nil {
			return err
		}
		if e.Revision() <= rev+1 {
			return fmt.Errorf("revision %d", e.Revision())
		}
		return nil
	})
	k.stop()
	if r := <-k.renewed; r <= rev+1 {
		t.Fatalf("the keeper ended at revision %d; the key was at %d", r, rev+1)
	}
}
