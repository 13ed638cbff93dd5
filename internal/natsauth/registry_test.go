package natsauth

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nats-io/nkeys"
)

func TestRegistryRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agents.json")
	reg, err := Load(path)
	if err != nil || len(reg.Agents) != 0 {
		t.Fatalf("a missing registry: %v %v", reg, err)
	}
	seed, err := reg.Add("alice", []string{"writer", "arbiter", "writer"})
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	if a := reg.Agents["alice"]; a.Nkey != pub || !slices.Equal(a.Roles, []string{"arbiter", "writer"}) {
		t.Fatalf("alice = %+v, want her seed's public key and sorted unique roles", a)
	}
	if _, err := reg.Add("alice", nil); !errors.Is(err, ErrExists) {
		t.Fatalf("alice twice: %v", err)
	}
	if _, err := reg.Add("a b", nil); err == nil {
		t.Fatal("a bad name was registered")
	}
	if err := reg.Save(path); err != nil {
		t.Fatal(err)
	}
	again, err := Load(path)
	if err != nil || again.Agents["alice"].Nkey != pub {
		t.Fatalf("reloaded: %+v %v", again, err)
	}
	os.WriteFile(path, []byte(`{"agents":{"bob":{"nkey":"not a key"}}}`), 0o600)
	if _, err := Load(path); err == nil {
		t.Fatal("a registry with a bad key loaded")
	}
}

func TestPermissions(t *testing.T) {
	p := Permissions("", "alice", nil)
	for _, s := range []string{"coagent.intents.alice", "coagent.api.submit.alice", "coagent.api.state.get"} {
		if !slices.Contains(p.Publish.Allow, s) {
			t.Errorf("alice may not publish %s", s)
		}
	}
	for _, s := range []string{"coagent.decisions.alice", "coagent.notices.alice", "coagent.events.change.>", "_INBOX_alice.>"} {
		if !slices.Contains(p.Subscribe.Allow, s) {
			t.Errorf("alice may not subscribe to %s", s)
		}
	}
	// Each coordinator of a cluster answers the reads on its own subjects
	// too, a standby's through the same viewer as the active one's.
	for _, s := range []string{"coagent.cluster.*.api.state.get", "coagent.cluster.*.api.log.query", "coagent.cluster.*.api.txn.list"} {
		if !slices.Contains(p.Publish.Allow, s) {
			t.Errorf("alice may not publish %s", s)
		}
	}
	for _, s := range []string{"coagent.api.arbiter.resolve", "coagent.api.submit", "coagent.intents.>", "coagent.cluster.status", "coagent.cluster.snapshot"} {
		if slices.Contains(p.Publish.Allow, s) {
			t.Errorf("alice may publish %s", s)
		}
	}
	if slices.Contains(p.Subscribe.Allow, "coagent.events.>") {
		t.Error("an agent reads the whole feed")
	}
	arb := Permissions("team", "judge", []string{RoleArbiter, RoleObserver})
	if !slices.Contains(arb.Publish.Allow, "team.api.arbiter.resolve") || !slices.Contains(arb.Subscribe.Allow, "team.events.>") {
		t.Errorf("an arbiter and observer under prefix team: %+v", arb)
	}
}

// The admin may do what `coagent rules set` and `coagent dlq` do, and read
// what an observer reads; nobody else may.
func TestAdminPermissions(t *testing.T) {
	admin := Permissions("", "op", []string{RoleAdmin})
	for _, s := range []string{"coagent.api.rules.set", "coagent.intents.*", "$JS.API.STREAM.INFO.COAGENT_DLQ",
		"$JS.API.STREAM.MSG.GET.COAGENT_DLQ", "$JS.API.STREAM.MSG.DELETE.COAGENT_DLQ", "coagent.api.state.get"} {
		if !slices.Contains(admin.Publish.Allow, s) {
			t.Errorf("the admin may not publish %s", s)
		}
	}
	if !slices.Contains(admin.Subscribe.Allow, "coagent.events.>") {
		t.Error("the admin does not read the whole feed, as an observer does")
	}
	for _, roles := range [][]string{nil, {RoleObserver}, {RoleArbiter}} {
		p := Permissions("", "w", roles)
		for _, s := range []string{"coagent.api.rules.set", "coagent.intents.*", "$JS.API.STREAM.INFO.COAGENT_DLQ"} {
			if slices.Contains(p.Publish.Allow, s) {
				t.Errorf("roles %v may publish %s", roles, s)
			}
		}
	}
}

func TestRoleFor(t *testing.T) {
	for _, c := range []struct {
		subject string
		publish bool
		roles   []string
		want    string
	}{
		{"coagent.api.rules.set", true, nil, RoleAdmin},
		{"$JS.API.STREAM.INFO.COAGENT_DLQ", true, []string{RoleObserver}, RoleAdmin},
		{"coagent.api.arbiter.resolve", true, nil, RoleArbiter},
		{"coagent.events.decision", false, nil, RoleObserver},
		{"coagent.api.state.get", true, nil, ""}, // allowed already
		// A cluster's: status to observers, snapshot to the admin, each
		// member's reads to everyone.
		{"coagent.cluster.status", true, nil, RoleObserver},
		{"$JS.API.STREAM.INFO.COAGENT_LOG", true, nil, RoleObserver},
		{"coagent.cluster.snapshot", true, []string{RoleObserver}, RoleAdmin},
		{"coagent.cluster.n2.api.state.get", true, nil, ""},     // allowed already
		{"coagent.cluster.n2.api.conflicts.top", true, nil, ""}, // nobody: a member answers no other read there
		{"$JS.API.STREAM.INFO.COAGENT_INTENTS", true, nil, ""},
		{"$JS.API.STREAM.PURGE.COAGENT_DLQ", true, nil, ""}, // nobody may
	} {
		if got := RoleFor("", "alice", c.roles, c.subject, c.publish); got != c.want {
			t.Errorf("RoleFor(%s, publish %v, roles %v) = %q, want %q", c.subject, c.publish, c.roles, got, c.want)
		}
	}
}
