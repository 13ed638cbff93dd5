package agents_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
)

// recordsTo is a slog.Handler that sends each record's message and
// attributes, as one line, to a channel, dropping what the test does not
// read in time.
type recordsTo chan string

func (h recordsTo) Enabled(context.Context, slog.Level) bool { return true }
func (h recordsTo) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h recordsTo) WithGroup(string) slog.Handler            { return h }
func (h recordsTo) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	select {
	case h <- line:
	default:
	}
	return nil
}

// TestWatchRetriesRateLimited: a Watch whose feed.follow is refused
// rate_limited asks again, with a pause, until it gets its consumer, and
// then delivers. It returned the refusal at once, so `coagent watch` and
// an MCP resources/subscribe failed for the 30 s the quota lasts.
func TestWatchRetriesRateLimited(t *testing.T) {
	// The coordinator's clock, which the test moves past the quota's 30 s
	// once the watch has been refused.
	var skew atomic.Int64
	w := newWorld(t, coordinator.Options{Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	ctx := ctxFor(t, 60*time.Second)
	nc := w.connect()
	logs := make(recordsTo, 64)
	c, err := agents.Connect(ctx, nc, "watcher", agents.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Use up the quota of the client's connection, asking as it does.
	subject := intents.Subjects{}.API(intents.APIFeedFollow)
	for n := 0; ; n++ {
		reply, err := nc.RequestWithContext(ctx, subject, []byte(`{"path":"docs"}`))
		if err != nil {
			t.Fatal(err)
		}
		if code := reply.Header.Get("Nats-Service-Error-Code"); code == string(intents.ReasonRateLimited) {
			break
		} else if code != "" || n > 1000 {
			t.Fatalf("feed.follow %d: %q %q, want a consumer or rate_limited", n+1, code, reply.Header.Get("Nats-Service-Error"))
		}
	}
	type result struct {
		w   *agents.Watcher
		err error
	}
	done := make(chan result, 1)
	go func() {
		wa, err := c.Watch(ctx, "docs", 0)
		done <- result{wa, err}
	}()
	// The watch is refused, and says it will ask again.
	for refused := false; !refused; {
		select {
		case line := <-logs:
			refused = strings.Contains(line, "trying again") && strings.Contains(line, string(intents.ReasonRateLimited))
		case r := <-done:
			t.Fatalf("Watch returned (%v) before it was refused and asked again", r.err)
		case <-ctx.Done():
			t.Fatal("no rate_limited refusal logged")
		}
	}
	skew.Store(int64(31 * time.Second))
	var wa *agents.Watcher
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Watch after the quota renewed: %v", r.err)
		}
		wa = r.w
	case <-ctx.Done():
		t.Fatal("Watch did not return after the quota renewed")
	}
	defer wa.Stop()
	d, err := c.Apply(ctx, intents.Apply("w").Set("docs.d1", 1))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ch, ok := <-wa.Changes():
		if !ok || ch.Rev != d.Rev {
			t.Fatalf("change %+v (open %v, err %v), want rev %d", ch, ok, wa.Err(), d.Rev)
		}
	case <-ctx.Done():
		t.Fatal("the watch delivered nothing")
	}
}
