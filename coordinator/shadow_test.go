package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
)

// Shadow rules end to end over NATS: a rule in warn mode warns the agent
// on the decision it receives, one in audit mode does not, a shadow file
// put in force through rules.set is decided too, and each divergence is a
// shadow event in the log and a count of coagent_shadow_divergences_total.
// The decisions are the enforced rules' throughout.
func TestShadowRulesOverNATS(t *testing.T) {
	ns := natstest.Run(t)
	dir := t.TempDir()
	svc := startService(t, ns, dir, Options{})
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	setRules := func(file, shadow string) {
		t.Helper()
		m := nats.NewMsg(subj.API(intents.APIRulesSet))
		m.Data = []byte(file)
		if shadow != "" {
			m.Header.Set(HeaderRulesShadow, shadow)
		}
		resp, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil || resp.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("rules.set %s: %v %s", file, err, resp.Data)
		}
	}
	submit := func(agent, id, path string) *intents.Decision {
		t.Helper()
		return natstest.Request[intents.Decision](t, nc, subj.Submit(agent),
			`{"id":"`+id+`","agent":"`+agent+`","kind":"apply","writes":[{"path":"`+path+`","op":"set","value":1}]}`)
	}
	setRules(`{"rules":[{"pattern":"docs.**","writers":["w1"],"mode":"warn"},{"pattern":"notes.**","writers":["w1"],"mode":"audit"}]}`, "")

	d := submit("w2", "01JD0000000000000000000001", "docs.a")
	if d.Outcome != intents.OutcomeApplied || len(d.Warnings) != 1 || d.Warnings[0].Rule != "rules[0]" || d.Warnings[0].WouldBe != "rejected:unauthorized" {
		t.Fatalf("a write the warn rule would refuse: %+v", d)
	}
	if d := submit("w2", "01JD0000000000000000000002", "notes.a"); d.Outcome != intents.OutcomeApplied || len(d.Warnings) != 0 {
		t.Fatalf("a write the audit rule would refuse: %+v", d)
	}
	if d := submit("w1", "01JD0000000000000000000003", "docs.b"); d.Outcome != intents.OutcomeApplied || len(d.Warnings) != 0 {
		t.Fatalf("a write the rules agree on: %+v", d)
	}
	// A shadow file that would refuse w1 on tasks, in warn mode; the rules
	// in force do not change.
	setRules(`{"rules":[{"pattern":"tasks.**","writers":["lead"]}]}`, intents.ModeWarn)
	rec, err := svc.Rules(t.Context())
	if err != nil || len(rec.Shadow) == 0 || rec.ShadowMode != intents.ModeWarn || rec.Hash == rec.ShadowHash {
		t.Fatalf("the rules after a shadow file: %+v %v", rec, err)
	}
	d = submit("w1", "01JD0000000000000000000004", "tasks.t1")
	if d.Outcome != intents.OutcomeApplied || len(d.Warnings) != 1 || d.Warnings[0].Rule != "rules[0]" {
		t.Fatalf("a write the shadow file would refuse: %+v", d)
	}
	// The output stage counts a group after answering it and before it
	// answers the next: this answer means the ones before are counted.
	submit("lead", "01JD0000000000000000000005", "other.x")
	got := map[[2]string]float64{}
	for _, m := range scrape(t, svc.Registry())["coagent_shadow_divergences_total"].GetMetric() {
		var k [2]string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "rule":
				k[0] = l.GetValue()
			case "would_be":
				k[1] = l.GetValue()
			}
		}
		got[k] = m.GetCounter().GetValue()
	}
	if len(got) != 2 || got[[2]string{"rules[0]", "rejected:unauthorized"}] != 2 || got[[2]string{"rules[1]", "rejected:unauthorized"}] != 1 {
		t.Fatalf("coagent_shadow_divergences_total: %v", got)
	}

	if err := svc.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	log, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	var shadows []string
	err = log.Scan(1, log.LastSeq(), func(ev *intents.Event) error {
		if sh := ev.Shadow; sh != nil {
			shadows = append(shadows, ev.Intent+" "+sh.Mode+" "+sh.Rule+" "+sh.Decided+" "+sh.WouldBeKey())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"01JD0000000000000000000001 warn rules[0] applied rejected:unauthorized",
		"01JD0000000000000000000002 audit rules[1] applied rejected:unauthorized",
		"01JD0000000000000000000004 warn rules[0] applied rejected:unauthorized",
	}
	if len(shadows) != len(want) {
		t.Fatalf("shadow events:\n%v\nwant\n%v", shadows, want)
	}
	for i := range want {
		if shadows[i] != want[i] {
			t.Fatalf("shadow event %d: %s, want %s", i, shadows[i], want[i])
		}
	}
}
