package notify

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

var secret = []byte("s3cret")

// receiver records each POST it gets, checked against the secret, and
// answers with the statuses it is given, one a POST (200 when they run
// out).
type receiver struct {
	mu       sync.Mutex
	statuses []int
	got      []Notice
	ids      []string
	bad      []error
	arrived  chan struct{}
	hold     chan struct{} // if set, each POST waits for it to close
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if r.hold != nil {
		r.arrived <- struct{}{}
		<-r.hold
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := Verify(secret, req.Header, body, time.Now(), time.Minute); err != nil {
		r.bad = append(r.bad, err)
	}
	var n Notice
	if err := json.Unmarshal(body, &n); err != nil {
		r.bad = append(r.bad, err)
	}
	r.got = append(r.got, n)
	r.ids = append(r.ids, req.Header.Get(HeaderID))
	status := http.StatusOK
	if len(r.statuses) > 0 {
		status, r.statuses = r.statuses[0], r.statuses[1:]
	}
	w.WriteHeader(status)
	if r.arrived != nil && r.hold == nil {
		r.arrived <- struct{}{}
	}
}

func start(t *testing.T, r *receiver, cfg Config) *Webhook {
	t.Helper()
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	cfg.URL, cfg.Secret = srv.URL, secret
	cfg.Backoff = time.Millisecond
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

func await(t *testing.T, r *receiver, n int) {
	t.Helper()
	for range n {
		select {
		case <-r.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("fewer than %d POSTs arrived", n)
		}
	}
}

// A notice arrives whole, signed with the shared secret, once.
func TestDeliversSigned(t *testing.T) {
	r := &receiver{arrived: make(chan struct{}, 8)}
	w := start(t, r, Config{})
	n := Notice{ID: "case:01J", Kind: KindCase, Time: time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC), Subject: "01J",
		Summary: "w2's apply waits for an arbiter", Detail: map[string]any{"deadline": "soon"}}
	if !w.Post(n) {
		t.Fatal("the queue refused the first notice")
	}
	await(t, r, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) > 0 || len(r.got) != 1 || r.got[0].ID != n.ID || r.got[0].Kind != KindCase || !r.got[0].Time.Equal(n.Time) || r.ids[0] != n.ID {
		t.Fatalf("got %+v, ids %v, errors %v", r.got, r.ids, r.bad)
	}
	waitStats(t, w, Stats{Sent: 1})
}

// A receiver that fails gets the same notice again, under the same id,
// until it takes it; one that refuses it for good gets it once.
func TestRetries(t *testing.T) {
	r := &receiver{arrived: make(chan struct{}, 8), statuses: []int{http.StatusInternalServerError, http.StatusTooManyRequests, http.StatusOK, http.StatusBadRequest}}
	w := start(t, r, Config{})
	w.Post(Notice{ID: "a", Kind: KindReclaim, Subject: "tasks.t1"})
	await(t, r, 3)
	waitStats(t, w, Stats{Sent: 1})
	w.Post(Notice{ID: "b", Kind: KindReclaim, Subject: "tasks.t2"})
	await(t, r, 1)
	waitStats(t, w, Stats{Sent: 1, Failed: 1})
	r.mu.Lock()
	defer r.mu.Unlock()
	if want := []string{"a", "a", "a", "b"}; len(r.ids) != 4 || r.ids[0] != want[0] || r.ids[1] != want[1] || r.ids[2] != want[2] || r.ids[3] != want[3] || len(r.bad) > 0 {
		t.Fatalf("ids %v, errors %v", r.ids, r.bad)
	}
}

// The tries run out: the notice is given up.
func TestTriesRunOut(t *testing.T) {
	r := &receiver{arrived: make(chan struct{}, 8), statuses: []int{502, 502, 502}}
	w := start(t, r, Config{Tries: 3})
	w.Post(Notice{ID: "a", Kind: KindDeadTask})
	await(t, r, 3)
	waitStats(t, w, Stats{Failed: 1})
}

// A receiver that does not answer holds up no caller: past the queue,
// notices are dropped and counted.
func TestFullQueueDrops(t *testing.T) {
	r := &receiver{arrived: make(chan struct{}, 8), hold: make(chan struct{})}
	w := start(t, r, Config{Queue: 1})
	w.Post(Notice{ID: "1"})
	await(t, r, 1) // the sender holds "1", waiting on the receiver
	began := time.Now()
	if !w.Post(Notice{ID: "2"}) {
		t.Fatal("the queue refused a notice it has room for")
	}
	if w.Post(Notice{ID: "3"}) {
		t.Fatal("the full queue took a third notice")
	}
	if d := time.Since(began); d > time.Second {
		t.Fatalf("Post waited %s", d)
	}
	close(r.hold)
	await(t, r, 1)
	waitStats(t, w, Stats{Sent: 2, Dropped: 1})
}

func waitStats(t *testing.T, w *Webhook, want Stats) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for w.Stats() != want {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, want %+v", w.Stats(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestVerify(t *testing.T) {
	body := []byte(`{"id":"a"}`)
	now := time.Unix(1_800_000_000, 0)
	h := http.Header{}
	h.Set(HeaderTimestamp, "1800000000")
	h.Set(HeaderSignature, Sign(secret, "1800000000", body))
	if err := Verify(secret, h, body, now, time.Minute); err != nil {
		t.Fatalf("a good signature: %v", err)
	}
	for what, check := range map[string]func() error{
		"another secret": func() error { return Verify([]byte("other"), h, body, now, time.Minute) },
		"another body":   func() error { return Verify(secret, h, []byte(`{"id":"b"}`), now, time.Minute) },
		"too old":        func() error { return Verify(secret, h, body, now.Add(2*time.Minute), time.Minute) },
		"no timestamp": func() error {
			return Verify(secret, http.Header{HeaderSignature: h[HeaderSignature]}, body, now, time.Minute)
		},
	} {
		if err := check(); !errors.Is(err, ErrSignature) {
			t.Errorf("%s: %v", what, err)
		}
	}
}

func TestConfigRefused(t *testing.T) {
	for _, cfg := range []Config{{URL: "ftp://x", Secret: secret}, {URL: "http://", Secret: secret}, {URL: "http://x"}} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}
