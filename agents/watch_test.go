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
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
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

// TestWatchHealsAGapInTheFeed: another writer on the change feed's stream
// (a deposed coordinator, say) puts a message on it, taking the place in
// the stream that the coordinator's next message expects. The next change
// wrote to two boards: its first board's message is refused (and asked for
// no acknowledgement), and its second board's, which expects the place
// the refused one would have taken, is stored. The first board's feed
// lacks the change for good. The board's watcher finds the gap at the
// board's next message, by the messages' chain, and reads the change from
// the log; the whole state's watcher had it from the second board's
// message. Without the chain, the board's watcher is never given it.
func TestWatchHealsAGapInTheFeed(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 60*time.Second)
	c := w.client("watcher")
	var watchers []*agents.Watcher
	for _, subtree := range []string{"", "gap"} {
		wt, err := c.Watch(ctx, subtree, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer wt.Stop()
		watchers = append(watchers, wt)
	}
	writer := w.client("w")
	var revs []uint64
	apply := func(b *intents.Builder) {
		t.Helper()
		d, err := writer.Apply(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, d.Rev)
	}
	// given checks that the watcher numbered i was given the log's changes
	// after the ones it was given before, up to the last applied.
	var at [2]int
	given := func(i int) {
		t.Helper()
		for ; at[i] < len(revs); at[i]++ {
			select {
			case ch := <-watchers[i].Changes():
				if ch.Rev != revs[at[i]] {
					t.Fatalf("watcher %d was given revision %d, and the log's next is %d", i, ch.Rev, revs[at[i]])
				}
			case <-ctx.Done():
				t.Fatalf("watcher %d was not given revisions %v", i, revs[at[i]:])
			}
		}
	}
	apply(intents.Apply("count").Incr("gap.p", 1))
	given(1) // on the feed: the feeder is idle

	js, err := jetstream.New(w.connect())
	if err != nil {
		t.Fatal(err)
	}
	subj := intents.Subjects{}
	stream, err := js.Stream(ctx, subj.Stream(intents.StreamEvents))
	if err != nil {
		t.Fatal(err)
	}
	// The watcher may have been given the change from the log before the
	// feeder's message of it is stored (the feeder holds its groups 2 ms):
	// the message is awaited, not assumed.
	var last *jetstream.RawStreamMsg
	natstest.CheckFor(t, 10*time.Second, "the change's message on the feed", func() (err error) {
		last, err = stream.GetLastMsgForSubject(ctx, subj.EventsChange(">"))
		return err
	})
	if _, err := js.Publish(ctx, last.Subject, last.Data); err != nil {
		t.Fatal(err)
	}
	apply(intents.Apply("both").Incr("gap.a", 1).Incr("gapb.a", 1))
	apply(intents.Apply("count").Incr("gap.b", 1))
	given(0)
	given(1)
	if watchers[1].Filled() == 0 {
		t.Fatal("the board's watcher read nothing from the log: the feed had no gap, and the test shows nothing")
	}
}
