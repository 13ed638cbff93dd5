package agents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
)

// spanKey stands for a tracer's own context key, which only its
// propagator reads.
type spanKey struct{}

// WithTraceparentFunc takes the traceparent from where a tracer keeps it:
// the events of an intent applied under that context, and those of one
// published to the stream, carry its trace id; an intent sent with a
// context without one carries none.
func TestTraceparentFunc(t *testing.T) {
	ns := natstest.Run(t)
	coordtest.Start(t, ns, coordinator.Options{})
	nc := natstest.Connect(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := agents.Connect(ctx, nc, "w1", agents.WithTraceparentFunc(func(ctx context.Context) string {
		s, _ := ctx.Value(spanKey{}).(string)
		return s
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	traced := context.WithValue(ctx, spanKey{}, "00-"+trace+"-00f067aa0ba902b7-01")
	applied, err := c.Apply(traced, intents.Apply("a").Set("doc.a", 1))
	if err != nil {
		t.Fatal(err)
	}
	in, _ := intents.Apply("b").Set("doc.b", 1).Build()
	published, err := c.Publish(traced, in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decision(ctx, published); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, intents.Apply("c").Set("doc.c", 1)); err != nil {
		t.Fatal(err)
	}
	reply, err := nc.Request(intents.Subjects{}.API(intents.APILogQuery), []byte(`{"trace":"`+trace+`"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var page struct{ Events []*intents.Event }
	if err := json.Unmarshal(reply.Data, &page); err != nil {
		t.Fatalf("log.query: %s: %v", reply.Data, err)
	}
	var got []string
	for _, ev := range page.Events {
		got = append(got, string(ev.Type)+" "+ev.Intent)
	}
	want := []string{"intent " + applied.Intent, "change " + applied.Intent, "decision " + applied.Intent,
		"intent " + published, "change " + published, "decision " + published}
	if len(got) != len(want) {
		t.Fatalf("events of the trace: %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events of the trace: %q, want %q", got, want)
		}
	}
}

// An intent sent under a context with a traceparent carries it as its
// header; every event the intent causes records the trace id, which
// `coagent log --trace` and log.query's "trace" find.
func ExampleContextWithTraceparent() {
	nc, stop, err := startCoordinator()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()
	c, err := agents.Connect(ctx, nc, "writer-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	ctx = agents.ContextWithTraceparent(ctx, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	d, err := c.Apply(ctx, intents.Apply("title").Set("report.title", "Q3"))
	if err != nil {
		fmt.Println(err)
		return
	}
	reply, err := nc.Request(intents.Subjects{}.API(intents.APILogQuery),
		[]byte(`{"trace":"4bf92f3577b34da6a3ce929d0e0e4736"}`), 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	var page struct{ Events []*intents.Event }
	if err := json.Unmarshal(reply.Data, &page); err != nil {
		fmt.Println(err)
		return
	}
	for _, ev := range page.Events {
		fmt.Println(ev.Type, ev.Intent == d.Intent, ev.Trace)
	}
	// Output:
	// intent true 4bf92f3577b34da6a3ce929d0e0e4736
	// change true 4bf92f3577b34da6a3ce929d0e0e4736
	// decision true 4bf92f3577b34da6a3ce929d0e0e4736
}
