package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// feedHeartbeat is how often an idle stream sends a comment, so that
// proxies keep it open and a closed browser is noticed.
const feedHeartbeat = 15 * time.Second

// errFeedsFull is join's refusal of a stream beyond Config.MaxStreams.
var errFeedsFull = errors.New("console: every event stream is taken")

// FeedStats counts the console's event streams (/api/events).
type FeedStats struct {
	// Open is how many streams are open now.
	Open int
	// Dropped is how many were closed because their browser did not keep
	// up: their buffer was full when the feed had another event for them.
	Dropped uint64
	// Refused is how many were refused because Config.MaxStreams were
	// open.
	Refused uint64
}

// hub is the one subscription to the coordinator's live feed that every
// open stream shares, so that a thousand browsers cost the server one
// subscriber. It never waits for a stream: a stream whose buffer is full
// is dropped (its browser reconnects, and reads the log for what it
// missed), so that a stalled browser holds up neither the other streams
// nor the connection.
type hub struct {
	subject string
	max     int
	buffer  int

	dropped, refused atomic.Uint64

	mu struct {
		sync.Mutex
		nc      *nats.Conn
		sub     *nats.Subscription
		streams map[*feedStream]struct{}
	}
}

// feedStream is one browser's stream: what the hub delivers, and gone,
// closed when the hub drops it or the console ends it.
type feedStream struct {
	msgs chan *nats.Msg
	gone chan struct{}
	// kill unblocks the stream's handler if it is stuck writing to a
	// browser that does not read.
	kill func()
}

func newHub(nc *nats.Conn, subject string, max, buffer int) *hub {
	h := &hub{subject: subject, max: max, buffer: buffer}
	h.mu.nc = nc
	h.mu.streams = map[*feedStream]struct{}{}
	return h
}

// join opens a stream, subscribing to the feed if it is the first; the
// subscription is in place on the server when join returns, so that what
// happens after is on the stream. It returns errFeedsFull beyond the
// bound.
func (h *hub) join(kill func(), timeout time.Duration) (*feedStream, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.mu.streams) >= h.max {
		h.refused.Add(1)
		return nil, errFeedsFull
	}
	if h.mu.sub == nil {
		sub, err := h.mu.nc.Subscribe(h.subject, h.deliver)
		if err != nil {
			return nil, fmt.Errorf("subscribe to %s: %w", h.subject, err)
		}
		// The hub's handler never blocks, so this many waiting means the
		// process cannot keep up at all: NATS drops, not the server waits.
		_ = sub.SetPendingLimits(64*1024, 64*1024*1024)
		h.mu.sub = sub
	}
	// Under the lock, so that a swap of the connection cannot come
	// between: it flushes the subscription of the connection it is on.
	if err := h.mu.nc.FlushTimeout(timeout); err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", h.subject, err)
	}
	s := &feedStream{msgs: make(chan *nats.Msg, h.buffer), gone: make(chan struct{}), kill: kill}
	h.mu.streams[s] = struct{}{}
	return s, nil
}

// leave closes s, and the subscription with the last stream.
func (h *hub) leave(s *feedStream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.mu.streams[s]; ok {
		delete(h.mu.streams, s)
		close(s.gone)
	}
	if len(h.mu.streams) == 0 && h.mu.sub != nil {
		_ = h.mu.sub.Unsubscribe()
		h.mu.sub = nil
	}
}

// deliver hands m to every stream without waiting: a stream with no room
// is dropped.
func (h *hub) deliver(m *nats.Msg) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.mu.streams {
		select {
		case s.msgs <- m:
		default:
			delete(h.mu.streams, s)
			close(s.gone)
			h.dropped.Add(1)
			s.kill()
		}
	}
}

// swap moves the hub to nc and ends every stream open on the old
// connection (their browsers reconnect on the new one).
func (h *hub) swap(nc *nats.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.sub != nil {
		_ = h.mu.sub.Unsubscribe()
		h.mu.sub = nil
	}
	h.mu.nc = nc
	for s := range h.mu.streams {
		delete(h.mu.streams, s)
		close(s.gone)
		s.kill()
	}
}

func (h *hub) stats() FeedStats {
	h.mu.Lock()
	open := len(h.mu.streams)
	h.mu.Unlock()
	return FeedStats{Open: open, Dropped: h.dropped.Load(), Refused: h.refused.Load()}
}

// events streams the coordinator's live feed (<prefix>.events.>) to the
// browser as server-sent events, each an event of the log as the feed
// carries it, filtered by ?agent=, ?path= (overlapping) and ?type=. A
// change is on the feed once per board it wrote to; it is sent once.
func (b *backend) events(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r)
	if err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	if _, ok := w.(http.Flusher); !ok {
		http.Error(w, "the event feed needs a streaming connection", http.StatusInternalServerError)
		return
	}
	rc := http.NewResponseController(w)
	s, err := b.hub.join(func() { _ = rc.SetWriteDeadline(time.Now()) }, b.cfg.Timeout)
	if errors.Is(err, errFeedsFull) {
		http.Error(w, fmt.Sprintf("503 the console streams its most event feeds already (%d, Config.MaxStreams): close one, or retry later", b.cfg.MaxStreams),
			http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer b.hub.leave(s)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	// Every write has a deadline: a browser that stops reading ends its
	// stream rather than hold its goroutine and buffer.
	write := func(format string, args ...any) bool {
		select {
		case <-s.gone:
			return false
		default:
		}
		_ = rc.SetWriteDeadline(time.Now().Add(b.cfg.WriteTimeout))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// The subscription is in place before the browser is told the feed is
	// open: what it does after "open" is on the feed.
	if !write("retry: 2000\nevent: open\ndata: {\"subject\":%q}\n\n", b.subj.AllEvents()) {
		return
	}
	// The history, read while the live feed is already buffered: every
	// event up to the log's end as read (seen), then those of the live
	// feed after it, so that nothing is missed or shown twice at the seam.
	var seen uint64
	hist, seen, err := b.history(r.Context(), r, f)
	if err != nil {
		b.cfg.Logger.Warn("console: the event stream's history", "err", err)
	}
	for _, ev := range hist {
		data, err := json.Marshal(ev)
		if err != nil {
			continue
		}
		if !write("id: %d\nevent: event\ndata: %s\n\n", ev.Seq, data) {
			return
		}
	}
	beat := time.NewTicker(feedHeartbeat)
	defer beat.Stop()
	var lastChange uint64
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.gone:
			return
		case <-beat.C:
			if !write(": idle\n\n") {
				return
			}
		case m := <-s.msgs:
			evs, raws, err := b.feedEvents(m)
			if err != nil {
				b.cfg.Logger.Warn("console: a feed message that does not parse", "subject", m.Subject, "err", err)
				continue
			}
			for i, ev := range evs {
				if ev.Seq <= seen {
					continue // sent from the log
				}
				if ev.Type == intents.EventChange {
					// A change that wrote to several boards is in a
					// message of each, one after the other.
					if ev.Seq <= lastChange {
						continue
					}
					lastChange = ev.Seq
				}
				if !f.matches(ev) {
					continue
				}
				// The event as the coordinator sent it, with whatever
				// fields a newer coordinator adds.
				if !write("id: %d\nevent: event\ndata: %s\n\n", ev.Seq, compact(raws[i])) {
					return
				}
			}
		}
	}
}

// feedEvents returns the events a message of the live feed carries, and
// each one's JSON: the changes of a change feed message (a wire v2 one
// was a change event), or the one event of any other.
func (b *backend) feedEvents(m *nats.Msg) ([]*intents.Event, []json.RawMessage, error) {
	raws := []json.RawMessage{m.Data}
	if strings.HasPrefix(m.Subject, b.subj.EventsChange("")) {
		var fm struct {
			Changes []json.RawMessage `json:"changes"`
		}
		if err := json.Unmarshal(m.Data, &fm); err != nil {
			return nil, nil, err
		}
		if len(fm.Changes) > 0 {
			raws = fm.Changes
		}
	}
	evs := make([]*intents.Event, len(raws))
	for i, raw := range raws {
		evs[i] = new(intents.Event)
		if err := json.Unmarshal(raw, evs[i]); err != nil {
			return nil, nil, err
		}
	}
	return evs, raws, nil
}

// feedHistory is how many events of the log a new stream starts with;
// historyWindow is how far back from the last commit it looks for them,
// and historyPages bounds the pages it reads to the log's end.
const (
	feedHistory   = 100
	historyWindow = 2000
	historyPages  = 20
)

// history returns the events of the log a stream starts with, filtered as
// the stream is, in log order, and the seq up to which the log was read:
// after the browser's Last-Event-ID (a reconnect), every event since it;
// otherwise the last feedHistory among the recent ones.
func (b *backend) history(ctx context.Context, r *http.Request, f feedFilter) ([]*intents.Event, uint64, error) {
	var from uint64
	resume := false
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		if n, err := strconv.ParseUint(id, 10, 64); err == nil {
			from, resume = n+1, true
		}
	}
	if !resume {
		head, err := b.stateGet(ctx)
		if err != nil {
			return nil, 0, err
		}
		if head.Rev > historyWindow {
			from = head.Rev - historyWindow
		}
	}
	q := logQuery{From: from, Agent: f.agent, Type: f.typ}
	var out []*intents.Event
	var last uint64
	keep := feedHistory
	if resume {
		keep = logPageMax
	}
	_, err := b.scanLog(ctx, q, historyPages, func(ev *intents.Event) bool {
		last = max(last, ev.Seq)
		if f.matches(ev) {
			out = append(out, ev)
			if len(out) > keep {
				out = out[1:]
			}
		}
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	return out, last, nil
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
