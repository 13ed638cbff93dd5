package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/oklog/ulid/v2"
)

// Under --auth a person or program approves as the agent it connected as:
// RunApprover votes on the cases its agent may vote on, the quorum's last
// approval applies the intent, and a vote in another agent's name is
// refused, as is one by an agent the rule does not name.
func TestApproverOverTheWire(t *testing.T) {
	w := newAdminWorld(t, map[string][]string{"admin": {natsauth.RoleAdmin}, "lina": {"lead"}, "luc": {"lead"}, "dev": {"writer"}})
	ctx := ctxFor(t, 60*time.Second)
	anc, aperms := w.connect("admin")
	reply, err := rulesSet(ctx, anc, aperms, `{"rules":[{"pattern":"deploy.**","approve":{"by":["role:lead"],"quorum":2,"timeout":"10m"}}]}`)
	if err != nil || reply.Header.Get("Nats-Service-Error") != "" {
		t.Fatalf("rules.set: %v %v", reply, err)
	}
	client := func(agent string) *agents.Client {
		nc, _ := w.connect(agent)
		c, err := agents.Connect(ctx, nc, agent)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dev, lina, luc := client("dev"), client("lina"), client("luc")

	// lina approves whatever she is asked, by RunApprover.
	runCtx, stop := context.WithCancel(ctx)
	asked := make(chan *intents.Escalation, 4)
	ran := make(chan error, 1)
	go func() {
		ran <- lina.RunApprover(runCtx, func(_ context.Context, c *intents.Escalation) (string, string, error) {
			asked <- c
			return intents.VerdictApprove, "the diff is what the ticket says", nil
		})
	}()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("RunApprover: %v", err)
		}
	}()

	// dev's Submit waits for the final decision, past the interim
	// escalated one.
	in, err := intents.Apply("release").Set("deploy.web", map[string]any{"version": 7}).Build()
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
	var c *intents.Escalation
	select {
	case c = <-asked:
	case <-ctx.Done():
		t.Fatal("the approver was never asked")
	}
	if c.ID != in.ID || c.Approval == nil || c.Approval.Quorum != 2 || c.Approval.After["deploy.web"].Exists != true {
		t.Fatalf("the case the approver saw: %+v", c)
	}
	// luc may not vote in lina's name, nor dev on its own intent; an
	// agent the rule does not name is refused too.
	var api *agents.APIError
	if _, err := luc.Approve(ctx, "not-a-case", ""); !errors.As(err, &api) {
		t.Fatalf("a vote on no case: %v", err)
	}
	lnc, _ := w.connect("luc")
	forged, err := lnc.RequestWithContext(ctx, intents.Subjects{}.API(intents.APICaseVote),
		[]byte(`{"case":"`+in.ID+`","agent":"lina","verdict":"deny","rationale":"forged"}`))
	if err != nil || !strings.Contains(forged.Header.Get("Nats-Service-Error"), "agent luc may not vote as agent lina") {
		t.Fatalf("luc's vote in lina's name: %v %v", forged, err)
	}
	if _, err := dev.Approve(ctx, in.ID, "mine"); !errors.As(err, &api) || api.Code != string(intents.ReasonUnauthorized) {
		t.Fatalf("dev's approval of its own intent: %v", err)
	}
	admin, err := agents.Connect(ctx, anc, "admin")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Approve(ctx, in.ID, ""); !errors.As(err, &api) || !strings.Contains(api.Description, "lets only role:lead") {
		t.Fatalf("the admin's approval: %v", err)
	}
	// The second approval decides it: the vote's result carries the
	// decision, which dev's Submit waits for as well.
	natstest.CheckFor(t, 20*time.Second, "lina's vote", func() error {
		cs, err := luc.ApprovalCases(ctx)
		if err != nil || len(cs) != 1 || len(cs[0].Approval.Votes) != 1 || cs[0].Approval.Votes[0].Agent != "lina" {
			return fmt.Errorf("the open approval cases: %+v %v", cs, err)
		}
		return nil
	})
	r, err := luc.Approve(ctx, in.ID, "fine by me")
	if err != nil || r.Decision == nil || r.Decision.Outcome != intents.OutcomeApplied {
		t.Fatalf("luc's approval: %+v %v", r, err)
	}
	if d := <-final; d == nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("dev's decision: %+v", d)
	}
	st, err := dev.Read(ctx, "deploy.web")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Version int }
	if err := st.Values["deploy.web"].Decode(&got); err != nil || got.Version != 7 {
		t.Fatalf("deploy.web after the approvals: %+v %v", st.Values["deploy.web"], err)
	}
}

// An agent asks a question and waits; another answers it (the answer the
// schema refuses first, which changes nothing); the asker's Ask returns
// the answer, written where it said.
func TestAskAndAnswer(t *testing.T) {
	w := newWorld(t, coordinator.Options{})
	ctx := ctxFor(t, 60*time.Second)
	asker, ana := w.client("w1"), w.client("ana")
	got := make(chan json.RawMessage, 1)
	go func() {
		v, err := asker.Ask(ctx, "plan.budget", intents.Ask{Question: "What is the budget?", Schema: json.RawMessage(`{"type":"number","minimum":0}`), By: []string{"ana"}})
		if err != nil {
			t.Errorf("Ask: %v", err)
		}
		got <- v
	}()
	var cases []*intents.Escalation
	natstest.CheckFor(t, 20*time.Second, "the question", func() error {
		var err error
		if cases, err = ana.ApprovalCases(ctx); err != nil || len(cases) != 1 {
			return fmt.Errorf("open cases: %v %v", cases, err)
		}
		return nil
	})
	c := cases[0]
	if c.Kind != intents.CaseInput || c.Approval.Ask == nil || c.Approval.Ask.Question != "What is the budget?" {
		t.Fatalf("the input case: %+v", c)
	}
	var api *agents.APIError
	if _, err := ana.Answer(ctx, c.ID, "lots", ""); !errors.As(err, &api) || !strings.Contains(api.Description, "does not satisfy the question's schema") {
		t.Fatalf("an answer the schema refuses: %v", err)
	}
	r, err := ana.Answer(ctx, c.ID, 12000, "from the plan")
	if err != nil || r.Decision == nil || r.Decision.Outcome != intents.OutcomeApplied {
		t.Fatalf("ana's answer: %+v %v", r, err)
	}
	if v := <-got; string(v) != "12000" {
		t.Fatalf("the asker got %s, want 12000", v)
	}
}
