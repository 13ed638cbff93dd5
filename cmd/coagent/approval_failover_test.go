package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/oklog/ulid/v2"
)

// An approval case outlives the active coordinator: lina approves, the
// active coordinator is SIGKILLed, another takes over from the replicated
// log, and there lina's vote is known (a second one is refused) and luc's
// makes the quorum of two and applies the intent.
func TestApprovalAcrossFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 NATS nodes and 3 coordinators as processes")
	}
	c := startFailoverCluster(t, 3)
	active := c.activeCoord(30 * time.Second)
	urls := strings.Join(c.urls, ",")
	rulesFile := filepath.Join(c.dir, "rules.json")
	writeFile(t, rulesFile, `{"agents":{"lina":{"roles":["lead"]},"luc":{"roles":["lead"]}},
		"rules":[{"pattern":"deploy.**","approve":{"by":["role:lead"],"quorum":2,"timeout":"10m"}}]}`)
	if p := runBin(t, nil, "", "rules", "set", rulesFile, "--nats", urls); p.status != 0 {
		t.Fatalf("rules set: %+v", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dev := c.connectAgent("dev", agents.WithResend(300*time.Millisecond))
	lina := c.connectAgent("lina", agents.WithResend(300*time.Millisecond))
	luc := c.connectAgent("luc", agents.WithResend(300*time.Millisecond))
	in, err := intents.Apply("release").Set("deploy.web", 7).Build()
	if err != nil {
		t.Fatal(err)
	}
	in.ID = ulid.Make().String()
	final := make(chan *intents.Decision, 1)
	go func() {
		d, err := dev.Submit(ctx, in)
		if err != nil {
			t.Errorf("dev's release: %v", err)
		}
		final <- d
	}()
	natstest.CheckFor(t, 30*time.Second, "the approval case", func() error {
		cs, err := lina.ApprovalCases(ctx)
		if err != nil || len(cs) != 1 || cs[0].ID != in.ID {
			return fmt.Errorf("open cases: %v %v", cs, err)
		}
		return nil
	})
	if r, err := lina.Approve(ctx, in.ID, "the release notes are in"); err != nil || r.Decision != nil {
		t.Fatalf("lina's approval: %+v %v", r, err)
	}
	active.n.kill(t)
	next := c.activeCoord(30 * time.Second)
	if next.name == active.name {
		t.Fatalf("%s still active after its kill", next.name)
	}
	// The new active coordinator knows lina's vote: it is in the log.
	var api *agents.APIError
	natstest.CheckFor(t, 30*time.Second, "lina's vote known to "+next.name, func() error {
		_, err := lina.Approve(ctx, in.ID, "again")
		if errors.As(err, &api) && strings.Contains(api.Description, "has voted on case "+in.ID+" already") {
			return nil
		}
		return fmt.Errorf("lina's second approval: %v", err)
	})
	r, err := luc.Approve(ctx, in.ID, "fine by me")
	if err != nil || r.Decision == nil || r.Decision.Outcome != intents.OutcomeApplied {
		t.Fatalf("luc's approval on %s: %+v %v", next.name, r, err)
	}
	select {
	case d := <-final:
		if d == nil || d.Outcome != intents.OutcomeApplied {
			t.Fatalf("dev's decision: %+v", d)
		}
	case <-ctx.Done():
		t.Fatal("dev's Submit never had its final decision")
	}
	st, err := luc.Read(ctx, "deploy.web")
	if err != nil || string(st.Values["deploy.web"].Value) != "7" {
		t.Fatalf("deploy.web on %s: %+v %v", next.name, st, err)
	}
}
