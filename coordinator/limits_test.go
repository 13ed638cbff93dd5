package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
)

// TestHugeTraceparentIsClippedAndCounted: a traceparent header that cannot
// be used is noted on the intent's event by a short prefix and its length,
// not whole; and the header counts against limits.intent_bytes, so an
// intent whose header and body pass the limit together is refused as too
// large. A 900 KB header on a 150-byte intent was stored whole, past a
// limit of 2,048 bytes.
func TestHugeTraceparentIsClippedAndCounted(t *testing.T) {
	ns := natstest.Run(t)
	svc := startService(t, ns, t.TempDir(), Options{})
	nc := natstest.Connect(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	subj := intents.Subjects{}
	huge := "00-" + strings.Repeat("z", 900<<10)
	submit := func(id, header string) *intents.Decision {
		t.Helper()
		m := nats.NewMsg(subj.API(intents.APISubmit))
		m.Data = fmt.Appendf(nil, `{"id":%q,"agent":"w1","kind":"apply","writes":[{"path":"doc.x","op":"incr"}]}`, id)
		m.Header.Set(intents.HeaderTraceparent, header)
		reply, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		var d intents.Decision
		if err := json.Unmarshal(reply.Data, &d); err != nil {
			t.Fatalf("submit %s: %s: %v", id, reply.Data, err)
		}
		return &d
	}
	// received returns the intent event of id as log.query gives it, and
	// its size.
	received := func(id string) (*intents.Received, int) {
		t.Helper()
		reply, err := nc.RequestWithContext(ctx, subj.API(intents.APILogQuery),
			fmt.Appendf(nil, `{"intent":%q,"type":%q}`, id, intents.EventIntent))
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Events []json.RawMessage `json:"events"`
		}
		if err := json.Unmarshal(reply.Data, &page); err != nil || len(page.Events) != 1 {
			t.Fatalf("log.query of intent %s: %.300s: %v", id, reply.Data, err)
		}
		var ev intents.Event
		if err := json.Unmarshal(page.Events[0], &ev); err != nil || ev.Received == nil {
			t.Fatalf("intent event of %s: %.300s: %v", id, page.Events[0], err)
		}
		return ev.Received, len(page.Events[0])
	}

	// Without a limit of the rules', the intent is applied and the note
	// keeps a prefix of the header and its length.
	const applied = "01JD0000000000000000000001"
	if d := submit(applied, huge); d.Outcome != intents.OutcomeApplied {
		t.Fatalf("the intent with a huge traceparent: %+v, want applied", d)
	}
	rec, size := received(applied)
	if size > 4<<10 || !strings.Contains(rec.TraceError, fmt.Sprintf("(%d bytes)", len(huge))) ||
		!strings.Contains(rec.TraceError, `"00-zzz`) {
		t.Fatalf("intent event of %d bytes, trace_error %.300q: want under 4 KiB, a prefix of the header and its length %d",
			size, rec.TraceError, len(huge))
	}

	// Under limits.intent_bytes, the header counts.
	if _, err := svc.SetRules(ctx, []byte(`{"limits":{"intent_bytes":2048}}`), "test"); err != nil {
		t.Fatal(err)
	}
	const refused = "01JD0000000000000000000002"
	d := submit(refused, huge)
	want := fmt.Sprintf("above the rules' limit of %d", 2048)
	if d.Outcome != intents.OutcomeRejected || d.Reason != intents.ReasonInvalid || !strings.Contains(d.Detail, want) ||
		!strings.Contains(d.Detail, "in its headers") {
		t.Fatalf("the intent with a huge traceparent under a limit of 2048: %+v, want rejected invalid saying %q of its headers", d, want)
	}
	if rec, size := received(refused); size > 4<<10 {
		t.Fatalf("the refused intent's event is %d bytes (trace_error %.300q), want under 4 KiB", size, rec.TraceError)
	}
	// A header that leaves the whole under the limit passes.
	const small = "01JD0000000000000000000003"
	if d := submit(small, "00-"+strings.Repeat("z", 1024)); d.Outcome != intents.OutcomeApplied {
		t.Fatalf("an intent with a 1 KiB traceparent under a limit of 2048: %+v, want applied", d)
	}
}

// TestFollowQuotaIsPerConnection: a client that used up its feed.follow
// quota is refused rate_limited, and another client's follow still gets
// its consumer. Without --auth every client was the agent "anyone", with
// one quota for all: 64 follows from one client made every other's watch
// fail for 30 s.
func TestFollowQuotaIsPerConnection(t *testing.T) {
	ns := natstest.Run(t)
	startService(t, ns, t.TempDir(), Options{})
	greedy, other := natstest.Connect(t, ns), natstest.Connect(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	subject := intents.Subjects{}.API(intents.APIFeedFollow)
	follow := func(nc *nats.Conn) (code, desc string) {
		t.Helper()
		reply, err := nc.RequestWithContext(ctx, subject, []byte(`{"path":"doc"}`))
		if err != nil {
			t.Fatalf("feed.follow: %v", err)
		}
		return reply.Header.Get("Nats-Service-Error-Code"), reply.Header.Get("Nats-Service-Error")
	}
	n := 0
	for ; n <= 2*maxFollows; n++ {
		code, desc := follow(greedy)
		if code == "" {
			continue
		}
		if code != string(intents.ReasonRateLimited) {
			t.Fatalf("follow %d of one client: %s %q, want rate_limited", n+1, code, desc)
		}
		break
	}
	if n != maxFollows {
		t.Fatalf("one client got %d consumers before rate_limited, want %d", n, maxFollows)
	}
	if code, desc := follow(other); code != "" {
		t.Fatalf("another client's follow after the first used up its quota: %s %q, want a consumer", code, desc)
	}
}
