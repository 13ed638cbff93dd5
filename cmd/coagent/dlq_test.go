package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// A case no arbiter resolves by its deadline is rejected by the fallback
// and kept as a dead letter; dlq retry sends its intent again under a new
// id, which escalates again while the conflict stands.
func TestDeadLetters(t *testing.T) {
	url, stop := serve(t, filepath.Join(t.TempDir(), "data"), "--arbiter-timeout", "300ms")
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subj := intents.Subjects{}
	sub, err := nc.SubscribeSync(subj.Decisions("w2"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	next := func() *intents.Decision {
		t.Helper()
		return natstest.Next[intents.Decision](t, sub)
	}
	holder := `{"id":"` + ulid.Make().String() + `","agent":"w1","kind":"propose","lease_ms":600000,"writes":[{"path":"doc.x","op":"set"}]}`
	if out, _, err := runCmd(t, holder, "submit", "--nats", url, "-"); err != nil {
		t.Fatalf("propose: %s %v", out, err)
	}
	esc := ulid.Make().String()
	nc.Publish(subj.Intents("w2"), []byte(`{"id":"`+esc+`","agent":"w2","kind":"apply","on_conflict":"escalate","writes":[{"path":"doc.x","op":"set","value":1}]}`))
	if d := next(); d.Outcome != intents.OutcomeEscalated {
		t.Fatalf("escalate: %+v", d)
	}
	if d := next(); d.Reason != intents.ReasonArbiterRejected || d.Intent != esc {
		t.Fatalf("fallback: %+v", d)
	}
	// The dead letter is published once the fallback's batch is durable;
	// a consumer of the stream sees it once it is stored.
	dead, err := js.OrderedConsumer(context.Background(), subj.Stream(intents.StreamDLQ), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Next(jetstream.FetchMaxWait(10 * time.Second)); err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	out, _, err := runCmd(t, "", "dlq", "--nats", url, "list")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^ID +DEADLINE +AGENT +INTENT +CONFLICTS\n` + esc + ` +\S+ +w2 +apply +write-write doc\.x with w1`).MatchString(out) {
		t.Fatalf("dlq list: %q", out)
	}
	if out, _, err = runCmd(t, "", "dlq", "--nats", url, "show", esc); err != nil || !strings.Contains(out, `"deadline"`) {
		t.Fatalf("dlq show: %q %v", out, err)
	}
	if out, _, err = runCmd(t, "", "dlq", "--nats", url, "retry", esc); err != nil || !strings.Contains(out, "retried "+esc) {
		t.Fatalf("dlq retry: %q %v", out, err)
	}
	if d := next(); d.Outcome != intents.OutcomeEscalated || d.Intent == esc {
		t.Fatalf("the retried intent: %+v, want a new escalation", d)
	}
	if out, _, _ = runCmd(t, "", "dlq", "--nats", url, "list"); strings.Contains(out, esc) {
		t.Fatalf("the dead letter stays after retry: %q", out)
	}
}
