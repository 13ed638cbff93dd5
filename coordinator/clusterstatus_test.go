package coordinator

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// GatherStatus keeps every answer that comes within the wait, in node
// order whatever order they came in, and sets aside one that is not a
// status; with no stream the log is nil and LogErr says there is none.
// The answers come from one subscriber, in a known order, as members
// would in any.
func TestGatherStatus(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	sub, err := nc.Subscribe(intents.Subjects{Prefix: "p"}.Status(), func(m *nats.Msg) {
		for _, st := range []intents.MemberStatus{{Node: "n3", Role: intents.RoleStandby}, {Node: "n1", Role: intents.RoleActive}} {
			b, _ := json.Marshal(st)
			m.Respond(b)
		}
		m.Respond([]byte("not a status"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	g, err := GatherStatus(t.Context(), nc, StatusOptions{Prefix: "p", Wait: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Members) != 2 || g.Members[0].Node != "n1" || g.Members[1].Node != "n3" || len(g.Active) != 1 || g.Active[0] != "n1" ||
		g.Log != nil || g.LogError != "" || !errors.Is(g.LogErr, jetstream.ErrStreamNotFound) || g.NoResponders {
		t.Fatalf("gathered %+v", g)
	}
	if len(g.Strays) != 1 || string(g.Strays[0].Data) != "not a status" || g.Strays[0].Err == nil {
		t.Fatalf("strays %+v", g.Strays)
	}
}

// With nothing on the status subject the server says so at once, and a
// coordinator that runs alone is the one member, role alone, with its
// last event and since when it serves.
func TestGatherStatusAlone(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	start := time.Now()
	g, err := GatherStatus(t.Context(), nc, StatusOptions{Wait: time.Minute})
	if err != nil || len(g.Members) != 0 || !g.NoResponders || len(g.Active) != 0 || g.Active == nil {
		t.Fatalf("no coordinator: %+v %v", g, err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("took %s: it waited for answers that could not come", d)
	}
	if AloneAnswers(nc, intents.Subjects{}) {
		t.Fatal("AloneAnswers with no coordinator")
	}
	startService(t, ns, t.TempDir(), Options{})
	in := `{"id":"01JD0000000000000000000001","agent":"w1","kind":"apply","writes":[{"path":"doc.x","op":"incr"}]}`
	if _, err := nc.Request(intents.Subjects{}.Submit("w1"), []byte(in), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	g, err = GatherStatus(t.Context(), nc, StatusOptions{Wait: 300 * time.Millisecond, Stats: true})
	if err != nil || len(g.Members) != 1 || g.Log != nil || len(g.Active) != 0 {
		t.Fatalf("a coordinator alone: %+v %v", g, err)
	}
	if m := g.Members[0]; m.Role != RoleAlone || m.Node != "" || m.Seq == 0 || m.Since.IsZero() {
		t.Fatalf("a coordinator alone: %+v", m)
	}
	if !AloneAnswers(nc, intents.Subjects{}) {
		t.Fatal("AloneAnswers with a coordinator alone")
	}
}
