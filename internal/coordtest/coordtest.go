// Package coordtest runs the real coordinator that tests outside package
// coordinator run against: on a NATS server from natstest, its event log
// under the test's temporary directory, shut down when the test ends. It
// is for tests only; `coagent serve` starts its coordinator itself.
//
// Start runs a coordinator on a connection of its own to the server, its
// log in a new temporary directory; StartOn runs one on a given connection
// and directory, for a test that restarts it on the same log or whose
// server wants credentials. The coordinator's internal tests (package
// coordinator, not coordinator_test) cannot import this package, as it
// imports the coordinator; they have startService in service_test.go,
// which does the same.
//
//	ns := natstest.Run(t)
//	coordtest.Start(t, ns, coordinator.Options{})
//	nc := natstest.Connect(t, ns)
//	c, err := agents.Connect(ctx, nc, "w1") // an agent, as in production
package coordtest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Start runs a coordinator on a connection of its own to ns, its log in a
// new directory under t.TempDir(); it is shut down when the test ends.
func Start(t testing.TB, ns *server.Server, opts coordinator.Options) *coordinator.Service {
	t.Helper()
	return StartOn(t, natstest.Connect(t, ns), filepath.Join(t.TempDir(), "log"), opts)
}

// StartOn runs a coordinator on nc with its log in dir: for a test that
// restarts it on the same log, or whose server wants credentials. It is
// shut down when the test ends; a test may shut it down before, and start
// another on the same dir.
func StartOn(t testing.TB, nc *nats.Conn, dir string, opts coordinator.Options) *coordinator.Service {
	t.Helper()
	svc, err := coordinator.Start(context.Background(), nc, dir, opts)
	if err != nil {
		t.Fatalf("start the coordinator in %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	return svc
}
