package migrate_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/migrate"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
)

// testdata/v1-jetstream.tar.gz is the JetStream store (DIR/jetstream) a
// wire v1 build (9f45b53) wrote: `coagent serve --data DIR`, two intents
// submitted with `coagent submit` and decided, serve stopped; then a bare
// nats-server on DIR/jetstream took five intents published with
// Nats-Msg-Id to coagent.intents.<agent> while no coordinator ran, so that
// they wait in the work queue (one with an extra header, one not JSON),
// and was stopped. Its DECISIONS and EVENTS age out after 24 hours; the
// tests that need events publish their own.
var v1Pending = []string{
	"01JV1PEND1NG00000000000001", "01JV1PEND1NG00000000000002", "01JV1PEND1NG00000000000003",
	"01JV1PEND1NG00000000000004", "01JV1PEND1NG00000000000005",
}

// storeServer runs a server on the JetStream store dir, as `coagent serve`
// runs its embedded one.
func storeServer(t *testing.T, dir string) *server.Server {
	t.Helper()
	return natstest.Run(t, func(o *server.Options) { o.StoreDir = dir; o.MaxPayload = coordinator.MaxWireMessage })
}

// v1Store unpacks the v1 store into a new directory and starts a server on it.
func v1Store(t *testing.T) (string, *server.Server) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "jetstream")
	f, err := os.Open(filepath.Join("testdata", "v1-jetstream.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, storeServer(t, dir)
}

func restart(t *testing.T, ns *server.Server, dir string) *server.Server {
	t.Helper()
	ns.Shutdown()
	ns.WaitForShutdown()
	return storeServer(t, dir)
}

func jsOn(t *testing.T, ns *server.Server) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// stored is one message of a stream, as the coordinator sees it.
type stored struct {
	Subject, ID, Trace, Data string
}

// messages reads every message of stream in order.
func messages(t *testing.T, js jetstream.JetStream, stream string) []stored {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	var out []stored
	for seq := uint64(1); ; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatalf("%s sequence %d: %v", stream, seq, err)
		}
		out = append(out, stored{m.Subject, m.Header.Get(jetstream.MsgIDHeader), m.Header.Get("Trace-Id"), string(m.Data)})
		seq = m.Sequence + 1
	}
}

// seedV1Events publishes events as a v1 coordinator did: every type on
// the feed stream (the store's own may have aged out by now).
func seedV1Events(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	for _, s := range []string{"coagent.events.intent", "coagent.events.change.report.title", "coagent.events.decision"} {
		if _, err := js.Publish(context.Background(), s, []byte(`{"seq":1}`)); err != nil {
			t.Fatalf("publish %s: %v", s, err)
		}
	}
}

// streamsSnapshot is what a migration may change: each stream's config,
// creation time and messages, and the intents consumer's config.
func streamsSnapshot(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for name := range js.StreamNames(ctx).Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info := st.CachedInfo()
		cfg, _ := json.Marshal(info.Config)
		fmt.Fprintf(&b, "%s created %s config %s msgs %v\n", name, info.Created, cfg, messages(t, js, name))
		for c := range st.ListConsumers(ctx).Info() {
			cfg, _ := json.Marshal(c.Config)
			fmt.Fprintf(&b, "  consumer %s %s\n", c.Name, cfg)
		}
	}
	return b.String()
}

// checkV2 checks a migrated store: the intents stream is an interest
// stream on coagent.intents.> holding want, in order, its consumer is the
// AckAll "coordinator" and delivers them, the held stream is gone, and the
// feed holds only changes.
func checkV2(t *testing.T, js jetstream.JetStream, want []stored) {
	t.Helper()
	ctx := context.Background()
	subj := intents.Subjects{}
	name := subj.Stream(intents.StreamIntents)
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	if cfg.Retention != jetstream.InterestPolicy || !slices.Equal(cfg.Subjects, []string{subj.AllIntents()}) || cfg.SubjectTransform != nil ||
		cfg.Storage != jetstream.FileStorage || cfg.Duplicates != 2*time.Minute || cfg.MaxMsgSize != coordinator.MaxWireMessage || cfg.Sealed {
		t.Fatalf("%s after the migration: %+v", name, cfg)
	}
	if got := messages(t, js, name); !slices.Equal(got, want) {
		t.Fatalf("%s holds\n%v\nwant\n%v", name, got, want)
	}
	cons, err := js.Consumer(ctx, name, "coordinator")
	if err != nil {
		t.Fatalf("consumer coordinator on %s: %v", name, err)
	}
	cc := cons.CachedInfo().Config
	if cc.AckPolicy != jetstream.AckAllPolicy || cc.FilterSubject != subj.AllIntents() || cc.DeliverPolicy != jetstream.DeliverAllPolicy || cc.MaxDeliver != -1 {
		t.Fatalf("consumer coordinator: %+v", cc)
	}
	if _, err := js.Stream(ctx, name+"_V1"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the held stream after the migration: %v", err)
	}
	ev, err := js.Stream(ctx, subj.Stream(intents.StreamEvents))
	if err != nil {
		t.Fatal(err)
	}
	if got := ev.CachedInfo().Config.Subjects; !slices.Equal(got, []string{"coagent.events.change.>"}) {
		t.Fatalf("events subjects %v", got)
	}
	feed := messages(t, js, subj.Stream(intents.StreamEvents))
	if !slices.ContainsFunc(feed, func(m stored) bool { return m.Subject == "coagent.events.change.report.title" }) {
		t.Fatalf("the change event is gone from the feed: %v", feed)
	}
	for _, m := range feed {
		if !strings.HasPrefix(m.Subject, "coagent.events.change.") {
			t.Fatalf("feed still holds %s", m.Subject)
		}
	}
}

// A store a v1 build wrote keeps every intent waiting in its work queue:
// each is in the v2 interest stream, in order, with its id, headers and
// bytes, the coordinator's AckAll consumer delivers them, the feed keeps
// only changes, one line is logged per stream, and a second run changes
// nothing.
func TestMigrateV1Store(t *testing.T) {
	_, ns := v1Store(t)
	js := jsOn(t, ns)
	ctx := context.Background()
	v1 := messages(t, js, "COAGENT_INTENTS")
	var ids []string
	for _, m := range v1 {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, v1Pending) {
		t.Fatalf("the v1 store holds %v, want %v", ids, v1Pending)
	}
	if v1[1].Trace != "t-42" || v1[4].Data != "not json at all" {
		t.Fatalf("the v1 store: %v", v1)
	}
	seedV1Events(t, js)
	others := 0 // non-change events: the two seeded, and the store's own unless they aged out
	for _, m := range messages(t, js, "COAGENT_EVENTS") {
		if !strings.HasPrefix(m.Subject, "coagent.events.change.") {
			others++
		}
	}

	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	if err := migrate.Streams(ctx, js, intents.Subjects{}, log); err != nil {
		t.Fatal(err)
	}
	checkV2(t, js, v1)
	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "stream=COAGENT_INTENTS") || !strings.Contains(lines[0], "intents=5") ||
		!strings.Contains(lines[1], "stream=COAGENT_EVENTS") || !strings.Contains(lines[1], fmt.Sprintf("purged=%d ", others)) {
		t.Fatalf("log:\n%s", logged.String())
	}
	t.Logf("log:\n%s", logged.String())

	// The consumer delivers them, in order, to a coordinator.
	cons, err := js.Consumer(ctx, "COAGENT_INTENTS", "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, m.Headers().Get(jetstream.MsgIDHeader))
	}
	if !slices.Equal(got, v1Pending) {
		t.Fatalf("the coordinator consumer delivers %v, want %v", got, v1Pending)
	}

	before := streamsSnapshot(t, js)
	logged.Reset()
	if err := migrate.Streams(ctx, js, intents.Subjects{}, log); err != nil {
		t.Fatal(err)
	}
	if after := streamsSnapshot(t, js); after != before || logged.Len() != 0 {
		t.Fatalf("a second run changed the store:\n%s\nto\n%s\nlog: %s", before, after, logged.String())
	}
}

var errKilled = errors.New("killed here")

// A migration killed after any of its steps, on a server that restarts,
// is finished by the next run: every v1 intent once, in order, and an
// intent a client publishes in between either fails to publish or is
// migrated after them — never acknowledged and then dropped.
func TestMigrateResumesAfterEveryStep(t *testing.T) {
	steps := []string{"held.created", "held.copying", "held.copied", "old.sealed", "held.complete", "old.deleted",
		"new.created", "new.consumer", "new.copying", "new.copied", "new.opened", "events.purged"}
	// From the seal of the v1 stream to the opening of the v2 one, the
	// intents subjects take no publish.
	closed := map[string]bool{"old.sealed": true, "held.complete": true, "old.deleted": true, "new.created": true,
		"new.consumer": true, "new.copying": true, "new.copied": true}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			dir, ns := v1Store(t)
			js := jsOn(t, ns)
			ctx := context.Background()
			want := messages(t, js, "COAGENT_INTENTS")
			seedV1Events(t, js)
			reached := false
			err := migrate.StreamsStopping(ctx, js, intents.Subjects{}, slog.New(slog.DiscardHandler), func(s string) error {
				if s == step {
					reached = true
					return errKilled
				}
				return nil
			})
			if !errors.Is(err, errKilled) || !reached {
				t.Fatalf("the run stopped with %v, step reached %v", err, reached)
			}

			ns = restart(t, ns, dir)
			js = jsOn(t, ns)
			probe := nats.NewMsg("coagent.intents.erin")
			probe.Header.Set(jetstream.MsgIDHeader, "01JV2PR0BE0000000000000000")
			probe.Data = []byte(`{"id":"01JV2PR0BE0000000000000000"}`)
			if _, err := js.PublishMsg(ctx, probe, jetstream.WithRetryAttempts(0)); err == nil {
				if closed[step] {
					t.Fatalf("a publish was taken while the intents stream is %s", step)
				}
				want = append(want, stored{probe.Subject, probe.Header.Get(jetstream.MsgIDHeader), "", string(probe.Data)})
			} else if !closed[step] {
				t.Fatalf("a publish after %s: %v", step, err)
			}

			var logged bytes.Buffer
			if err := migrate.Streams(ctx, js, intents.Subjects{}, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
				t.Fatal(err)
			}
			checkV2(t, js, want)
			t.Logf("resumed: %s", logged.String())
			before := streamsSnapshot(t, js)
			if err := migrate.Streams(ctx, js, intents.Subjects{}, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
			if after := streamsSnapshot(t, js); after != before {
				t.Fatalf("a second run changed the store:\n%s\nto\n%s", before, after)
			}
		})
	}
}

// v2Streams creates the streams as a v2 coordinator does, with messages.
func v2Streams(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "COAGENT_INTENTS", Subjects: []string{"coagent.intents.>"}, Retention: jetstream.InterestPolicy,
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, MaxMsgSize: coordinator.MaxWireMessage},
		{Name: "COAGENT_EVENTS", Subjects: []string{"coagent.events.change.>"}, Storage: jetstream.FileStorage, MaxAge: 24 * time.Hour},
		{Name: "COAGENT_DECISIONS", Subjects: []string{"coagent.decisions.>"}, Storage: jetstream.FileStorage, MaxAge: 24 * time.Hour},
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateConsumer(ctx, "COAGENT_INTENTS", jetstream.ConsumerConfig{Durable: "coordinator",
		AckPolicy: jetstream.AckAllPolicy, FilterSubject: "coagent.intents.>", MaxDeliver: -1}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"coagent.intents.alice", "coagent.events.change.a.b", "coagent.decisions.alice"} {
		if _, err := js.Publish(ctx, s, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
}

// A v2 store, and a new one, are left as they are, with nothing logged.
func TestMigrateLeavesV2Alone(t *testing.T) {
	ns := natstest.Run(t)
	js := jsOn(t, ns)
	ctx := context.Background()
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	if err := migrate.Streams(ctx, js, intents.Subjects{}, log); err != nil {
		t.Fatalf("a new store: %v", err)
	}
	for name := range js.StreamNames(ctx).Name() {
		t.Fatalf("a new store got stream %s", name)
	}
	v2Streams(t, js)
	before := streamsSnapshot(t, js)
	if err := migrate.Streams(ctx, js, intents.Subjects{}, log); err != nil {
		t.Fatal(err)
	}
	if after := streamsSnapshot(t, js); after != before || logged.Len() != 0 {
		t.Fatalf("a v2 store changed:\n%s\nto\n%s\nlog: %s", before, after, logged.String())
	}
}

// What a migration cannot do safely it refuses, changing nothing, with the
// command to run.
func TestMigrateRefuses(t *testing.T) {
	v1Intents := jetstream.StreamConfig{Name: "COAGENT_INTENTS", Subjects: []string{"coagent.intents.>"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, MaxMsgSize: coordinator.MaxWireMessage}
	held := jetstream.StreamConfig{Name: "COAGENT_INTENTS_V1", Subjects: []string{"coagent.migrate.held.>"}, Storage: jetstream.FileStorage}
	for _, tc := range []struct {
		name    string
		streams []jetstream.StreamConfig
		want    string
	}{
		{"intents on other subjects", []jetstream.StreamConfig{func() jetstream.StreamConfig {
			c := v1Intents
			c.Subjects = []string{"coagent.intents.>", "legacy.>"}
			return c
		}()}, "nats stream edit COAGENT_INTENTS --subjects 'coagent.intents.>'"},
		{"intents with limits retention", []jetstream.StreamConfig{func() jetstream.StreamConfig {
			c := v1Intents
			c.Retention = jetstream.LimitsPolicy
			return c
		}()}, "nats stream rm -f COAGENT_INTENTS"},
		{"intents with a subject transform", []jetstream.StreamConfig{func() jetstream.StreamConfig {
			c := v1Intents
			c.SubjectTransform = &jetstream.SubjectTransformConfig{Source: "coagent.intents.*", Destination: "coagent.intents.{{wildcard(1)}}"}
			return c
		}()}, "nats stream edit COAGENT_INTENTS --no-mirror, --no-transform"},
		{"a held stream not made by a migration", []jetstream.StreamConfig{v1Intents, held}, "nats stream rm COAGENT_INTENTS_V1"},
		{"an unfinished held stream without its v1 stream", []jetstream.StreamConfig{func() jetstream.StreamConfig {
			c := held
			c.Metadata = map[string]string{migrate.MetaSource: "2026-01-01T00:00:00Z", migrate.MetaConfig: "{}"}
			return c
		}()}, "nats stream seal -f COAGENT_INTENTS_V1"},
		{"a held stream of another v1 stream", []jetstream.StreamConfig{v1Intents, func() jetstream.StreamConfig {
			c := held
			c.Metadata = map[string]string{migrate.MetaSource: "2026-01-01T00:00:00Z", migrate.MetaConfig: "{}"}
			return c
		}()}, "nats stream rm -f COAGENT_INTENTS, run nats stream seal -f COAGENT_INTENTS_V1"},
		{"events on other subjects", []jetstream.StreamConfig{{Name: "COAGENT_EVENTS", Subjects: []string{"coagent.events.change.>", "audit.>"},
			Storage: jetstream.FileStorage}}, "nats stream edit COAGENT_EVENTS --subjects 'coagent.events.change.>'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := natstest.Run(t)
			js := jsOn(t, ns)
			ctx := context.Background()
			for _, c := range tc.streams {
				if _, err := js.CreateStream(ctx, c); err != nil {
					t.Fatal(err)
				}
				if _, err := js.Publish(ctx, c.Subjects[0][:len(c.Subjects[0])-1]+"x", []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
			}
			before := streamsSnapshot(t, js)
			err := migrate.Streams(ctx, js, intents.Subjects{}, slog.New(slog.DiscardHandler))
			if !errors.Is(err, migrate.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrRefused saying %q", err, tc.want)
			}
			if after := streamsSnapshot(t, js); after != before {
				t.Fatalf("a refused migration changed the store:\n%s\nto\n%s", before, after)
			}
		})
	}
}

// Many intents, some larger than a default max payload, move in order,
// under a prefix of more than one token. The time the intents subjects
// take no publish is logged.
func TestMigrateManyIntents(t *testing.T) {
	ns := natstest.Run(t, func(o *server.Options) { o.MaxPayload = coordinator.MaxWireMessage })
	js := jsOn(t, ns)
	ctx := context.Background()
	subj := intents.Subjects{Prefix: "team.one"}
	name := subj.Stream(intents.StreamIntents)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj.AllIntents()},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, MaxMsgSize: coordinator.MaxWireMessage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "coordinator", AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubject: subj.AllIntents(), AckWait: 5 * time.Second, MaxAckPending: 4096, MaxDeliver: -1}); err != nil {
		t.Fatal(err)
	}
	events := subj.Stream(intents.StreamEvents)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: events, Subjects: []string{subj.AllEvents()},
		Storage: jetstream.FileStorage, MaxAge: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	big := bytes.Repeat([]byte("x"), 2<<20)
	for i := range n {
		m := nats.NewMsg(subj.Intents(fmt.Sprintf("agent%d", i%7)))
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("id-%04d", i))
		m.Data = fmt.Appendf(nil, `{"n":%d}`, i)
		if i%500 == 0 {
			m.Data = big // larger than the default max payload
		}
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{subj.Events(intents.EventDecision), subj.EventsChange("a.b")} {
		if _, err := js.PublishAsync(s, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishes not acknowledged")
	}
	want := messages(t, js, name)
	if len(want) != n {
		t.Fatalf("stored %d", len(want))
	}
	var logged bytes.Buffer
	if err := migrate.Streams(ctx, js, subj, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.Retention != jetstream.InterestPolicy || !slices.Equal(cfg.Subjects, []string{subj.AllIntents()}) {
		t.Fatalf("%s: %+v", name, cfg)
	}
	if got := messages(t, js, name); !slices.Equal(got, want) {
		t.Fatalf("%d intents after the migration, want %d (or out of order)", len(got), len(want))
	}
	if _, err := js.Stream(ctx, name+"_V1"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the held stream after the migration: %v", err)
	}
	if feed := messages(t, js, events); len(feed) != 1 || feed[0].Subject != subj.EventsChange("a.b") {
		t.Fatalf("feed %v", feed)
	}
	t.Logf("%s", logged.String())
}

// A coordinator started on a JetStream store a wire v1 build wrote migrates
// it and decides the intents it held: each is answered on its agent's
// decisions stream, and the intents stream is empty afterwards.
func TestServiceStartsOnV1Store(t *testing.T) {
	_, ns := v1Store(t)
	js := jsOn(t, ns)
	v1 := messages(t, js, "COAGENT_INTENTS")
	coordtest.Start(t, ns, coordinator.Options{})
	nc := natstest.Connect(t, ns)
	for _, m := range v1 {
		var in struct {
			ID    string `json:"id"`
			Agent string `json:"agent"`
		}
		if json.Unmarshal([]byte(m.Data), &in) != nil {
			continue // the one that is not JSON is answered to its subject's agent, checked below
		}
		natstest.CheckFor(t, 10*time.Second, "the decision of "+in.ID, func() error {
			resp, err := nc.Request(intents.Subjects{}.API(intents.APIDecisionGet), fmt.Appendf(nil, `{"intent":%q}`, in.ID), 5*time.Second)
			if err != nil {
				return err
			}
			var d intents.Decision
			if err := json.Unmarshal(resp.Data, &d); err != nil || d.Intent != in.ID {
				return fmt.Errorf("none yet (%s)", resp.Data)
			}
			return nil
		})
	}
	natstest.CheckFor(t, 15*time.Second, "the intents stream after the migrated intents", func() error {
		if n := streamMsgs(t, js, "COAGENT_INTENTS"); n != 0 {
			return fmt.Errorf("%d left", n)
		}
		return nil
	})
	if n := streamMsgs(t, js, "COAGENT_DECISIONS"); n < uint64(len(v1)) {
		t.Fatalf("COAGENT_DECISIONS holds %d decisions after %d migrated intents", n, len(v1))
	}
}

// streamMsgs is how many messages the stream name holds.
func streamMsgs(t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
