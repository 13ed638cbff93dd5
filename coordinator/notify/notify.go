// Package notify posts what needs a person to a webhook: cases waiting for
// the arbiters, dead letters, tasks reclaimed or left to reconcile, and
// operators' overrides. Each notice is one JSON POST, signed with an
// HMAC-SHA256 of a shared secret over its timestamp and body, and sent
// again with backoff until the receiver takes it or the tries run out. It
// has a bounded queue and a goroutine of its own, so a slow or dead
// receiver never delays a decision: past the queue, notices are dropped
// and counted.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is what a notice is about.
type Kind string

// The kinds of notice.
const (
	KindCase       Kind = "case"        // an escalation waits for the arbiters
	KindDeadLetter Kind = "dead_letter" // a case no arbiter resolved by its deadline
	KindDeadTask   Kind = "dead_task"   // a task tried past its rule's max_retries
	KindReclaim    Kind = "reclaim"     // a task came back: its owner's lease ended
	KindReconcile  Kind = "reconcile"   // a task's lease ended with effects pending
	KindOverride   Kind = "override"    // an operator took a task from its owner
)

// Notice is one POST's body.
type Notice struct {
	// ID names the notice; every try of it carries the same, so that a
	// receiver can tell a retry from a new notice.
	ID   string    `json:"id"`
	Kind Kind      `json:"kind"`
	Time time.Time `json:"time"`
	// Subject is what it is about: a case id, a task's path.
	Subject string `json:"subject"`
	// Summary is one line for a person (a chat channel, a pager).
	Summary string `json:"summary"`
	// Detail is the whole of it, as the coordinator has it: the case, the
	// dead task, the reclaim.
	Detail any `json:"detail,omitempty"`
}

// The headers of a POST. The signature is "sha256=" and the hex HMAC-SHA256
// of the secret over the timestamp, a dot and the body (Sign).
const (
	HeaderSignature = "Coagent-Signature"
	HeaderTimestamp = "Coagent-Timestamp"
	HeaderID        = "Coagent-Notice"
)

// Config configures a Webhook. URL and Secret are required; every other
// field documents its default.
type Config struct {
	// URL is where notices are POSTed: http or https.
	URL string
	// Secret is the HMAC key the receiver checks signatures with.
	Secret []byte
	// Client sends the POSTs. The default has a 10s timeout.
	Client *http.Client
	// Queue bounds the notices waiting to be sent. The default is 1024.
	Queue int
	// Tries bounds the POSTs of one notice. The default is 8.
	Tries int
	// Backoff is the pause after the first failed try, doubled after each
	// one up to MaxBackoff. The defaults are 500ms and 30s.
	Backoff, MaxBackoff time.Duration
	// Logger receives what was given up. The default discards it.
	Logger *slog.Logger
	// Now is the clock of the signatures' timestamps. The default is
	// time.Now.
	Now func() time.Time
}

// Stats counts what became of the notices posted so far.
type Stats struct {
	Sent, Failed, Dropped uint64
}

// Webhook posts notices to one URL. It is safe for concurrent use.
type Webhook struct {
	cfg   Config
	queue chan Notice
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	sent, failed, dropped atomic.Uint64
}

// ErrConfig is wrapped by New's errors.
var ErrConfig = errors.New("notify: bad config")

// Check reports what is wrong with the required fields, wrapping
// ErrConfig.
func (cfg Config) Check() error {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: url %q: want an http or https URL", ErrConfig, cfg.URL)
	}
	if len(cfg.Secret) == 0 {
		return fmt.Errorf("%w: secret: empty; the receiver needs it to check the signatures", ErrConfig)
	}
	return nil
}

// New checks cfg, fills in its defaults and starts the webhook's sender.
func New(cfg Config) (*Webhook, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 1024
	}
	if cfg.Tries <= 0 {
		cfg.Tries = 8
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	w := &Webhook{cfg: cfg, queue: make(chan Notice, cfg.Queue), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w, nil
}

// Post queues n and returns at once; false when the queue is full and n
// was dropped.
func (w *Webhook) Post(n Notice) bool {
	select {
	case <-w.stop:
		w.dropped.Add(1)
		return false
	default:
	}
	select {
	case w.queue <- n:
		return true
	default:
		w.dropped.Add(1)
		w.cfg.Logger.Warn("webhook queue full; a notice was dropped", "kind", n.Kind, "subject", n.Subject)
		return false
	}
}

// Stats returns the counts so far.
func (w *Webhook) Stats() Stats {
	return Stats{Sent: w.sent.Load(), Failed: w.failed.Load(), Dropped: w.dropped.Load()}
}

// Close stops the sender: the notice being sent is given up, with those
// still queued, which count as dropped. It waits for the sender to stop
// or ctx to end.
func (w *Webhook) Close(ctx context.Context) error {
	w.once.Do(func() { close(w.stop) })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Webhook) run() {
	defer close(w.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-w.stop
		cancel()
	}()
	for {
		select {
		case <-w.stop:
			w.dropped.Add(uint64(len(w.queue)))
			return
		case n := <-w.queue:
			w.deliver(ctx, n)
		}
	}
}

// deliver posts n until the receiver takes it (a 2xx), refuses it for
// good (another 4xx than 408 or 429), or the tries run out.
func (w *Webhook) deliver(ctx context.Context, n Notice) {
	body, err := json.Marshal(n)
	if err != nil {
		w.failed.Add(1)
		w.cfg.Logger.Error("encode notice", "kind", n.Kind, "subject", n.Subject, "err", err)
		return
	}
	pause := w.cfg.Backoff
	for try := 1; ; try++ {
		err := w.post(ctx, n.ID, body)
		if err == nil {
			w.sent.Add(1)
			return
		}
		var perm *permanent
		if errors.As(err, &perm) || try >= w.cfg.Tries || ctx.Err() != nil {
			w.failed.Add(1)
			w.cfg.Logger.Warn("webhook notice given up", "kind", n.Kind, "subject", n.Subject, "tries", try, "err", err)
			return
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
		pause = min(2*pause, w.cfg.MaxBackoff)
	}
}

// permanent is a refusal that another try would not change.
type permanent struct{ status int }

func (p *permanent) Error() string { return "the receiver refused it: " + http.StatusText(p.status) }

func (w *Webhook) post(ctx context.Context, id string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts := strconv.FormatInt(w.cfg.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, Sign(w.cfg.Secret, ts, body))
	resp, err := w.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		return nil
	case s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests:
		return &permanent{s}
	default:
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
}

// Sign returns the signature header's value for a POST of body at the
// timestamp ts (Unix seconds, as sent in HeaderTimestamp).
func Sign(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// ErrSignature is Verify's error for a POST whose signature or timestamp
// does not check.
var ErrSignature = errors.New("notify: bad signature")

// Verify checks a received POST: its signature over its timestamp and body
// under secret, and that the timestamp is within tolerance of now, so that
// a recorded POST cannot be played again later.
func Verify(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	ts := h.Get(HeaderTimestamp)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not Unix seconds", ErrSignature, HeaderTimestamp, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s %s is %s from now, more than %s", ErrSignature, HeaderTimestamp, ts, d.Round(time.Second), tolerance)
	}
	got, _ := strings.CutPrefix(h.Get(HeaderSignature), "sha256=")
	want, _ := strings.CutPrefix(Sign(secret, ts, body), "sha256=")
	if !hmac.Equal([]byte(got), []byte(want)) {
		return fmt.Errorf("%w: %s does not match the body", ErrSignature, HeaderSignature)
	}
	return nil
}
