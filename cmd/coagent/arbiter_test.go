package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

func TestArbiterUsage(t *testing.T) {
	for _, args := range [][]string{
		{"arbiter"},
		{"arbiter", "--policy", "random"},
		{"arbiter", "--policy", "first", "extra"},
	} {
		_, errOut, err := runCmd(t, "", args...)
		if !errors.Is(err, errUsage) || !strings.HasSuffix(errOut, "\nrun 'coagent arbiter --help' for usage\n") || strings.Count(errOut, "\n") != 2 {
			t.Errorf("%v: %v, %q", args, err, errOut)
		}
	}
	if _, errOut, _ := runCmd(t, "", "arbiter", "--policy", "random"); !strings.Contains(errOut, `unknown policy "random"`) {
		t.Errorf("unknown policy: %q", errOut)
	}
	if _, _, err := runCmd(t, "", "arbiter", "--policy", "first", "--name", "a.b"); err == nil || !strings.Contains(err.Error(), "not an agent name") {
		t.Errorf("bad name: %v", err)
	}
}

// `coagent arbiter --policy priority` against `coagent serve`: a case
// escalated to it is settled for the higher priority, both agents are
// told, and it stops on its context.
func TestArbiterCommand(t *testing.T) {
	url, stopServe := serve(t, filepath.Join(t.TempDir(), "data"))
	defer stopServe()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subj := intents.Subjects{}
	subs := map[string]*nats.Subscription{}
	for _, a := range []string{"w1", "w2"} {
		if subs[a], err = nc.SubscribeSync(subj.Decisions(a)); err != nil {
			t.Fatal(err)
		}
	}
	next := func(agent string) *intents.Decision {
		t.Helper()
		return natstest.Next[intents.Decision](t, subs[agent])
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"arbiter", "--policy", "priority", "--name", "judge", "--nats", url}, strings.NewReader(""), &out, &errOut)
	}()

	propose, esc := ulid.Make().String(), ulid.Make().String()
	nc.Publish(subj.Intents("w1"), []byte(`{"id":"`+propose+`","agent":"w1","kind":"propose","priority":1,"lease_ms":600000,"writes":[{"path":"doc.title","op":"set"}]}`))
	if d := next("w1"); d.Outcome != intents.OutcomeGranted {
		t.Fatalf("propose: %+v", d)
	}
	nc.Publish(subj.Intents("w2"), []byte(`{"id":"`+esc+`","agent":"w2","kind":"apply","priority":9,"on_conflict":"escalate","writes":[{"path":"doc.title","op":"set","value":"Q4"}]}`))
	if d := next("w2"); d.Outcome != intents.OutcomeEscalated {
		t.Fatalf("escalate: %+v", d)
	}
	if d := next("w1"); d.Intent != propose || d.Outcome != intents.OutcomeAborted || !strings.Contains(d.Detail, "preempted by arbiter judge: priority: ") {
		t.Fatalf("holder: %+v", d)
	}
	if d := next("w2"); d.Intent != esc || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("newcomer: %+v", d)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("arbiter: %v\n%s", err, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the arbiter did not stop")
	}
	if !strings.Contains(out.String(), "coagent: arbiter judge (policy priority) on nats://") || !strings.Contains(out.String(), "arbiter stopped") {
		t.Errorf("stdout: %q", out.String())
	}
	if !strings.Contains(errOut.String(), "msg=resolved") || !strings.Contains(errOut.String(), "escalation="+esc) {
		t.Errorf("stderr: %q", errOut.String())
	}
}
