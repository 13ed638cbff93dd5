package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/cluster"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// startStatusMember starts a coordinator of a cluster named node on its
// own connection to url and directory, its streams with replicas; it
// stops when the test ends.
func startStatusMember(t *testing.T, url, node string, replicas int) *cluster.Member {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	opts := cluster.Options{Node: node, LeaseTTL: time.Second}
	opts.Replicas = replicas
	m, err := cluster.Start(context.Background(), nc, t.TempDir(), opts)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Stop(context.Background())
		nc.Close()
	})
	return m
}

// TestStatus runs `coagent status` against no coordinator, then against
// two coordinators of a cluster on one server: it names both, the one
// active, the standby caught up, and the log's stream.
func TestStatus(t *testing.T) {
	ns := natstest.Run(t)
	url := ns.ClientURL()

	// Nothing subscribes to the status subject: a failure at once, not
	// after --wait, naming the subject and what to start.
	start := time.Now()
	p := runBin(t, nil, "", "status", "--nats", url, "--wait", "1m")
	if p.status != 1 || p.stdout != "" ||
		!strings.Contains(p.stderr, "coagent: no coordinator of a cluster answered on coagent.cluster.status (nothing subscribes to it)\n") ||
		!strings.Contains(p.stderr, "there is no stream COAGENT_LOG") || !strings.Contains(p.stderr, "coagent serve --cluster") {
		t.Fatalf("status without coordinators: %+v", p)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("status without coordinators took %s: it waited for answers that could not come", d)
	}

	a, _ := startActiveWithIncrements(t, ns, url)
	b := startStatusMember(t, url, "b", 1)

	var st coordinator.ClusterStatus
	natstest.CheckFor(t, 10*time.Second, "b caught up", func() error {
		p := runBin(t, nil, "", "status", "--nats", url, "-o", "json", "--wait", "300ms")
		if p.status != 0 {
			return fmt.Errorf("%+v", p)
		}
		st = coordinator.ClusterStatus{}
		if err := json.Unmarshal([]byte(p.stdout), &st); err != nil {
			return fmt.Errorf("%v: %s", err, p.stdout)
		}
		if len(st.Members) != 2 || st.Members[1].Node != "b" || st.Members[1].LagGroups != 0 || st.Members[1].LogSeq == 0 {
			return fmt.Errorf("%s", p.stdout)
		}
		return nil
	})
	ma, mb := st.Members[0], st.Members[1]
	if b.Role() != intents.RoleStandby || ma.Node != "a" || ma.Role != intents.RoleActive || mb.Role != intents.RoleStandby ||
		len(st.Active) != 1 || st.Active[0] != "a" || mb.Leader != "a" {
		t.Fatalf("roles: %+v", st)
	}
	if mb.Seq != ma.Seq || ma.Seq == 0 || mb.LogSeq != mb.LogLast || mb.LogSeq != ma.LogSeq || mb.LagSeconds != 0 || mb.Since.IsZero() {
		t.Fatalf("the standby is not level with the active one: %+v", st)
	}
	if l := st.Log; l == nil || l.Stream != "COAGENT_LOG" || l.LastSeq != ma.LogLast || l.Leader == "" || l.WantReplicas != 1 || len(l.Replicas) != 0 {
		t.Fatalf("log: %+v", st.Log)
	}

	p = runBin(t, nil, "", "status", "--nats", url, "--wait", "300ms")
	lines := strings.Split(strings.TrimSuffix(p.stdout, "\n"), "\n")
	if p.status != 0 || p.stderr != "" || len(lines) != 4 || !strings.HasPrefix(lines[0], "NODE  ROLE     EVENTS") ||
		!strings.HasPrefix(lines[1], "a     active   ") || !strings.HasPrefix(lines[2], "b     standby  ") ||
		!strings.Contains(lines[2], " 0 groups ") || !strings.HasPrefix(lines[3], "log COAGENT_LOG: last group ") ||
		!strings.HasSuffix(lines[3], ", on a server alone, not replicated") {
		t.Fatalf("status:\n%s\nstderr %q, exit %d", p.stdout, p.stderr, p.status)
	}

	// Every coordinator stopped: the log is there, and nobody answers.
	for _, m := range []*cluster.Member{a, b} {
		if err := m.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// 2s: the server may learn of the members' unsubscriptions after it
	// has the request, and then it cannot say at once that nobody listens.
	p = runBin(t, nil, "", "status", "--nats", url, "--wait", "2s")
	if p.status != 1 || !strings.Contains(p.stderr, fmt.Sprintf("the log COAGENT_LOG is there (last group %d) but none of its coordinators answers", st.Log.LastSeq)) {
		t.Fatalf("status with every coordinator stopped: %+v", p)
	}
}

// TestStatusAlone: against a coordinator that runs alone, status shows
// it, as etcdctl's endpoint status shows any member: one row, role alone,
// its last event and since when it serves; exit 0.
func TestStatusAlone(t *testing.T) {
	url, stop := serve(t, filepath.Join(t.TempDir(), "data"))
	defer stop()
	submitOK(t, url, set(ulid.Make().String(), "w1", "report.title", "Q3"))
	p := runBin(t, nil, "", "status", "--nats", url, "-o", "json")
	var st coordinator.ClusterStatus
	if p.status != 0 || json.Unmarshal([]byte(p.stdout), &st) != nil || len(st.Members) != 1 {
		t.Fatalf("status -o json of a coordinator alone: %+v", p)
	}
	// The submit's events: its intent, the change and the decision, after
	// the rules the coordinator logs at start.
	if m := st.Members[0]; m.Role != coordinator.RoleAlone || m.Node != "" || m.Seq < 3 || m.Since.IsZero() || time.Since(m.Since) > time.Minute ||
		len(st.Active) != 0 || st.Log != nil {
		t.Fatalf("status -o json of a coordinator alone: %s", p.stdout)
	}
	seq := st.Members[0].Seq
	p = runBin(t, nil, "", "status", "--nats", url)
	lines := strings.Split(strings.TrimSuffix(p.stdout, "\n"), "\n")
	if p.status != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "NODE  ROLE   EVENTS") ||
		!regexp.MustCompile(fmt.Sprintf(`^-     alone  %d +- +- +\d`, seq)).MatchString(lines[1]) ||
		p.stderr != "a coordinator alone, not in cluster mode: no standby, no replicated log\n" {
		t.Fatalf("status of a coordinator alone:\n%s\nstderr %q, exit %d", p.stdout, p.stderr, p.status)
	}
}

// TestStatusNotACluster: against no server, status says so and what to do.
func TestStatusNotACluster(t *testing.T) {
	url := "nats://" + freeAddr(t)
	p := runBin(t, nil, "", "status", "--nats", url)
	if p.status != 1 || p.stderr != "coagent: no NATS server at "+url+"\nstart one with 'coagent serve', or point at one with --nats URL or $NATS_URL\n" {
		t.Fatalf("status without a server: %+v", p)
	}
}

// TestStatusCluster: on a cluster of three NATS nodes, status asked of
// one node gathers the coordinators connected to the others, and names
// the nodes that hold the log: its leader and two current replicas.
func TestStatusCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := natstest.RunCluster(t, 3)
	a := startStatusMember(t, c.Servers[0].ClientURL(), "a", 3)
	natstest.CheckFor(t, 10*time.Second, "a active", func() error {
		if r := a.Role(); r != intents.RoleActive {
			return errors.New(r)
		}
		return nil
	})
	startStatusMember(t, c.Servers[2].ClientURL(), "b", 3)
	url := c.Servers[1].ClientURL()
	var st coordinator.ClusterStatus
	natstest.CheckFor(t, 10*time.Second, "two members, three current nodes of the log", func() error {
		p := runBin(t, nil, "", "status", "--nats", url, "-o", "json", "--wait", "300ms")
		st = coordinator.ClusterStatus{}
		if err := json.Unmarshal([]byte(p.stdout), &st); p.status != 0 || err != nil {
			return fmt.Errorf("%+v: %v", p, err)
		}
		if len(st.Members) != 2 || st.Log == nil || len(st.Log.Replicas) != 2 || !st.Log.Replicas[0].Current || !st.Log.Replicas[1].Current {
			return fmt.Errorf("%s", p.stdout)
		}
		return nil
	})
	leader := c.Servers[c.StreamLeader("COAGENT_LOG")].Name()
	var others []string
	for _, s := range c.Servers {
		if s.Name() != leader {
			others = append(others, s.Name())
		}
	}
	if l := st.Log; l.Cluster != "coagent" || l.Leader != leader || l.WantReplicas != 3 ||
		l.Replicas[0].Node != others[0] || l.Replicas[1].Node != others[1] {
		t.Fatalf("log %+v, want leader %s and replicas %v", l, leader, others)
	}
	if st.Members[0].Node != "a" || st.Members[1].Node != "b" || len(st.Active) != 1 || st.Active[0] != "a" {
		t.Fatalf("members %+v", st)
	}
	p := runBin(t, nil, "", "status", "--nats", url, "--wait", "300ms")
	want := fmt.Sprintf(", leader %s, replicas %s (current), %s (current)\n", leader, others[0], others[1])
	if p.status != 0 || !strings.HasSuffix(p.stdout, want) {
		t.Fatalf("status: exit %d, stdout\n%s\nwant a last line ending %q", p.status, p.stdout, want)
	}
}

// TestStatusGathers: status keeps every answer that comes within --wait,
// in node order whatever order they came in, leaves out one that is not a
// status, and with none active says so on stderr and exits 0. The answers
// come from one subscriber on the subject, in a known order, as members
// would in any.
func TestStatusGathers(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	sub, err := nc.Subscribe(intents.Subjects{Prefix: "p"}.Status(), func(m *nats.Msg) {
		for _, node := range []string{"n3", "n1"} {
			b, _ := json.Marshal(intents.MemberStatus{Node: node, Role: intents.RoleStandby, Leader: "n2", Seq: 7, LogSeq: 3, LogLast: 3})
			m.Respond(b)
		}
		m.Respond([]byte("not a status"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	p := runBin(t, nil, "", "status", "--nats", ns.ClientURL(), "--subject-prefix", "p", "-o", "json", "--wait", "300ms")
	var st coordinator.ClusterStatus
	if err := json.Unmarshal([]byte(p.stdout), &st); p.status != 0 || err != nil || len(st.Members) != 2 ||
		st.Members[0].Node != "n1" || st.Members[1].Node != "n3" || len(st.Active) != 0 || st.Log != nil ||
		!strings.Contains(p.stderr, "coagent: an answer on p.cluster.status that is not a coordinator's status, left out: \"not a status\"") ||
		!strings.Contains(p.stderr, "no active coordinator (a failover may be under way); the leadership key names n2\n") ||
		!strings.Contains(p.stderr, "there is no stream P_LOG") {
		t.Fatalf("status: %+v (%v)", p, err)
	}
}

// TestStatusTable: the table and the notes of what can be seen only for
// an instant: a standby behind, none active, two active, a replica behind.
func TestStatusTable(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	log := &coordinator.LogStatus{Stream: "COAGENT_LOG", LastSeq: 402, WantReplicas: 5, Cluster: "c", Leader: "n2",
		Replicas: []coordinator.LogReplica{{Node: "n1", Current: true}, {Node: "n3", Lag: 7, SeenSeconds: 1.25}}}
	for _, c := range []struct {
		name         string
		st           coordinator.ClusterStatus
		stdout, note string
	}{{
		name: "one active, a standby behind",
		st: coordinator.ClusterStatus{Active: []string{"n1"}, Log: log, Members: []intents.MemberStatus{
			{Node: "n1", Role: intents.RoleActive, Seq: 1204, LogSeq: 402, LogLast: 402, Since: now.Add(-123 * time.Second)},
			{Node: "n2", Role: intents.RoleStandby, Leader: "n1", Seq: 1204, LogSeq: 402, LogLast: 402, Since: now.Add(-301 * time.Second)},
			{Node: "n3", Role: intents.RoleStandby, Leader: "n1", Seq: 1180, LogSeq: 394, LogLast: 402, LagGroups: 8, LagSeconds: 0.43, Since: now.Add(-1500 * time.Millisecond)},
		}},
		stdout: "NODE  ROLE     EVENTS  LOG  LAG            SINCE\n" +
			"n1    active   1204    402  -              2m3s\n" +
			"n2    standby  1204    402  0 groups       5m1s\n" +
			"n3    standby  1180    394  8 groups 0.4s  1.5s\n" +
			"log COAGENT_LOG: last group 402, leader n2, replicas n1 (current), n3 (behind by 7 entries, seen 1.2s ago) (3 of 5 replicas placed)\n",
	}, {
		name: "a snapshot stored, loaded by one that joined, the log trimmed",
		st: coordinator.ClusterStatus{Active: []string{"n1"}, Log: &coordinator.LogStatus{Stream: "COAGENT_LOG", FirstSeq: 380, LastSeq: 402, WantReplicas: 3, Cluster: "c", Leader: "n2",
			Replicas: []coordinator.LogReplica{{Node: "n1", Current: true}, {Node: "n3", Current: true}}},
			Members: []intents.MemberStatus{
				{Node: "n1", Role: intents.RoleActive, Seq: 1204, LogSeq: 402, LogLast: 402, LogFirst: 380, Since: now.Add(-123 * time.Second),
					Snapshot: &intents.SnapshotStatus{Seq: 1150, LogSeq: 380, Stored: now.Add(-90 * time.Second)}},
				{Node: "n2", Role: intents.RoleStandby, Leader: "n1", Seq: 1204, LogSeq: 402, LogLast: 402, LogFirst: 380, Since: now.Add(-301 * time.Second)},
				{Node: "n4", Role: intents.RoleStandby, Leader: "n1", Seq: 1204, LogSeq: 402, LogLast: 402, LogFirst: 380, Since: now.Add(-5 * time.Second),
					Snapshot: &intents.SnapshotStatus{Seq: 1150, LogSeq: 380, Stored: now.Add(-90 * time.Second)}},
			}},
		stdout: "NODE  ROLE     EVENTS  LOG  LAG       SINCE  SNAPSHOT\n" +
			"n1    active   1204    402  -         2m3s   event 1150 (log 380) 1m30s ago\n" +
			"n2    standby  1204    402  0 groups  5m1s   -\n" +
			"n4    standby  1204    402  0 groups  5s     event 1150 (log 380) 1m30s ago\n" +
			"log COAGENT_LOG: last group 402, first 380 (trimmed below it), leader n2, replicas n1 (current), n3 (current)\n",
	}, {
		name: "none active",
		st: coordinator.ClusterStatus{Active: []string{}, Log: &coordinator.LogStatus{Stream: "COAGENT_LOG", LastSeq: 9, WantReplicas: 3, Cluster: "c", Replicas: []coordinator.LogReplica{{Node: "n1", Offline: true}}},
			Members: []intents.MemberStatus{{Node: "n2", Role: intents.RoleStandby, Leader: "n1", Seq: 30, LogSeq: 9, LogLast: 9}}},
		stdout: "NODE  ROLE     EVENTS  LOG  LAG       SINCE\n" +
			"n2    standby  30      9    0 groups  -\n" +
			"log COAGENT_LOG: last group 9, no leader (an election may be under way), replicas n1 (offline)\n",
		note: "no active coordinator (a failover may be under way); the leadership key names n1\n",
	}, {
		name: "two active, one name twice, no log",
		st: coordinator.ClusterStatus{Active: []string{"n1", "n2"}, Members: []intents.MemberStatus{
			{Node: "n1", Role: intents.RoleActive, Seq: 5, LogSeq: 2, LogLast: 2},
			{Node: "n2", Role: intents.RoleActive, Seq: 5, LogSeq: 2, LogLast: 2},
			{Node: "n2", Role: intents.RoleStandby, Seq: 5, LogSeq: 2, LogLast: 2}}},
		stdout: "NODE  ROLE     EVENTS  LOG  LAG       SINCE\n" +
			"n1    active   5       2    -         -\n" +
			"n2    active   5       2    -         -\n" +
			"n2    standby  5       2    0 groups  -\n" +
			"log COAGENT_LOG: no such stream\n",
		note: "2 coordinators say they are active (n1, n2): one is being deposed, which lasts an instant; ask again\n" +
			"more than one coordinator answers as node n2: give each its own name\n" +
			"there is no stream COAGENT_LOG: the coordinators that answered do not log to it\n",
	}} {
		var out, note bytes.Buffer
		if err := printStatus(&out, c.st, "COAGENT_LOG", now); err != nil {
			t.Fatal(err)
		}
		statusNotes(&note, c.st, "COAGENT_LOG")
		if out.String() != c.stdout || note.String() != c.note {
			t.Errorf("%s: stdout\n%s\nwant\n%s\nstderr %q\nwant   %q", c.name, out.String(), c.stdout, note.String(), c.note)
		}
	}
}

// TestStatusUsage: a --wait that cannot gather anything is a usage error.
func TestStatusUsage(t *testing.T) {
	_, errOut, err := runCmd(t, "", "status", "--wait", "0s")
	if !errors.Is(err, errUsage) || !strings.Contains(errOut, "--wait 0s: want a duration above 0") {
		t.Fatalf("status --wait 0s: %v, %q", err, errOut)
	}
}

// startActiveWithIncrements starts member a on the server at url, waits
// until it is active, and has it decide three increments of c.n, so that
// its log holds something; it returns a and a connection of the test's.
func startActiveWithIncrements(t *testing.T, ns *server.Server, url string) (*cluster.Member, *nats.Conn) {
	t.Helper()
	a := startStatusMember(t, url, "a", 1)
	natstest.CheckFor(t, 5*time.Second, "a active", func() error {
		if r := a.Role(); r != intents.RoleActive {
			return errors.New(r)
		}
		return nil
	})
	nc := natstest.Connect(t, ns)
	for range 3 {
		body := fmt.Sprintf(`{"id":%q,"agent":"w","kind":"apply","writes":[{"path":"c.n","op":"incr","value":1}]}`, ulid.Make().String())
		m, err := nc.Request(intents.Subjects{}.Submit(""), []byte(body), 5*time.Second)
		if err != nil || !strings.Contains(string(m.Data), `"applied"`) {
			t.Fatalf("submit: %v %v", m, err)
		}
	}
	return a, nc
}
