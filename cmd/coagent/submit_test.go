package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// TestSubmitWhileUnavailable: a coordinator whose only submit slot is
// taken answers unavailable; coagent submit sends the same intent again
// until there is room, says so on stderr, and exits 0 with the decision.
func TestSubmitWhileUnavailable(t *testing.T) {
	ns := natstest.Run(t)
	coordtest.Start(t, ns, coordinator.Options{MaxSubmits: 1})
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}

	reply, err := nc.Request(subj.Submit(""), []byte(`{"id":"`+ulid.Make().String()+`","agent":"h","kind":"propose","writes":[{"path":"doc.y","op":"set"}]}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var grant intents.Decision
	if err := json.Unmarshal(reply.Data, &grant); err != nil || grant.Outcome != intents.OutcomeGranted {
		t.Fatalf("propose: %s %v", reply.Data, err)
	}
	// A waiter's submit takes the slot for as long as it waits.
	events, err := nc.SubscribeSync(subj.Events(intents.EventDecision))
	if err != nil {
		t.Fatal(err)
	}
	// Live events go out only to a subscription the server knows of.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waiter := ulid.Make().String()
	held := nats.NewMsg(subj.Submit(""))
	held.Data = []byte(`{"id":"` + waiter + `","agent":"w","kind":"apply","on_conflict":"wait","wait_ms":30000,"writes":[{"path":"doc.y","op":"set","value":1}]}`)
	held.Header.Set(intents.HeaderWait, "30000")
	heldDone := make(chan error, 1)
	go func() {
		_, err := nc.RequestMsg(held, 40*time.Second)
		heldDone <- err
	}()
	for {
		ev := natstest.Next[intents.Event](t, events)
		if ev.Intent == waiter && ev.Decision != nil && ev.Decision.Outcome == intents.OutcomeQueued {
			break
		}
	}

	// Every submit request, as the coordinator's subject sees it.
	spy, err := nc.SubscribeSync(subj.Submit(""))
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	id := ulid.Make().String()
	type result struct {
		out, stderr string
		err         error
	}
	done := make(chan result, 1)
	go func() {
		out, stderr, err := runCmd(t, `{"id":"`+id+`","agent":"c","kind":"apply","writes":[{"path":"doc.z","op":"set","value":1}]}`,
			"submit", "--nats", ns.ClientURL(), "--timeout", "20s", "-o", "json", "-")
		done <- result{out, stderr, err}
	}()
	for sent := 0; sent < 2; {
		m, err := spy.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("coagent submit sent its intent %d times, want it sent again: %v", sent, err)
		}
		if strings.Contains(string(m.Data), id) {
			sent++
		}
	}
	// The holder aborts through the stream, which takes no slot: the waiter
	// is applied and its submit answered, and the slot is free.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	abort := ulid.Make().String()
	if _, err := js.Publish(context.Background(), subj.Intents("h"),
		fmt.Appendf(nil, `{"id":%q,"agent":"h","kind":"abort","txn":%q,"fence":%d}`, abort, grant.Txn, grant.Fence), jetstream.WithMsgID(abort)); err != nil {
		t.Fatal(err)
	}
	if err := <-heldDone; err != nil {
		t.Fatalf("the waiter's submit: %v", err)
	}
	r := <-done
	var d intents.Decision
	if r.err != nil || json.Unmarshal([]byte(r.out), &d) != nil || d.Intent != id || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("coagent submit: %q, %v (stderr %q)", r.out, r.err, r.stderr)
	}
	if !strings.Contains(r.stderr, "unavailable") || !strings.Contains(r.stderr, "sending the same intent again") {
		t.Fatalf("stderr %q does not say the coordinator was unavailable", r.stderr)
	}
}

// TestSubmitMalformedAgent: a malformed intent sent with --agent is
// recorded as that agent's (log --agent finds it), and its decision,
// which has no intent id, is printed without a gap where the id would be.
func TestSubmitMalformedAgent(t *testing.T) {
	url, stop := serve(t, filepath.Join(t.TempDir(), "data"))
	defer stop()
	for _, bad := range []string{`{not json`, `{"agent":"w1","kind":"apply","writes":[]}`} {
		p := runBin(t, nil, bad, "submit", "-", "--nats", url, "--agent", "w1")
		if p.status != 1 || !strings.HasPrefix(p.stdout, "rejected ") || strings.Contains(p.stdout, "  ") {
			t.Errorf("submit %s: %+v", bad, p)
		}
	}
	p := runBin(t, nil, "", "log", "--nats", url, "--agent", "w1", "--type", "intent")
	if p.status != 0 || strings.Count(p.stdout, " invalid: ") != 2 {
		t.Errorf("log --agent w1 --type intent: %+v", p)
	}
}

// TestSubmitWaitsForFinal: an intent that waits is answered queued when
// one request's wait ends; coagent submit asks again with the same id, up
// to --timeout, and prints the final decision once the holder aborts.
func TestSubmitWaitsForFinal(t *testing.T) {
	ns := natstest.Run(t)
	coordtest.Start(t, ns, coordinator.Options{})
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	reply, err := nc.Request(subj.Submit(""), []byte(`{"id":"`+ulid.Make().String()+`","agent":"h","kind":"propose","lease_ms":120000,"writes":[{"path":"doc.y","op":"set"}]}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var grant intents.Decision
	if err := json.Unmarshal(reply.Data, &grant); err != nil || grant.Outcome != intents.OutcomeGranted {
		t.Fatalf("propose: %s %v", reply.Data, err)
	}
	spy, err := nc.SubscribeSync(subj.Submit(""))
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	id := ulid.Make().String()
	type result struct {
		out, stderr string
		err         error
	}
	done := make(chan result, 1)
	go func() {
		out, stderr, err := runCmd(t, `{"id":"`+id+`","agent":"w","kind":"apply","on_conflict":"wait","wait_ms":120000,"writes":[{"path":"doc.y","op":"set","value":1}]}`,
			"submit", "--nats", ns.ClientURL(), "--timeout", "1m", "-")
		done <- result{out, stderr, err}
	}()
	// The second request of the intent is sent once the first one's wait
	// ended with the interim decision: the holder aborts after it.
	for sent := 0; sent < 2; {
		select {
		case r := <-done:
			t.Fatalf("coagent submit ended after %d requests: %q, %v (stderr %q)", sent, r.out, r.err, r.stderr)
		default:
		}
		m, err := spy.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("coagent submit sent its intent %d times, want it asked again: %v", sent, err)
		}
		if strings.Contains(string(m.Data), id) {
			sent++
		}
	}
	abort := ulid.Make().String()
	if _, err := nc.Request(subj.Submit(""), fmt.Appendf(nil, `{"id":%q,"agent":"h","kind":"abort","txn":%q,"fence":%d}`, abort, grant.Txn, grant.Fence), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || !strings.HasPrefix(r.out, "applied "+id+" rev ") || strings.Contains(r.out, "duplicate") ||
		!strings.Contains(r.stderr, "queued "+id+"; waiting up to --timeout 1m0s for its final decision") {
		t.Fatalf("coagent submit: %q, %v (stderr %q)", r.out, r.err, r.stderr)
	}
}
