package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
)

// nodeRead is one read's answer and its stamp.
type nodeRead struct {
	msg        *nats.Msg
	node, role string
	rev        uint64
}

// readAt asks subject and returns the answer, an error for none or a micro
// error.
func readAt(nc *nats.Conn, subject, body string) (nodeRead, error) {
	m, err := nc.Request(subject, []byte(body), 2*time.Second)
	if err != nil {
		return nodeRead{}, fmt.Errorf("%s: %w", subject, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		return nodeRead{}, fmt.Errorf("%s: %s %s", subject, code, m.Header.Get(micro.ErrorHeader))
	}
	r := nodeRead{msg: m, node: m.Header.Get(intents.HeaderNode), role: m.Header.Get(intents.HeaderRole)}
	if h := m.Header.Get(intents.HeaderRev); h != "" {
		if r.rev, err = strconv.ParseUint(h, 10, 64); err != nil {
			return r, fmt.Errorf("%s: header %s = %q: %w", subject, intents.HeaderRev, h, err)
		}
	}
	return r, nil
}

// serviceInstances gathers the metadata of every instance of the micro
// service coagent that answers within a moment, by id.
func serviceInstances(t *testing.T, nc *nats.Conn) map[string]map[string]string {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.INFO.coagent", inbox, nil); err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for {
		m, err := sub.NextMsg(500 * time.Millisecond)
		if err != nil {
			return got
		}
		var info micro.Info
		if err := json.Unmarshal(m.Data, &info); err != nil {
			t.Fatal(err)
		}
		got[info.ID] = info.Metadata
	}
}

// TestStandbyReads: on a 3-node cluster, a standby answers state.get,
// log.query and txn.list on its own subjects from the log it followed,
// once it has reached the active one's revision, stamped with its node,
// the role standby and that revision; the active one answers its own
// subjects too; the API's shared subjects are answered by the active one
// alone; the micro service shows both instances and their roles; and
// after a takeover each node's subjects answer in its new role.
func TestStandbyReads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := natstest.RunCluster(t, 3)
	subj := intents.Subjects{}
	dirA := t.TempDir()
	a := startMember(t, c.Connect(t, 0), dirA, "a", 3, nil)
	awaitActive(t, a, 10*time.Second)
	b := startMember(t, c.Connect(t, 1), t.TempDir(), "b", 3, nil)
	client := c.Connect(t, 2)
	incr(t, client, "c.n", 5)
	// A transaction in flight, for txn.list.
	txn := ulid.Make().String()
	body := fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"propose","lease_ms":600000,"writes":[{"path":"doc.x","op":"set"}]}`, txn)
	if m, err := client.Request(subj.Submit(""), []byte(body), 10*time.Second); err != nil || m.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Fatalf("propose: %v %v", m, err)
	}

	// The active one's answer, on the shared subject, says where it is.
	const paths = `{"paths":["c.n"]}`
	active, err := readAt(client, subj.API(intents.APIStateGet), paths)
	if err != nil {
		t.Fatal(err)
	}
	if active.node != "a" || active.role != intents.RoleActive || active.rev == 0 {
		t.Fatalf("the active one's state.get is stamped %q %q at %d", active.node, active.role, active.rev)
	}
	// The standby reaches that revision and then answers what was written
	// through the active one.
	var st nodeRead
	natstest.CheckFor(t, 10*time.Second, "b at the active one's revision", func() error {
		var err error
		if st, err = readAt(client, subj.NodeAPI("b", intents.APIStateGet), paths); err != nil {
			return err
		}
		if st.rev < active.rev {
			return fmt.Errorf("b at %d, a at %d", st.rev, active.rev)
		}
		return nil
	})
	if st.node != "b" || st.role != intents.RoleStandby || st.rev != active.rev {
		t.Fatalf("b's state.get is stamped %q %q at %d, want b standby at %d", st.node, st.role, st.rev, active.rev)
	}
	var sv stateReply
	if err := json.Unmarshal(st.msg.Data, &sv); err != nil {
		t.Fatal(err)
	}
	if v := sv.Values["c.n"]; !v.Exists || v.Value != 5.0 || v.Version != 5 || sv.Rev == 0 {
		t.Fatalf("b's state.get: %s", st.msg.Data)
	}

	// log.query and txn.list answer the same on both nodes' subjects.
	for _, q := range []struct{ endpoint, body string }{
		{intents.APILogQuery, `{"type":"change","limit":100}`},
		{intents.APITxnList, `{}`},
	} {
		fromA, err := readAt(client, subj.NodeAPI("a", q.endpoint), q.body)
		if err != nil {
			t.Fatal(err)
		}
		fromB, err := readAt(client, subj.NodeAPI("b", q.endpoint), q.body)
		if err != nil {
			t.Fatal(err)
		}
		if fromA.node != "a" || fromA.role != intents.RoleActive || fromB.node != "b" || fromB.role != intents.RoleStandby ||
			fromB.rev != active.rev || fromA.rev != active.rev {
			t.Fatalf("%s stamped %s %s at %d and %s %s at %d, want a active and b standby at %d", q.endpoint,
				fromA.node, fromA.role, fromA.rev, fromB.node, fromB.role, fromB.rev, active.rev)
		}
		if string(fromA.msg.Data) != string(fromB.msg.Data) {
			t.Fatalf("%s: a answered\n%s\nb answered\n%s", q.endpoint, fromA.msg.Data, fromB.msg.Data)
		}
	}
	var page struct {
		Events []*intents.Event `json:"events"`
	}
	lq, _ := readAt(client, subj.NodeAPI("b", intents.APILogQuery), `{"type":"change","limit":100}`)
	if err := json.Unmarshal(lq.msg.Data, &page); err != nil || len(page.Events) != 5 {
		t.Fatalf("b's log.query of the changes: %s (%v)", lq.msg.Data, err)
	}
	tl, _ := readAt(client, subj.NodeAPI("b", intents.APITxnList), `{}`)
	var txns struct {
		Txns []struct {
			Txn   string `json:"txn"`
			Agent string `json:"agent"`
		} `json:"txns"`
	}
	if err := json.Unmarshal(tl.msg.Data, &txns); err != nil || len(txns.Txns) != 1 || txns.Txns[0].Agent != "w1" {
		t.Fatalf("b's txn.list: %s (%v)", tl.msg.Data, err)
	}

	// The shared subjects are the active one's alone: a standby in the
	// queue group would answer some of these.
	for _, endpoint := range []string{intents.APIStateGet, intents.APILogQuery, intents.APITxnList} {
		for range 20 {
			r, err := readAt(client, subj.API(endpoint), `{}`)
			if endpoint == intents.APIStateGet {
				r, err = readAt(client, subj.API(endpoint), paths)
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.node != "a" || r.role != intents.RoleActive {
				t.Fatalf("%s on the shared subject was answered by %q (%q)", endpoint, r.node, r.role)
			}
		}
	}

	// The micro service: one instance a node, with its role.
	natstest.CheckFor(t, 5*time.Second, "two instances of coagent", func() error {
		roles := map[string]string{}
		for _, md := range serviceInstances(t, client) {
			roles[md["node"]] = md["role"]
		}
		if len(roles) != 2 || roles["a"] != intents.RoleActive || roles["b"] != intents.RoleStandby {
			return fmt.Errorf("instances by node: %v", roles)
		}
		return nil
	})

	// A takeover: b answers its subjects as the active one; a, started
	// again, follows and answers its own as a standby, at b's revision.
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	awaitActive(t, b, 5*time.Second)
	incr(t, client, "c.n", 1)
	natstest.CheckFor(t, 5*time.Second, "b answers as active", func() error {
		r, err := readAt(client, subj.NodeAPI("b", intents.APIStateGet), paths)
		if err != nil {
			return err
		}
		if r.role != intents.RoleActive {
			return fmt.Errorf("b answers as %q", r.role)
		}
		active = r
		return nil
	})
	a = startMember(t, c.Connect(t, 0), dirA, "a", 3, nil)
	natstest.CheckFor(t, 10*time.Second, "a answers as a standby at b's revision", func() error {
		r, err := readAt(client, subj.NodeAPI("a", intents.APIStateGet), paths)
		if err != nil {
			return err
		}
		if r.role != intents.RoleStandby || r.rev != active.rev {
			return fmt.Errorf("a answers as %q at %d, b is at %d", r.role, r.rev, active.rev)
		}
		var sv stateReply
		if err := json.Unmarshal(r.msg.Data, &sv); err != nil || sv.Values["c.n"].Value != 6.0 {
			return fmt.Errorf("a's state.get: %s (%v)", r.msg.Data, err)
		}
		return nil
	})
	if a.Role() != intents.RoleStandby {
		t.Fatalf("a is %s", a.Role())
	}
}
