package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// feedBuffer is how many feed messages wait for a slow browser before
// NATS drops them (the feed is live, not a record: the log is).
const feedBuffer = 1024

// feedHeartbeat is how often an idle stream sends a comment, so that
// proxies keep it open and a closed browser is noticed.
const feedHeartbeat = 15 * time.Second

// events streams the coordinator's live feed (<prefix>.events.>) to the
// browser as server-sent events, each an event of the log as the feed
// carries it, filtered by ?agent=, ?path= (overlapping) and ?type=. A
// change is on the feed once per path it wrote; it is sent once.
func (b *backend) events(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r)
	if err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "the event feed needs a streaming connection", http.StatusInternalServerError)
		return
	}
	msgs := make(chan *nats.Msg, feedBuffer)
	sub, err := b.cfg.NATS.ChanSubscribe(b.subj.AllEvents(), msgs)
	if err != nil {
		http.Error(w, fmt.Sprintf("subscribe to %s: %v", b.subj.AllEvents(), err), http.StatusBadGateway)
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := b.cfg.NATS.FlushTimeout(b.cfg.Timeout); err != nil {
		http.Error(w, fmt.Sprintf("subscribe to %s: %v", b.subj.AllEvents(), err), http.StatusBadGateway)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	// The subscription is in place before the browser is told the feed is
	// open: what it does after "open" is on the feed.
	fmt.Fprintf(w, "retry: 2000\nevent: open\ndata: {\"subject\":%q}\n\n", b.subj.AllEvents())
	flusher.Flush()
	beat := time.NewTicker(feedHeartbeat)
	defer beat.Stop()
	var lastChange uint64
	for {
		select {
		case <-r.Context().Done():
			return
		case <-beat.C:
			fmt.Fprint(w, ": idle\n\n")
			flusher.Flush()
		case m := <-msgs:
			var ev intents.Event
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				b.cfg.Logger.Warn("console: a feed message that does not parse", "subject", m.Subject, "err", err)
				continue
			}
			if ev.Type == intents.EventChange {
				// Consecutive: a change's messages are published together.
				if ev.Seq == lastChange {
					continue
				}
				lastChange = ev.Seq
			}
			if !f.matches(&ev) {
				continue
			}
			// The message as the coordinator sent it, with whatever fields
			// a newer coordinator adds.
			fmt.Fprintf(w, "id: %d\nevent: event\ndata: %s\n\n", ev.Seq, compact(m.Data))
			flusher.Flush()
		}
	}
}

// compact returns data, JSON, on one line (an SSE data line ends at a
// newline).
func compact(data []byte) []byte {
	var v json.RawMessage = data
	out, err := json.Marshal(v)
	if err != nil {
		return []byte("{}")
	}
	return out
}
