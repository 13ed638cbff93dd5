package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// startService runs a coordinator on ns with its data in dir.
func startService(t testing.TB, ns *server.Server, dir string, opts Options) *Service {
	t.Helper()
	nc := natstest.Connect(t, ns)
	svc, err := Start(context.Background(), nc, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	return svc
}

func TestServiceSmoke(t *testing.T) {
	ns := natstest.Run(t)
	startService(t, ns, t.TempDir(), Options{})
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	sub, err := nc.SubscribeSync(subj.Decisions("w1"))
	if err != nil {
		t.Fatal(err)
	}
	in := `{"id":"01JD0000000000000000000001","agent":"w1","kind":"apply","writes":[{"path":"doc.x","op":"incr"}]}`
	if err := nc.Publish(subj.Intents("w1"), []byte(in)); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var d intents.Decision
	if err := json.Unmarshal(msg.Data, &d); err != nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("decision %s: %v", msg.Data, err)
	}
	if msg.Header.Get(intents.HeaderIntent) != "01JD0000000000000000000001" {
		t.Fatalf("header %v", msg.Header)
	}
	// The API: state.get sees it.
	resp, err := nc.Request(subj.API(intents.APIStateGet), []byte(`{"paths":["doc.x","doc.y"]}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var st stateReply
	if err := json.Unmarshal(resp.Data, &st); err != nil || st.Values["doc.x"].Value != 1.0 || st.Values["doc.y"].Exists {
		t.Fatalf("state.get: %s, %v", resp.Data, err)
	}
	// submit through the API answers with the decision.
	resp, err = nc.Request(subj.API(intents.APISubmit), []byte(`{"id":"01JD0000000000000000000002","agent":"w2","kind":"apply","writes":[{"path":"doc.x","op":"incr"}]}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(resp.Data, &d); err != nil || d.Outcome != intents.OutcomeApplied || d.Agent != "w2" {
		t.Fatalf("submit: %s, %v", resp.Data, err)
	}
}

// TestFeedCatchesUpAfterRestart: events made durable but never published
// (the process died between the two) are published by the next process,
// so the public feed has every change, each once, in order. Each change
// writes to two boards and so goes in two messages; a kill between the
// two is mended too.
func TestFeedCatchesUpAfterRestart(t *testing.T) {
	ns := natstest.Run(t)
	dir := t.TempDir()
	svc := startService(t, ns, dir, Options{})
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	submit := func(i int) {
		t.Helper()
		in := fmt.Sprintf(`{"id":"%s","agent":"w1","kind":"apply","writes":[{"path":"doca.p%d","op":"set","value":%d},{"path":"docb.p%d","op":"set","value":%d}]}`,
			ulid.Make(), i, i, i, i)
		if _, err := nc.Request(subj.API(intents.APISubmit), []byte(in), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		submit(i)
	}
	if err := svc.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stream, err := js.Stream(ctx, subj.Stream(intents.StreamEvents))
	if err != nil {
		t.Fatal(err)
	}
	// Lose the feed's tail as a kill would: the second-to-last change's
	// second message and the last change's two.
	info, _ := stream.Info(ctx)
	var changes []uint64
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err == nil && strings.HasPrefix(m.Subject, subj.EventsChange("")) {
			changes = append(changes, seq)
		}
	}
	cut := changes[len(changes)-4] // the second-to-last change's first board
	for seq := cut + 1; seq <= info.State.LastSeq; seq++ {
		if err := stream.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	startService(t, ns, dir, Options{})
	submit(6)
	// Every change is on the feed once per board, in order.
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj.EventsChange(">")}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var last uint64
	for len(got) < 14 {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("after %d change messages %v: %v", len(got), got, err)
		}
		evs, err := intents.DecodeFeed(m.Data())
		if err != nil || len(evs) != 1 {
			t.Fatalf("feed message %s: %v, want one change", m.Data(), err)
		}
		ev := evs[0]
		if ev.Seq < last {
			t.Fatalf("rev %d after %d", ev.Seq, last)
		}
		last = ev.Seq
		got = append(got, strings.TrimPrefix(m.Subject(), subj.EventsChange(""))+":"+ev.Change.Writes[0].Path)
	}
	var want []string
	for i := range 7 {
		want = append(want, fmt.Sprintf("doca:doca.p%d", i), fmt.Sprintf("docb:doca.p%d", i))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("feed changes %v, want %v", got, want)
	}
	if m, err := cons.Next(jetstream.FetchMaxWait(200 * time.Millisecond)); err == nil {
		t.Fatalf("an extra change on the feed: %s", m.Subject())
	}
}
