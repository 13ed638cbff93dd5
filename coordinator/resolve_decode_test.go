package coordinator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
)

// The tests of this file see the coordinator only through the wire, as a
// client in any language would, so they live outside the package.

// arbiter.resolve decodes its body as strictly as an intent is decoded: a
// replacement naming its path twice (the last would have won) or a field in
// another case is refused as invalid, naming the field, and the case stays
// open for a resolution that is well formed.
func TestArbiterResolveStrict(t *testing.T) {
	ns := natstest.Run(t)
	coordtest.Start(t, ns, coordinator.Options{})
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	sub, err := nc.SubscribeSync(subj.Decisions("w2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Request(subj.API(intents.APISubmit), []byte(`{"id":"`+ulid.Make().String()+`","agent":"w1","kind":"propose","writes":[{"path":"doc.x","op":"set"}]}`), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	esc := ulid.Make().String()
	nc.Publish(subj.Intents("w2"), []byte(`{"id":"`+esc+`","agent":"w2","kind":"apply","on_conflict":"escalate","writes":[{"path":"doc.x","op":"set","value":1}]}`))
	if d := natstest.Next[intents.Decision](t, sub); d.Outcome != intents.OutcomeEscalated {
		t.Fatalf("escalate: %+v", d)
	}
	resolve := func(replacement string) (code, detail string) {
		t.Helper()
		resp, err := nc.Request(subj.API(intents.APIArbiterResolve), []byte(`{"escalation":"`+esc+`","arbiter":"judge","rationale":"r",
			"replacement":`+replacement+`}`), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Get(micro.ErrorCodeHeader), resp.Header.Get(micro.ErrorHeader)
	}
	for _, c := range []struct{ replacement, detail string }{
		{`{"id":"` + ulid.Make().String() + `","agent":"judge","kind":"apply","writes":[{"path":"doc.x","op":"set","value":2,"path":"secret.x"}]}`,
			"arbiter.resolve: resolution field replacement.writes[0].path: duplicate member name"},
		{`{"id":"` + ulid.Make().String() + `","Agent":"judge","kind":"apply","writes":[{"path":"doc.x","op":"set","value":2}]}`,
			"arbiter.resolve: resolution field replacement.Agent: unknown field"},
	} {
		code, detail := resolve(c.replacement)
		if code != string(intents.ReasonInvalid) || detail != c.detail {
			t.Errorf("resolve with %s: %s %q, want invalid %q", c.replacement, code, detail, c.detail)
		}
	}
	repl := ulid.Make().String()
	if code, detail := resolve(`{"id":"` + repl + `","agent":"judge","kind":"apply","writes":[{"path":"doc.x","op":"set","value":2}]}`); code != "" {
		t.Fatalf("a well-formed resolution: %s %s", code, detail)
	}
	if d := natstest.Next[intents.Decision](t, sub); d.Intent != esc || !strings.Contains(d.Detail, repl) {
		t.Fatalf("escalated intent after the resolution: %+v", d)
	}
}
