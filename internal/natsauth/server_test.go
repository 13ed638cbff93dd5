package natsauth

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

func startServer(t *testing.T, reg *Registry) *Server {
	t.Helper()
	srv, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", Store: filepath.Join(t.TempDir(), "jetstream"), Agents: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// connectAs connects with an agent's seed; the connection's asynchronous
// errors (a permissions violation) come on the channel.
func connectAs(t *testing.T, srv *Server, seed []byte) (*nats.Conn, <-chan error, error) {
	t.Helper()
	errs := make(chan error, 8)
	opts := []nats.Option{nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })}
	if seed != nil {
		kp, err := nkeys.FromSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		opts = append(opts, nats.Nkey(pub, kp.Sign))
	}
	nc, err := nats.Connect(srv.NATS().ClientURL(), opts...)
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, errs, err
}

func refused(err error) bool { return err != nil && strings.Contains(err.Error(), "uthorization") }

// A server with a registry admits its agents, each within its permissions,
// and the coordinator, and nobody else; Reload puts a changed registry in
// force on the running server, on the port it got.
func TestServerAdmitsTheRegistry(t *testing.T) {
	reg := &Registry{Agents: map[string]Agent{}}
	alice, err := reg.Add("alice", []string{"writer"})
	if err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, reg)
	if !srv.Authenticated() {
		t.Fatal("a server with a registry is not authenticated")
	}
	self, err := srv.Connect()
	if err != nil {
		t.Fatalf("the coordinator: %v", err)
	}
	defer self.Close()
	if err := self.Publish("coagent.decisions.alice", nil); err != nil || self.Flush() != nil || self.LastError() != nil {
		t.Fatalf("the coordinator may publish anything: %v %v", err, self.LastError())
	}
	if _, _, err := connectAs(t, srv, nil); !refused(err) {
		t.Fatalf("a client without a key: %v", err)
	}
	nc, errs, err := connectAs(t, srv, alice)
	if err != nil {
		t.Fatalf("alice: %v", err)
	}
	if _, err := nc.SubscribeSync("coagent.decisions.alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.SubscribeSync("coagent.decisions.bob"); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "coagent.decisions.bob") {
			t.Fatalf("alice subscribing to bob's decisions: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("alice read bob's decisions")
	}

	// carol, registered while the server runs, is let in by the reload;
	// alice, gone from the registry, is shut out.
	carol, err := reg.Add("carol", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := connectAs(t, srv, carol); !refused(err) {
		t.Fatalf("carol before the reload: %v", err)
	}
	delete(reg.Agents, "alice")
	if err := srv.Reload(reg); err != nil {
		t.Fatal(err)
	}
	if _, _, err := connectAs(t, srv, carol); err != nil {
		t.Fatalf("carol after the reload: %v", err)
	}
	if _, _, err := connectAs(t, srv, alice); !refused(err) {
		t.Fatalf("alice after she was removed: %v", err)
	}
	if again, err := srv.Connect(); err != nil {
		t.Fatalf("the coordinator after the reload: %v", err)
	} else {
		again.Close()
	}
}

func TestServerWithoutRegistry(t *testing.T) {
	srv := startServer(t, nil)
	if srv.Authenticated() {
		t.Fatal("a server without a registry is authenticated")
	}
	if _, _, err := connectAs(t, srv, nil); err != nil {
		t.Fatalf("anyone may connect: %v", err)
	}
	if err := srv.Reload(&Registry{}); !errors.Is(err, ErrNoRegistry) {
		t.Fatalf("reload without a registry: %v", err)
	}
	for _, addr := range []string{"nonsense", "127.0.0.1:port"} {
		if _, err := StartServer(ServerConfig{Listen: addr, Store: t.TempDir()}); err == nil || !strings.Contains(err.Error(), `"`+addr+`"`) {
			t.Errorf("listen %q: %v", addr, err)
		}
	}
}

// The sync settings reach the server's JetStream: always, an interval, and
// the server's own default of two minutes.
func TestServerSync(t *testing.T) {
	for _, c := range []struct {
		cfg    ServerConfig
		always bool
		every  time.Duration
	}{
		{ServerConfig{}, false, 2 * time.Minute},
		{ServerConfig{SyncAlways: true}, true, 0},
		{ServerConfig{SyncInterval: 10 * time.Second}, false, 10 * time.Second},
	} {
		c.cfg.Listen, c.cfg.Store = "127.0.0.1:0", t.TempDir()
		srv, err := StartServer(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		js := srv.NATS().JetStreamConfig()
		srv.Shutdown()
		if js == nil || js.SyncAlways != c.always || c.every != 0 && js.SyncInterval != c.every {
			t.Errorf("%+v: the server's JetStream has %+v", c.cfg, js)
		}
	}
}

// A server on an address another process listens on fails at once with an
// *AddrInUseError naming the address, not after the ten seconds it would
// wait for a server that never starts.
func TestStartServerAddrInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	start := time.Now()
	srv, err := StartServer(ServerConfig{Listen: addr, Store: filepath.Join(t.TempDir(), "jetstream")})
	if err == nil {
		srv.Shutdown()
		t.Fatalf("a server started on %s, which is in use", addr)
	}
	var inUse *AddrInUseError
	if !errors.As(err, &inUse) || inUse.Addr != addr || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("err = %v (%T), want an *AddrInUseError for %s matching EADDRINUSE", err, err, addr)
	}
	if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("err = %q: does not say %s is in use", err, addr)
	}
	// Well within the wait for a server that says nothing.
	if d := time.Since(start); d >= startTimeout/2 {
		t.Fatalf("it took %s to say so", d)
	}
}
