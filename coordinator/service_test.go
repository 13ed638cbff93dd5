package coordinator

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// runServer starts an embedded NATS server with JetStream on a random
// loopback port, storing under t.TempDir(), as nats-server's own tests do.
func runServer(t testing.TB) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: filepath.Join(t.TempDir(), "jetstream"), NoLog: true, NoSigs: true})
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

func connect(t testing.TB, ns *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// startService runs a coordinator on ns with its data in dir.
func startService(t testing.TB, ns *server.Server, dir string, opts Options) *Service {
	t.Helper()
	nc := connect(t, ns)
	svc, err := Start(context.Background(), nc, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	return svc
}

func TestServiceSmoke(t *testing.T) {
	ns := runServer(t)
	startService(t, ns, t.TempDir(), Options{})
	nc := connect(t, ns)
	subj := intents.Subjects{}
	sub, err := nc.SubscribeSync(subj.Decisions("w1"))
	if err != nil {
		t.Fatal(err)
	}
	in := `{"id":"01JD0000000000000000000001","agent":"w1","kind":"apply","writes":[{"path":"doc.x","op":"incr"}]}`
	if err := nc.Publish(subj.Intents("w1"), []byte(in)); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var d intents.Decision
	if err := json.Unmarshal(msg.Data, &d); err != nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("decision %s: %v", msg.Data, err)
	}
	if msg.Header.Get(intents.HeaderIntent) != "01JD0000000000000000000001" {
		t.Fatalf("header %v", msg.Header)
	}
	// The API: state.get sees it.
	resp, err := nc.Request(subj.API("state.get"), []byte(`{"paths":["doc.x","doc.y"]}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var st stateReply
	if err := json.Unmarshal(resp.Data, &st); err != nil || st.Values["doc.x"].Value != 1.0 || st.Values["doc.y"].Exists {
		t.Fatalf("state.get: %s, %v", resp.Data, err)
	}
	// submit through the API answers with the decision.
	resp, err = nc.Request(subj.API("submit"), []byte(`{"id":"01JD0000000000000000000002","agent":"w2","kind":"apply","writes":[{"path":"doc.x","op":"incr"}]}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(resp.Data, &d); err != nil || d.Outcome != intents.OutcomeApplied || d.Agent != "w2" {
		t.Fatalf("submit: %s, %v", resp.Data, err)
	}
}
