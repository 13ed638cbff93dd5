// Package natstest runs the real NATS server that tests run against:
// embedded, with JetStream, on a random loopback port, its store under the
// test's temporary directory and gone with it, as nats-server's own tests
// do. It is for tests only; `coagent serve` starts its server itself.
//
// Run starts a server (configure changes its options first: users, a
// larger max_payload), Connect connects to it, and Next waits for the next
// message of a subscription and decodes it; each ends what it made when
// the test ends, and fails the test rather than return an error.
// RunCluster starts a JetStream cluster of such servers instead (three
// nodes on loopback, each with its own store), whose nodes a test can stop
// and start again. Package coordtest starts a coordinator on a server.
//
//	ns := natstest.Run(t)
//	nc := natstest.Connect(t, ns)
//	sub, err := nc.SubscribeSync(intents.Subjects{}.Decisions("w1"))
//	// … publish an intent of w1 on the stream path …
//	d := natstest.Next[intents.Decision](t, sub) // fails the test after 10 s
package natstest

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Run starts a server, stopped when the test ends. configure, if given,
// changes its options first (a larger max_payload, users).
func Run(t testing.TB, configure ...func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: filepath.Join(t.TempDir(), "jetstream"), NoLog: true, NoSigs: true}
	for _, c := range configure {
		c(opts)
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not start")
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// Connect connects to ns, closed when the test ends.
func Connect(t testing.TB, ns *server.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Next waits up to 10 s for the next message on sub and decodes it as JSON
// into a new T; the test fails if none comes or it does not decode.
func Next[T any](t testing.TB, sub *nats.Subscription) *T {
	t.Helper()
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no message on %s: %v", sub.Subject, err)
	}
	v := new(T)
	if err := json.Unmarshal(m.Data, v); err != nil {
		t.Fatalf("message on %s: %s: %v", m.Subject, m.Data, err)
	}
	return v
}

// Request sends body to subject, waits up to 30 s for the reply and
// decodes it as JSON into a new T; the test fails if none comes or it does
// not decode.
func Request[T any](t testing.TB, nc *nats.Conn, subject, body string) *T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, subject, []byte(body))
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	v := new(T)
	if err := json.Unmarshal(m.Data, v); err != nil {
		t.Fatalf("%s: %s: %v", subject, m.Data, err)
	}
	return v
}

// RequestErr sends body to subject and decodes the reply as JSON into a
// new T, waiting up to timeout; a service error reply is an error naming
// its code. Unlike Request it may be called from any goroutine.
func RequestErr[T any](nc *nats.Conn, subject, body string, timeout time.Duration) (*T, error) {
	m, err := nc.Request(subject, []byte(body), timeout)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, fmt.Errorf("%s: %s: %s", subject, code, m.Header.Get("Nats-Service-Error"))
	}
	v := new(T)
	if err := json.Unmarshal(m.Data, v); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", subject, m.Data, err)
	}
	return v, nil
}
