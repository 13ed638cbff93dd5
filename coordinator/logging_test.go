package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/oklog/ulid/v2"
)

// records is a slog handler that keeps what it is given.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// named returns the Info records with message msg, each as its attributes.
func (r *records) named(msg string) []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, rec := range r.recs {
		if rec.Message != msg || rec.Level != slog.LevelInfo {
			continue
		}
		attrs := map[string]string{}
		rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		out = append(out, attrs)
	}
	return out
}

// A run at Info says what the coordinator did: its start (the data
// directory, the streams it made, how many events it replayed and from
// which snapshot), its slow groups (at most one line a second), and its
// shutdown.
func TestServiceLogsItsRun(t *testing.T) {
	ns := natstest.Run(t)
	dir := t.TempDir()
	var logs records
	opts := Options{Logger: slog.New(&logs), SlowGroup: time.Nanosecond} // every group is slow
	nc := natstest.Connect(t, ns)
	svc, err := Start(context.Background(), nc, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	started := logs.named("coordinator started")
	if len(started) != 1 || started[0]["dir"] != dir || started[0]["events"] != "0" || started[0]["replayed"] != "0" {
		t.Fatalf("start: %v", started)
	}
	if made := logs.named("stream created"); len(made) != 5 {
		t.Fatalf("streams created: %v", made)
	}

	begin := time.Now()
	const n = 5
	for i := range n {
		id := ulid.Make().String()
		body := fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"apply","writes":[{"path":"doc.p%d","op":"set","value":1}]}`, id, i)
		natstest.Request[intents.Decision](t, nc, intents.Subjects{}.API(intents.APISubmit), body)
	}
	elapsed := time.Since(begin)
	slow := logs.named("slow group: its commit took long to be durable")
	if len(slow) == 0 || len(slow) > 1+int(elapsed/time.Second) {
		t.Fatalf("%d slow group lines in %s, want one a second at most, and at least one: %v", len(slow), elapsed, slow)
	}
	if slow[0]["events"] == "" || slow[0]["took"] == "" {
		t.Fatalf("a slow group line says neither its size nor its time: %v", slow[0])
	}

	if err := svc.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := logs.named("coordinator stopped")
	if len(stopped) != 1 || stopped[0]["events"] == "0" {
		t.Fatalf("shutdown: %v", stopped)
	}

	// Started again, it says how much of the log it replayed.
	svc = startService(t, ns, dir, opts)
	started = logs.named("coordinator started")
	if len(started) != 2 || started[1]["events"] != stopped[0]["events"] || started[1]["replayed"] != stopped[0]["events"] || started[1]["snapshot"] != "0" {
		t.Fatalf("restart: %v (stopped at %v)", started, stopped)
	}
	if made := logs.named("stream created"); len(made) != 5 {
		t.Fatalf("streams created again at a restart: %v", made)
	}
}
