package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// lockedBuffer is a bytes.Buffer a logger on other goroutines writes to.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestClusterReplicas: on a 3-node JetStream cluster a coordinator with
// Replicas 3 creates every stream on all three nodes, decides an intent
// that came through the intents stream and stores its decision, and keeps
// doing so once a node that held every stream (the intents stream's
// leader, unless that is the coordinator's own server) is shut down, and
// after it comes back. A stream that exists with fewer replicas is
// reported at Warn and kept.
func TestClusterReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := natstest.RunCluster(t, 3)
	ctx := context.Background()
	// The coordinator connects to the first node (no randomizing) and
	// knows the others to reconnect to.
	connect := func() *nats.Conn {
		nc, err := nats.Connect(c.URLs(), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	svc, err := Start(ctx, connect(), t.TempDir(), Options{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })

	nc := connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subj := intents.Subjects{}
	streams := []string{intents.StreamIntents, intents.StreamDecisions, intents.StreamEvents, intents.StreamArbiter, intents.StreamDLQ}
	for _, k := range streams {
		name := subj.Stream(k)
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info := st.CachedInfo()
		if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("stream %s: %d replicas configured, cluster %+v; want 3, a leader and 2 replicas", name, info.Config.Replicas, info.Cluster)
		}
	}

	// An intent published on the intents stream (a JetStream publish, which
	// needs that stream) gets its decision on the decisions stream.
	n := 0
	decide := func() {
		t.Helper()
		n++
		id := fmt.Sprintf("01JD00000000000000000000%02d", n)
		body := fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"apply","writes":[{"path":"doc.x","op":"incr"}]}`, id)
		// While a stream elects a new leader its publishes fail; an agent
		// sends the same intent again, and the stream's dedup (on the
		// intent id) keeps it once.
		natstest.CheckFor(t, 20*time.Second, "the intents stream to take intent "+id, func() error {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := js.Publish(pctx, subj.Intents("w1"), []byte(body), jetstream.WithMsgID(id))
			return err
		})
		st, err := js.Stream(ctx, subj.Stream(intents.StreamDecisions))
		if err != nil {
			t.Fatal(err)
		}
		natstest.CheckFor(t, 20*time.Second, "the decision of "+id+" on the decisions stream", func() error {
			m, err := st.GetLastMsgForSubject(ctx, subj.Decisions("w1"))
			if err != nil {
				return err
			}
			var d intents.Decision
			if err := json.Unmarshal(m.Data, &d); err != nil {
				return err
			}
			if d.Intent != id {
				return fmt.Errorf("the last decision is of %s", d.Intent)
			}
			if d.Outcome != intents.OutcomeApplied {
				t.Fatalf("decision of %s: %+v", id, d)
			}
			return nil
		})
	}
	decide()

	// Shut down the node that leads the intents stream: the stream elects
	// another leader among the two left, and a connection to the node
	// (the coordinator's and this test's, to n1, when n1 leads) moves to
	// another. With 1 replica the stream would be gone with the node.
	victim := c.StreamLeader(subj.Stream(intents.StreamIntents))
	if victim < 0 {
		t.Fatal("the intents stream has no leader")
	}
	t.Logf("shutting down %s, the intents stream's leader; the coordinator is connected to %s", c.Servers[victim].Name(), nc.ConnectedServerName())
	c.Stop(victim)
	decide()
	c.Restart(victim)
	decide()

	// A stream made before with 1 replica is reported and kept: here the
	// dead letters of a second coordinator, under another prefix.
	other := intents.Subjects{Prefix: "team"}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: other.Stream(intents.StreamDLQ), Subjects: []string{other.DeadLetters()},
		Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc2, err := Start(ctx, connect(), t.TempDir(), Options{Prefix: "team", Replicas: 3, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer svc2.Shutdown(context.Background())
	want := fmt.Sprintf("stream=%s have=1 want=3", other.Stream(intents.StreamDLQ))
	if !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("the log does not report %q at Warn:\n%s", want, logs.String())
	}
	st, err := js.Stream(ctx, other.Stream(intents.StreamDLQ))
	if err != nil {
		t.Fatal(err)
	}
	if r := st.CachedInfo().Config.Replicas; r != 1 {
		t.Errorf("the stream made with 1 replica has %d now", r)
	}
}
