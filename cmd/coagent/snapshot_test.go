package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
)

// snapshotLine is the line `coagent snapshot` prints.
var snapshotLine = regexp.MustCompile(`^snapshot at event (\d+) \(log message (\d+)\) stored by (\w+); COAGENT_LOG now starts at message (\d+)\n$`)

// TestSnapshotCmd runs `coagent snapshot` against no coordinator of a
// cluster, then against two on one server: the active one stores a
// snapshot and trims the log below it (both are current), and `coagent
// status` then shows the snapshot in a column and the log's first group.
func TestSnapshotCmd(t *testing.T) {
	ns := natstest.Run(t)
	url := ns.ClientURL()

	// Nobody subscribes: a failure at once, naming the subject and
	// pointing at status.
	start := time.Now()
	p := runBin(t, nil, "", "snapshot", "--nats", url)
	if p.status != 1 || p.stdout != "" ||
		!strings.Contains(p.stderr, "coagent: snapshot: no active coordinator of a cluster answers on coagent.cluster.snapshot\n") ||
		!strings.Contains(p.stderr, "coagent status shows the cluster's coordinators") {
		t.Fatalf("snapshot without coordinators: %+v", p)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("snapshot without coordinators took %s", d)
	}

	_, nc := startActiveWithIncrements(t, ns, url)
	startStatusMember(t, url, "b", 1)
	status := func() coordinator.ClusterStatus {
		t.Helper()
		p := runBin(t, nil, "", "status", "--nats", url, "-o", "json", "--wait", "300ms")
		var st coordinator.ClusterStatus
		if err := json.Unmarshal([]byte(p.stdout), &st); p.status != 0 || err != nil {
			t.Fatalf("status: %+v: %v", p, err)
		}
		return st
	}
	natstest.CheckFor(t, 10*time.Second, "b caught up", func() error {
		st := status()
		if len(st.Members) != 2 || st.Members[1].LogSeq != st.Members[1].LogLast || st.Members[1].Seq != st.Members[0].Seq {
			return fmt.Errorf("%+v", st.Members)
		}
		return nil
	})
	// No snapshot yet: the table is as before, no SNAPSHOT column, the
	// log's line without a first group.
	p = runBin(t, nil, "", "status", "--nats", url, "--wait", "300ms")
	if p.status != 0 || strings.Contains(p.stdout, "SNAPSHOT") || strings.Contains(p.stdout, "first") {
		t.Fatalf("status before a snapshot:\n%s", p.stdout)
	}

	p = runBin(t, nil, "", "snapshot", "--nats", url)
	got := snapshotLine.FindStringSubmatch(p.stdout)
	if p.status != 0 || p.stderr != "" || got == nil {
		t.Fatalf("snapshot: %+v", p)
	}
	seq, _ := strconv.ParseUint(got[1], 10, 64)
	logSeq, _ := strconv.ParseUint(got[2], 10, 64)
	first, _ := strconv.ParseUint(got[4], 10, 64)
	st := status()
	ma, mb := st.Members[0], st.Members[1]
	if got[3] != "a" || seq != ma.Seq || logSeq < 2 || first != logSeq || st.Log == nil || st.Log.FirstSeq != first ||
		ma.LogFirst != first || ma.Snapshot == nil || ma.Snapshot.Seq != seq || ma.Snapshot.LogSeq != logSeq || mb.Snapshot != nil {
		t.Fatalf("snapshot said %q; status %+v, log %+v, a's snapshot %+v", p.stdout, st.Members, st.Log, ma.Snapshot)
	}

	p = runBin(t, nil, "", "status", "--nats", url, "--wait", "300ms")
	lines := strings.Split(strings.TrimSuffix(p.stdout, "\n"), "\n")
	rowA := regexp.MustCompile(fmt.Sprintf(`^a +active .*  event %d \(log %d\) [0-9.]+s ago$`, seq, logSeq))
	if p.status != 0 || len(lines) != 4 || !strings.HasSuffix(lines[0], "  SINCE  SNAPSHOT") || !rowA.MatchString(lines[1]) ||
		!strings.HasPrefix(lines[2], "b ") || !strings.HasSuffix(lines[2], "  -") ||
		!strings.HasPrefix(lines[3], fmt.Sprintf("log COAGENT_LOG: last group %d, first %d (trimmed below it)", st.Log.LastSeq, first)) {
		t.Fatalf("status after a snapshot:\n%s\nstderr %q", p.stdout, p.stderr)
	}

	// -o json: the coordinator's answer as it is.
	p = runBin(t, nil, "", "snapshot", "--nats", url, "-o", "json")
	var r intents.SnapshotReply
	if err := json.Unmarshal([]byte(p.stdout), &r); p.status != 0 || err != nil || r.Node != "a" || r.Seq < seq || r.LogFirst != r.LogSeq || r.Stored.IsZero() {
		t.Fatalf("snapshot -o json: %+v (%v)", p, err)
	}

	// The coordinator's error reply is the command's error.
	sub, err := nc.QueueSubscribe(intents.Subjects{Prefix: "p"}.ClusterSnapshot(), "q", func(m *nats.Msg) {
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set("Nats-Service-Error-Code", "unavailable")
		reply.Header.Set("Nats-Service-Error", "coordinator: snapshot: the log holds no event")
		m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	p = runBin(t, nil, "", "snapshot", "--nats", url, "--subject-prefix", "p")
	if p.status != 1 || p.stderr != "coagent: snapshot: unavailable: coordinator: snapshot: the log holds no event\n" {
		t.Fatalf("snapshot refused: %+v", p)
	}
}

// TestSnapshotUsage: a --timeout that cannot wait is a usage error.
func TestSnapshotUsage(t *testing.T) {
	_, errOut, err := runCmd(t, "", "snapshot", "--timeout", "0s")
	if !errors.Is(err, errUsage) || !strings.Contains(errOut, "--timeout 0s: want a duration above 0") {
		t.Fatalf("snapshot --timeout 0s: %v, %q", err, errOut)
	}
}
