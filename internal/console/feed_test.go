package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
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

// sseEvents reads a stream's events until one satisfies stop, and
// returns their seqs in the order sent.
func sseEvents(t *testing.T, body io.Reader, stop func(*intents.Event) bool) []uint64 {
	t.Helper()
	var seqs []uint64
	r := bufio.NewReader(body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended after %v: %v", seqs, err)
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || strings.HasPrefix(data, `{"subject"`) {
			continue
		}
		var ev intents.Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("an event that does not parse: %q: %v", data, err)
		}
		seqs = append(seqs, ev.Seq)
		if stop(&ev) {
			return seqs
		}
	}
}

// TestEventsStartWithHistory: a new stream starts with the log's recent
// events, then follows the live feed, every event once and none missing
// at the seam; a reconnect with Last-Event-ID resumes right after it.
func TestEventsStartWithHistory(t *testing.T) {
	w := newWorld(t)
	for i := range 50 {
		w.apply(w.w1, intents.Apply("count").Incr(fmt.Sprintf("stats.k%d", i%5), 1))
	}
	open := func(lastID string) io.ReadCloser {
		req, _ := http.NewRequest(http.MethodGet, w.srv.URL+"/api/events", nil)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET /api/events: %v %v", res, err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res.Body
	}
	body := open("")
	// Decided once the stream is open: it is on the live feed, after the
	// history, whose last event is this agent's 50th decision.
	live := w.apply(w.w2, intents.Apply("live").Set("report.live", true))
	// Until both the live decision and its change (rev) came: the feed
	// may carry a change after the decision that follows it in the log.
	through := func() func(*intents.Event) bool {
		var decided, changed bool
		return func(ev *intents.Event) bool {
			decided = decided || ev.Type == intents.EventDecision && ev.Intent == live.Intent
			changed = changed || ev.Seq == live.Rev
			return decided && changed
		}
	}
	seqs := sseEvents(t, body, through())
	if len(seqs) < 100 {
		t.Fatalf("the stream began with %d events, want the log's last 100 and the live ones: %v", len(seqs), seqs)
	}
	sorted := slices.Sorted(slices.Values(seqs))
	if len(slices.Compact(slices.Clone(sorted))) != len(seqs) {
		t.Fatalf("an event sent twice: %v", seqs)
	}
	seqs = sorted
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("event %d of the stream is seq %d after seq %d: a gap or a repeat at the seam: %v", i, seqs[i], seqs[i-1], seqs)
		}
	}
	resumed := slices.Sorted(slices.Values(sseEvents(t, open(strconv.FormatUint(seqs[len(seqs)-10], 10)), through())))
	if want := seqs[len(seqs)-9:]; !slices.Equal(resumed, want) {
		t.Fatalf("resumed after seq %d: %v, want %v", seqs[len(seqs)-10], resumed, want)
	}
}
