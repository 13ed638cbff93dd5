package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// protoIntents is the intents subject of SPEC §6, spelled out as a client
// in another language would spell it.
const protoIntents = "coagent.intents."

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

// startService runs a coordinator alone on ns with its data in dir.
func startService(t testing.TB, ns *server.Server, dir string, opts coordinator.Options) *coordinator.Service {
	t.Helper()
	nc := natstest.Connect(t, ns)
	svc, err := coordinator.Start(context.Background(), nc, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	return svc
}

// gather reads reg's metric families by name.
func gather(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// stateReply is the answer of state.get, as a client reads it.
type stateReply struct {
	Rev    uint64 `json:"rev"`
	Values map[string]struct {
		Exists  bool   `json:"exists"`
		Value   any    `json:"value"`
		Version uint64 `json:"version"`
	} `json:"values"`
}

// protoIntent formats an intent whose first verb is a fresh ULID, returned
// with it.
func protoIntent(format string, args ...any) (id, body string) {
	id = ulid.Make().String()
	return id, fmt.Sprintf(format, append([]any{id}, args...)...)
}

// padIntent is an apply of big.x padded through meta to exactly size bytes.
func padIntent(t *testing.T, size int) (id, body string) {
	const format = `{"id":%q,"agent":"a","kind":"apply","meta":{"pad":%q},"writes":[{"path":"big.x","op":"set","value":1}]}`
	_, probe := protoIntent(format, "")
	id, body = protoIntent(format, strings.Repeat("x", size-len(probe)))
	if len(body) != size {
		t.Fatalf("padded to %d bytes, want %d", len(body), size)
	}
	return id, body
}

// appendIncrements appends to l the events of n intents, increments of
// 2,000 counters decided by an engine, in batches of about 1,000 events
// with the state they leave, as a coordinator alone would have logged
// them.
func appendIncrements(tb testing.TB, l *eventlog.Log, n uint64) {
	tb.Helper()
	eng, err := engine.New(engine.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var prev *eventlog.Pending
	var batch []*intents.Event
	var touched []string
	flush := func() {
		var state []eventlog.Entry
		for _, p := range touched {
			state = append(state, replay.Entry(eng.State(), p))
		}
		p, err := l.Enqueue(&eventlog.Batch{Events: batch, State: state})
		if err != nil {
			tb.Fatal(err)
		}
		if prev != nil {
			if err := prev.Wait(context.Background()); err != nil {
				tb.Fatal(err)
			}
		}
		prev, batch, touched = p, nil, touched[:0]
	}
	for i := uint64(0); eng.Seq() < n; i++ {
		now = now.Add(time.Millisecond)
		var id ulid.ULID
		_ = id.SetTime(ulid.Timestamp(now))
		id[15] = byte(i)
		id[14] = byte(i >> 8)
		id[13] = byte(i >> 16)
		in := &intents.Intent{ID: id.String(), Agent: "agent-" + strconv.FormatUint(i%16, 10), Kind: intents.KindApply,
			Writes: []intents.Write{{Path: "stats.c" + strconv.FormatUint(i%2000, 10) + ".count", Op: intents.OpIncr, Value: json.RawMessage("1")}}}
		r := eng.Submit(now, engine.Input{Agent: in.Agent, Intent: in}, nil)
		batch, touched = append(batch, r.Events...), append(touched, r.Touched...)
		if len(batch) >= 1000 {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	if err := prev.Wait(context.Background()); err != nil {
		tb.Fatal(err)
	}
}
