package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// adminWorld is what `coagent serve --auth` runs: the embedded server with
// the registry's agents, and a coordinator that knows their roles.
type adminWorld struct {
	t     *testing.T
	srv   *natsauth.Server
	seeds map[string]string
	subj  intents.Subjects
}

func newAdminWorld(t *testing.T, agentRoles map[string][]string) *adminWorld {
	t.Helper()
	dir := t.TempDir()
	reg, seeds := register(t, dir, agentRoles)
	w := &adminWorld{t: t, seeds: seeds}
	srv, err := natsauth.StartServer(natsauth.ServerConfig{Listen: "127.0.0.1:-1", Store: filepath.Join(dir, "jetstream"), Agents: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	w.srv = srv
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc := coordtest.StartOn(t, nc, filepath.Join(dir, "log"), coordinator.Options{Auth: true, Roles: reg.Roles,
		Core: coordinator.CoreOptions{Engine: engine.Config{ArbiterTimeout: 200 * time.Millisecond}}})
	// As serve does: the registry's roles are in force from the start.
	file, err := natsauth.MergeRoles(nil, reg.Roles())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetRules(context.Background(), file, "registry"); err != nil {
		t.Fatal(err)
	}
	return w
}

// connect connects as agent, its permission violations watched.
func (w *adminWorld) connect(agent string) (*nats.Conn, *agents.Permissions) {
	w.t.Helper()
	opts, err := agents.AuthOptions(agent, w.seeds[agent])
	if err != nil {
		w.t.Fatal(err)
	}
	perms := agents.NewPermissions()
	nc, err := nats.Connect(w.srv.NATS().ClientURL(), append(opts, perms.Option())...)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(nc.Close)
	return nc, perms
}

// rulesSet sends a rules file to rules.set and returns the reply (or the
// error) as a command line would, the connection's permission violations
// ending the wait.
func rulesSet(ctx context.Context, nc *nats.Conn, perms *agents.Permissions, file string) (*nats.Msg, error) {
	ctx, cancel := perms.Context(ctx)
	defer cancel()
	reply, err := nc.RequestWithContext(ctx, intents.Subjects{}.API(intents.APIRulesSet), []byte(file))
	return reply, perms.Err(ctx, err)
}

const board = `{"rules":[{"pattern":"report.*","writers":["alice","bob"]}]}`

// The operator's identity: an agent with the role admin may put rules in
// force over the API (and keeps its role through them, the registry's roles
// being merged into each file), and list, read and remove the dead
// letters, and retry one as its agent. A plain agent asking the same is
// refused by the server, and the client knows at once, with the subject
// refused, rather than after a timeout.
func TestAdminOverTheWire(t *testing.T) {
	w := newAdminWorld(t, map[string][]string{"admin": {natsauth.RoleAdmin}, "alice": {"writer"}, "bob": {"writer"}})
	ctx := ctxFor(t, 60*time.Second)
	anc, aperms := w.connect("admin")

	for range 2 { // a second time: the first file did not name the admin, the registry did
		reply, err := rulesSet(ctx, anc, aperms, board)
		if err != nil || reply.Header.Get("Nats-Service-Error") != "" {
			t.Fatalf("the admin's rules.set: %v %v", reply, err)
		}
		var rec struct{ Hash string }
		if err := json.Unmarshal(reply.Data, &rec); err != nil || rec.Hash == "" {
			t.Fatalf("the admin's rules.set: %s %v", reply.Data, err)
		}
	}

	// A dead letter: bob escalates against alice's transaction, and no
	// arbiter comes by the deadline.
	alice, _ := w.connect("alice")
	bob, _ := w.connect("bob")
	decisions, err := bob.SubscribeSync(w.subj.Decisions("bob"))
	if err != nil {
		t.Fatal(err)
	}
	submit := func(nc *nats.Conn, agent, body string) {
		t.Helper()
		if _, err := nc.RequestWithContext(ctx, w.subj.Submit(agent), []byte(body)); err != nil {
			t.Fatalf("%s: %v", agent, err)
		}
	}
	submit(alice, "alice", `{"id":"`+ulid.Make().String()+`","agent":"alice","kind":"propose","lease_ms":600000,"writes":[{"path":"report.intro","op":"set"}]}`)
	esc := ulid.Make().String()
	if err := bob.Publish(w.subj.Intents("bob"), []byte(`{"id":"`+esc+`","agent":"bob","kind":"apply","on_conflict":"escalate","writes":[{"path":"report.intro","op":"set","value":"x"}]}`)); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := decisions.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var d intents.Decision
		json.Unmarshal(m.Data, &d)
		if d.Intent == esc && d.Outcome.Final() {
			break
		}
	}

	// The admin reads the dead letters as `coagent dlq` does.
	js, err := jetstream.New(anc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, w.subj.Stream(intents.StreamDLQ))
	if err != nil {
		t.Fatalf("the admin's dlq: %v", err)
	}
	var letter *jetstream.RawStreamMsg
	for deadline := time.Now().Add(10 * time.Second); letter == nil; time.Sleep(10 * time.Millisecond) {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs > 0 {
			if letter, err = stream.GetMsg(ctx, info.State.FirstSeq); err != nil {
				t.Fatalf("the admin reads a dead letter: %v", err)
			}
		} else if time.Now().After(deadline) {
			t.Fatal("no dead letter")
		}
	}
	var c intents.Escalation
	if err := json.Unmarshal(letter.Data, &c); err != nil || c.ID != esc {
		t.Fatalf("dead letter %s: %v", letter.Data, err)
	}
	// dlq retry: the intent again, as bob, then the letter removed.
	if _, err := js.Publish(ctx, w.subj.Intents("bob"), []byte(`{"id":"`+ulid.Make().String()+`","agent":"bob","kind":"apply","writes":[{"path":"report.other","op":"set","value":1}]}`)); err != nil {
		t.Fatalf("the admin retries as bob: %v", err)
	}
	if err := stream.DeleteMsg(ctx, letter.Sequence); err != nil {
		t.Fatalf("the admin removes the dead letter: %v", err)
	}

	// Alice may do none of it, and hears so at once.
	aliceConn, perms := w.connect("alice")
	quick := ctxFor(t, 20*time.Second) // well short of a request's 30s, far above a refusal
	start := time.Now()
	_, err = rulesSet(quick, aliceConn, perms, board)
	var pe *agents.PermissionError
	if !errors.As(err, &pe) || pe.Op != "publish" || pe.Subject != "coagent.api.rules.set" || !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("alice's rules.set: %v (%T), want a *PermissionError for publish to coagent.api.rules.set", err, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the refusal took %s", d)
	}
	ajs, err := jetstream.New(aliceConn)
	if err != nil {
		t.Fatal(err)
	}
	jctx, cancel := perms.Context(quick)
	_, err = ajs.Stream(jctx, w.subj.Stream(intents.StreamDLQ))
	err = perms.Err(jctx, err)
	cancel()
	if !errors.As(err, &pe) || pe.Subject != "$JS.API.STREAM.INFO.COAGENT_DLQ" {
		t.Fatalf("alice's dlq list: %v, want a *PermissionError for $JS.API.STREAM.INFO.COAGENT_DLQ", err)
	}
}

// The coordinator itself refuses rules.set from anyone but an admin, for a
// server whose permissions would let one through: here the coordinator's
// own user, whose replies go to no agent's inbox.
func TestRulesSetNeedsAdmin(t *testing.T) {
	w := newAdminWorld(t, map[string][]string{"alice": {"writer"}})
	nc, err := w.srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	reply, err := nc.Request(w.subj.API(intents.APIRulesSet), []byte(board), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code, desc := reply.Header.Get("Nats-Service-Error-Code"), reply.Header.Get("Nats-Service-Error"); code != string(intents.ReasonUnauthorized) || !strings.Contains(desc, "role admin") {
		t.Fatalf("rules.set from no agent: %q %q, want unauthorized naming the role admin", code, desc)
	}
}
