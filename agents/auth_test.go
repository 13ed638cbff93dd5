package agents_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// authWorld is an embedded server that admits only registered agents, each
// with the permissions of package natsauth, and a coordinator with its own key.
type authWorld struct {
	t     *testing.T
	ns    *server.Server
	svc   *coordinator.Service
	seeds map[string]string // agent → seed file
}

func newAuthWorld(t *testing.T, agentRoles map[string][]string) *authWorld {
	t.Helper()
	dir := t.TempDir()
	reg, seeds := register(t, dir, agentRoles)
	w := &authWorld{t: t, seeds: seeds}
	self, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := self.PublicKey()
	w.ns = natstest.Run(t, func(o *server.Options) { o.Nkeys = reg.Users("", pub) })
	nc := natstest.Connect(t, w.ns, nats.Nkey(pub, self.Sign))
	w.svc = coordtest.StartOn(t, nc, filepath.Join(dir, "log"), coordinator.Options{Auth: true})
	return w
}

// register makes a registry of agentRoles' agents and writes each one's
// seed under dir, returning the registry and agent → seed file.
func register(t *testing.T, dir string, agentRoles map[string][]string) (*natsauth.Registry, map[string]string) {
	t.Helper()
	reg := &natsauth.Registry{Agents: map[string]natsauth.Agent{}}
	seeds := map[string]string{}
	for name, roles := range agentRoles {
		seed, err := reg.Add(name, roles)
		if err != nil {
			t.Fatal(err)
		}
		seeds[name] = filepath.Join(dir, name+".nk")
		if err := os.WriteFile(seeds[name], seed, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return reg, seeds
}

// connect connects as agent; refusals by the server arrive on the channel.
func (w *authWorld) connect(agent string) (*nats.Conn, <-chan error) {
	w.t.Helper()
	opts, err := agents.AuthOptions(agent, w.seeds[agent])
	if err != nil {
		w.t.Fatal(err)
	}
	refused := make(chan error, 16)
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		refused <- err
	}))
	return natstest.Connect(w.t, w.ns, opts...), refused
}

func awaitRefusal(t *testing.T, refused <-chan error, what string) {
	t.Helper()
	select {
	case err := <-refused:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(err.Error(), "Permissions Violation") {
			t.Fatalf("%s: %v, want a permissions violation", what, err)
		}
		if !strings.Contains(err.Error(), what) {
			t.Fatalf("refusal %q does not name %s", err, what)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the server did not refuse %s", what)
	}
}

// TestAuthenticatedAgents: alice works through the SDK on her own
// subjects; the server refuses her publishing as bob or reading bob's
// decisions; an arbiter works the arbiter queue.
func TestAuthenticatedAgents(t *testing.T) {
	w := newAuthWorld(t, map[string][]string{"alice": {"writer"}, "bob": {"writer"}, "judge": {natsauth.RoleArbiter}})
	ctx := ctxFor(t, 60*time.Second)

	anc, refused := w.connect("alice")
	alice, err := agents.Connect(ctx, anc, "alice")
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	watch, err := alice.Watch(ctx, "doc", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	d, err := alice.Apply(ctx, intents.Apply("w").Set("doc.title", "mine"))
	if err != nil {
		t.Fatalf("alice's own apply: %v", err)
	}
	if st, err := alice.Read(ctx, "doc.title"); err != nil || string(st.Values["doc.title"].Value) != `"mine"` {
		t.Fatalf("alice's read: %v %v", st, err)
	}
	// The stream path under her identity: her intents subject, her
	// decisions, the record of her own intents.
	id, err := alice.Publish(ctx, &intents.Intent{Kind: intents.KindApply, Writes: []intents.Write{{Path: "doc.count", Op: intents.OpIncr}}})
	if err != nil {
		t.Fatalf("alice's publish: %v", err)
	}
	if d, err := alice.Decision(ctx, id); err != nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("alice's published intent: %+v, %v", d, err)
	}
	if d, err := alice.Decision(ctx, id); err != nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("alice's published intent from the record: %+v, %v", d, err)
	}
	select {
	case ch := <-watch.Changes():
		if ch.Rev != d.Rev {
			t.Fatalf("watched rev %d, want %d", ch.Rev, d.Rev)
		}
	case <-ctx.Done():
		t.Fatalf("alice's watch saw nothing: %v", watch.Err())
	}

	// Publishing as bob: on bob's intents subject, or bob's submit.
	in := []byte(`{"id":"01JD0000000000000000000042","agent":"bob","kind":"apply","writes":[{"path":"doc.title","op":"set","value":"forged"}]}`)
	if err := anc.Publish(intents.Subjects{}.Intents("bob"), in); err != nil {
		t.Fatal(err)
	}
	awaitRefusal(t, refused, `"coagent.intents.bob"`)
	if err := anc.Publish(intents.Subjects{}.API("submit.bob"), in); err != nil {
		t.Fatal(err)
	}
	awaitRefusal(t, refused, `"coagent.api.submit.bob"`)
	// A body naming bob on alice's own subject is decided unauthorized.
	forged, err := alice.Submit(ctx, &intents.Intent{Agent: "bob", Kind: intents.KindApply,
		Writes: []intents.Write{{Path: "doc.title", Op: intents.OpSet, Value: []byte(`"forged"`)}}})
	if err != nil || forged.Reason != intents.ReasonUnauthorized {
		t.Fatalf("a body naming bob: %+v, %v", forged, err)
	}
	// Reading bob's decisions, or the whole feed.
	if _, err := anc.SubscribeSync(intents.Subjects{}.Decisions("bob")); err != nil {
		t.Fatal(err)
	}
	awaitRefusal(t, refused, `"coagent.decisions.bob"`)
	if _, err := anc.SubscribeSync(intents.Subjects{}.AllEvents()); err != nil {
		t.Fatal(err)
	}
	awaitRefusal(t, refused, `"coagent.events.>"`)

	// The arbiter settles a case under its own identity.
	jnc, _ := w.connect("judge")
	arb, stop := context.WithCancel(ctx)
	defer stop()
	go agents.RunArbiter(arb, jnc, "judge", func(_ context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		return arbiter.Priority("judge", c), nil
	})
	bnc, _ := w.connect("bob")
	bob, err := agents.Connect(ctx, bnc, "bob")
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	tx, err := alice.Propose(ctx, intents.Propose("hold").Write("doc.intro", intents.OpSet))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Apply(ctx, intents.Apply("rewrite").Set("doc.intro", "bob's").Priority(3).Escalate()); err != nil {
		t.Fatalf("bob's escalated rewrite: %v", err)
	}
	awaitLost(t, tx)
	if !errors.Is(tx.Err(), agents.ErrPreempted) {
		t.Fatalf("alice's txn: %v", tx.Err())
	}
}
