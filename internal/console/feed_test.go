package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/console"
	"github.com/coagent/coagent/internal/natstest"
)

// TestStalledStreamsAreDropped: event streams are bounded in number (one
// more is refused 503, saying why), and a stream whose browser never
// reads is dropped once its buffer is full, never waited on: intents go on
// being decided, the dropped streams end, and the console takes new ones.
func TestStalledStreamsAreDropped(t *testing.T) {
	const streams = 4
	w := newWorld(t, func(c *console.Config) { c.MaxStreams, c.StreamBuffer = streams, 4 })
	var bodies []io.ReadCloser
	for i := range streams {
		res, err := http.Get(w.srv.URL + "/api/events")
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %d", i, res.StatusCode)
		}
		bodies = append(bodies, res.Body) // never read
	}
	defer func() {
		for _, b := range bodies {
			b.Close()
		}
	}()
	res, err := http.Get(w.srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "MaxStreams") {
		t.Fatalf("stream %d of at most %d: %d %q, want 503 saying why", streams+1, streams, res.StatusCode, body)
	}
	if got := w.console.Feeds(); got.Open != streams || got.Refused != 1 {
		t.Fatalf("feeds after the refusal: %+v", got)
	}
	// Large values fill the sockets of the browsers that never read, so
	// their streams stall; every intent is decided all the same.
	big := strings.Repeat("x", 32<<10)
	i := 0
	for ; w.console.Feeds().Dropped < streams; i++ {
		if i == 1000 {
			t.Fatalf("after %d intents, the stalled streams are not all dropped: %+v", i, w.console.Feeds())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := w.w1.Apply(ctx, intents.Apply("fill").Set(fmt.Sprintf("fill.k%d", i%50), big))
		cancel()
		if err != nil || d.Outcome != intents.OutcomeApplied {
			t.Fatalf("intent %d beside stalled streams: %+v %v", i, d, err)
		}
	}
	t.Logf("the stalled streams were dropped after %d intents", i)
	// A dropped stream ends: its browser sees the end of the body.
	for i, b := range bodies {
		done := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, b); done <- err }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("stream %d, dropped, is still open", i)
		}
	}
	natstest.CheckFor(t, 10*time.Second, "the dropped streams closed", func() error {
		if got := w.console.Feeds(); got.Open != 0 {
			return fmt.Errorf("%+v", got)
		}
		return nil
	})
	res, err = http.Get(w.srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a new stream once the stalled ones were dropped: %d", res.StatusCode)
	}
}
