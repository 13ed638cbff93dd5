// Package natstest runs the real NATS server that tests run against:
// embedded, with JetStream, on a random loopback port, its store under the
// test's temporary directory and gone with it, as nats-server's own tests
// do. It is for tests only; `coagent serve` starts its server itself.
package natstest

import (
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
