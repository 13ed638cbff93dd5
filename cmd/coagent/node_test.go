package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
)

// TestReadNode: with --node, `coagent state`, `coagent log` and `coagent
// txn list` ask that coordinator of a cluster, a standby too, and say on
// stderr which node answered, in which role and at which event; a node
// nobody runs is named in the error; a bad name is a usage error.
func TestReadNode(t *testing.T) {
	ns := natstest.Run(t)
	url := ns.ClientURL()
	a := startStatusMember(t, url, "a", 1)
	natstest.CheckFor(t, 5*time.Second, "a active", func() error {
		if r := a.Role(); r != intents.RoleActive {
			return errors.New(r)
		}
		return nil
	})
	startStatusMember(t, url, "b", 1)
	nc := natstest.Connect(t, ns)
	submit := func(body string) {
		t.Helper()
		m, err := nc.Request(intents.Subjects{}.Submit(""), []byte(body), 5*time.Second)
		if err != nil || m.Header.Get(micro.ErrorCodeHeader) != "" {
			t.Fatalf("submit %s: %v %v", body, m, err)
		}
	}
	for range 3 {
		submit(fmt.Sprintf(`{"id":%q,"agent":"w","kind":"apply","writes":[{"path":"c.n","op":"incr","value":1}]}`, ulid.Make().String()))
	}
	submit(fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"propose","lease_ms":600000,"writes":[{"path":"doc.x","op":"set"}]}`, ulid.Make().String()))

	// The standby answers once it has followed the log to the propose.
	var p proc
	natstest.CheckFor(t, 10*time.Second, "b caught up", func() error {
		p = runBin(t, nil, "", "txn", "list", "--node", "b", "--nats", url)
		if p.status != 0 || !strings.Contains(p.stdout, " w1 ") {
			return fmt.Errorf("%+v", p)
		}
		return nil
	})
	if !regexp.MustCompile(`^answered by node b \(standby\) at event \d+\n$`).MatchString(p.stderr) {
		t.Fatalf("txn list --node b: %+v", p)
	}
	at := strings.TrimSuffix(strings.TrimPrefix(p.stderr, "answered by node b (standby) at event "), "\n")

	p = runBin(t, nil, "", "state", "c.n", "--node", "b", "--nats", url)
	if p.status != 0 || !regexp.MustCompile(`^c\.n = 3 \(version 3, mod_rev \d+\)\nrev \d+\n$`).MatchString(p.stdout) ||
		p.stderr != "answered by node b (standby) at event "+at+"\n" {
		t.Fatalf("state --node b: %+v", p)
	}
	p = runBin(t, nil, "", "state", "--prefix", "c", "--node", "b", "--nats", url, "-o", "json")
	if p.status != 0 || !strings.Contains(p.stdout, `"c.n":{"exists":true,"value":3,`) || p.stderr != "answered by node b (standby) at event "+at+"\n" {
		t.Fatalf("state --prefix c --node b: %+v", p)
	}
	p = runBin(t, nil, "", "log", "--type", "change", "--node", "b", "--nats", url, "-o", "json")
	if p.status != 0 || strings.Count(p.stdout, "\n") != 3 || p.stderr != "answered by node b (standby) at event "+at+"\n" {
		t.Fatalf("log --type change --node b: %+v", p)
	}
	p = runBin(t, nil, "", "state", "c.n", "--node", "a", "--nats", url)
	if p.status != 0 || !strings.HasPrefix(p.stdout, "c.n = 3 ") || p.stderr != "answered by node a (active) at event "+at+"\n" {
		t.Fatalf("state --node a: %+v", p)
	}
	// Without --node the active one answers, and nothing more is said.
	p = runBin(t, nil, "", "state", "c.n", "--nats", url)
	if p.status != 0 || !strings.HasPrefix(p.stdout, "c.n = 3 ") || p.stderr != "" {
		t.Fatalf("state: %+v", p)
	}

	p = runBin(t, nil, "", "state", "c.n", "--node", "zz", "--nats", url)
	if p.status != 1 || !strings.Contains(p.stderr, "no coordinator named zz answers on coagent.cluster.zz.api.state.get\n") ||
		!strings.Contains(p.stderr, "coagent status") {
		t.Fatalf("state --node zz: %+v", p)
	}
	p = runBin(t, nil, "", "log", "--node", "zz", "--nats", url)
	if p.status != 1 || !strings.Contains(p.stderr, "no coordinator named zz answers on coagent.cluster.zz.api.log.query\n") {
		t.Fatalf("log --node zz: %+v", p)
	}
	for _, args := range [][]string{
		{"state", "c.n", "--node", "a.b"},
		{"log", "--node", "a b"},
		{"txn", "list", "--node", "*"},
	} {
		p = runBin(t, nil, "", append(args, "--nats", url)...)
		if p.status != 2 || !strings.Contains(p.stderr, fmt.Sprintf("--node %q: not a coordinator's name", args[len(args)-1])) {
			t.Fatalf("%v: %+v", args, p)
		}
	}
	if p = runBin(t, nil, "", "log", "--data", t.TempDir(), "--node", "b"); p.status != 2 || !strings.Contains(p.stderr, "--node is for a running server") {
		t.Fatalf("log --data --node: %+v", p)
	}
}
