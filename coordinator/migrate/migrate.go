package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/coagent/coagent/intents"
)

// ErrRefused is returned (wrapped) when a stream written by an earlier
// wire version cannot be migrated without risking what it holds. The
// message says what was found and what to run; nothing was changed.
var ErrRefused = errors.New("migrate: cannot migrate stream")

// Metadata keys of the held stream, the record of a migration in progress
// that survives a killed coordinator and a restarted server.
const (
	// metaSource is when the v1 intents stream the held stream copies was
	// created: a held stream is only ever matched with that stream.
	metaSource = "coagent.migrate.source_created"
	// metaConfig is the v1 stream's configuration (JSON), from which the
	// v2 stream is made once the v1 one is gone.
	metaConfig = "coagent.migrate.config"
	// metaConsumer is the v1 coordinator consumer's configuration (JSON,
	// or empty when it had none), whose ack wait and limits the v2
	// consumer keeps.
	metaConsumer = "coagent.migrate.consumer"
)

// copyWindow is how many copies are in flight at once.
const copyWindow = 256

// Streams brings the streams a wire v1 coordinator made to wire v2,
// and must run before the streams are checked and before any intake.
//
// It changes two streams and leaves the others alone:
//
//   - A work-queue COAGENT_INTENTS (v1) becomes an interest stream with the
//     AckAll durable consumer "coordinator". The server cannot change a
//     work queue's retention in place, so every stored message (all of them
//     are unacknowledged in a work queue) is copied in order, with its
//     headers and Nats-Msg-Id, into a held stream COAGENT_INTENTS_V1; the v1
//     stream is sealed, its tail copied, the held stream sealed (the mark
//     that it is complete, a server state an operator can also set with
//     nats stream seal), and the v1 stream deleted; the v2 stream is
//     created closed to clients (on a subject of its own, mapped back to
//     the intents subjects), its consumer added, the held messages copied
//     into it in order; then it is opened on coagent.intents.> and the held
//     stream deleted. Publishes fail (sealed or no stream) from the seal to
//     the opening; they are never acknowledged and then dropped.
//   - COAGENT_EVENTS on coagent.events.> (v1) loses its non-change events
//     (a purge of coagent.events.*: their history is the event log) and
//     then its subjects become coagent.events.change.>.
//
// Every step is safe to interrupt: the next call finds where the last one
// stopped from the streams themselves and finishes the migration, with
// every intent once in the v2 stream, in the order the v1 stream held
// them. (A Nats-Msg-Id the v1 stream holds twice, its two copies published
// further apart than its duplicate window, may come out once: both copies
// reach the stream they are copied into within its window. The engine
// answers the second as a duplicate anyway.) A store already at v2, or
// without these streams, is left as it is and nothing is logged.
//
// It logs one line per stream it migrates (to nothing if log is nil). It
// is not safe to run twice at once on one store. It returns an error wrapping
// ErrRefused, which names what to run, for a stream it cannot migrate
// safely (other subjects, other retention, a held stream it did not make
// or whose v1 stream is gone before the copy was complete), and other
// errors for a server that fails; in both cases the coordinator must not
// start its intake.
func Streams(ctx context.Context, js jetstream.JetStream, subj intents.Subjects, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &migration{js: js, subj: subj, log: log, step: func(string) error { return nil }}
	return m.run(ctx)
}

// migration is one run of Streams. step is called after each step
// with its name; an error from it stops the run there, as a killed process
// would, so that tests can resume from every step.
type migration struct {
	js   jetstream.JetStream
	subj intents.Subjects
	log  *slog.Logger
	step func(name string) error
}

func (m *migration) run(ctx context.Context) error {
	if err := m.intents(ctx); err != nil {
		return err
	}
	return m.events(ctx)
}

// base is the subject prefix: "coagent" for coagent.intents.>.
func (m *migration) base() string { return strings.TrimSuffix(m.subj.AllIntents(), ".intents.>") }

// heldSubjects is where the held stream keeps a v1 message of
// <prefix>.intents.X: <prefix>.migrate.held.X.
func (m *migration) heldSubjects() string { return m.base() + ".migrate.held.>" }

// copySubjects is where the closed v2 stream takes the copies,
// <prefix>.migrate.copy.X, stored as <prefix>.intents.X.
func (m *migration) copySubjects() string { return m.base() + ".migrate.copy.>" }

func (m *migration) stream(ctx context.Context, name string) (*jetstream.StreamInfo, error) {
	st, err := m.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("migrate: stream %s: %w", name, err)
	}
	return st.CachedInfo(), nil
}

// intents works out from the intents stream and the held stream where a
// migration stands, and carries it on.
func (m *migration) intents(ctx context.Context) error {
	name := m.subj.Stream(intents.StreamIntents)
	heldName := name + "_V1"
	cur, err := m.stream(ctx, name)
	if err != nil {
		return err
	}
	held, err := m.stream(ctx, heldName)
	if err != nil {
		return err
	}
	if held != nil && held.Config.Metadata[metaSource] == "" {
		return fmt.Errorf("%w %s: stream %s exists and was not made by a migration; rename it or remove it (nats stream rm %s) and start again",
			ErrRefused, name, heldName, heldName)
	}
	if cur == nil && held == nil {
		return nil // a new store: the streams are created as v2
	}
	if cur != nil && cur.Config.Retention == jetstream.InterestPolicy {
		switch {
		case held == nil:
			return nil // v2 already
		case slices.Equal(cur.Config.Subjects, []string{m.copySubjects()}):
			// Killed while copying into a v2 stream no client could
			// reach yet: it is made again from the held stream.
			if err := m.js.DeleteStream(ctx, name); err != nil {
				return fmt.Errorf("migrate: delete the unfinished %s: %w", name, err)
			}
			return m.fill(ctx, held, "resumed: the v2 stream filled again from "+heldName)
		case slices.Equal(cur.Config.Subjects, []string{m.subj.AllIntents()}):
			// Killed after the v2 stream was opened, which happens only
			// once it holds every held message.
			if err := m.js.DeleteStream(ctx, heldName); err != nil {
				return fmt.Errorf("migrate: delete %s: %w", heldName, err)
			}
			m.log.Info("stream migrated from wire v1", "stream", name, "found", "an interest stream and "+heldName+" left by an interrupted migration",
				"did", "deleted "+heldName+", whose messages the stream holds")
			return nil
		}
		return fmt.Errorf("%w %s: it has subjects %v while %s holds the intents of a migration; put back its subjects with nats stream edit %s --subjects '%s' and start again",
			ErrRefused, name, cur.Config.Subjects, heldName, name, m.subj.AllIntents())
	}
	if cur == nil {
		if !held.Config.Sealed {
			return fmt.Errorf("%w %s: it was deleted, not by the migration, while %s held only part of it (the %d messages copied before); "+
				"to go on with those run nats stream seal -f %s and start again",
				ErrRefused, name, heldName, held.State.Msgs, heldName)
		}
		return m.fill(ctx, held, "resumed: the v1 stream already copied to "+heldName)
	}
	if err := m.checkV1(name, cur); err != nil {
		return err
	}
	source := cur.Created.UTC().Format(time.RFC3339Nano)
	if held != nil && held.Config.Metadata[metaSource] != source {
		seal := ""
		if !held.Config.Sealed {
			seal = fmt.Sprintf(", run nats stream seal -f %s (it keeps the %d messages it holds)", heldName, held.State.Msgs)
		}
		return fmt.Errorf("%w %s: %s holds the intents of an earlier %s (created %s), not of the one there now (created %s, %d messages); "+
			"run a v1 coordinator until nats stream info %s shows no messages, stop it, run nats stream rm -f %s%s, and start this coordinator again",
			ErrRefused, name, heldName, name, held.Config.Metadata[metaSource], source, cur.State.Msgs, name, name, seal)
	}
	if held != nil && !held.Config.Sealed {
		// Killed while copying: the copy is made again from the start.
		if err := m.js.DeleteStream(ctx, heldName); err != nil {
			return fmt.Errorf("migrate: delete the unfinished %s: %w", heldName, err)
		}
		held = nil
	}
	start := time.Now()
	if held == nil {
		if held, start, err = m.hold(ctx, name, heldName, cur); err != nil {
			return err
		}
	}
	if err := m.js.DeleteStream(ctx, name); err != nil {
		return fmt.Errorf("migrate: delete the v1 %s: %w", name, err)
	}
	if err := m.step("old.deleted"); err != nil {
		return err
	}
	return m.fillSince(ctx, held, start, "work-queue retention (wire v1)")
}

// checkV1 refuses a work-queue intents stream that is not what v1 made.
func (m *migration) checkV1(name string, cur *jetstream.StreamInfo) error {
	c := cur.Config
	if c.Retention != jetstream.WorkQueuePolicy {
		return fmt.Errorf("%w %s: its retention is %s, neither work queue (wire v1) nor interest (v2), so which of its %d messages "+
			"are still to be decided is unknown; to start with a new stream run nats stream rm -f %s (the event log keeps every intent "+
			"already decided; any other is lost) and start again",
			ErrRefused, name, c.Retention, cur.State.Msgs, name)
	}
	if !slices.Equal(c.Subjects, []string{m.subj.AllIntents()}) {
		return fmt.Errorf("%w %s: it has subjects %v, not [%s], and its messages on other subjects cannot go into the v2 stream; "+
			"put back its subjects with nats stream edit %s --subjects '%s' and start again",
			ErrRefused, name, c.Subjects, m.subj.AllIntents(), name, m.subj.AllIntents())
	}
	if c.Mirror != nil || len(c.Sources) > 0 || c.SubjectTransform != nil {
		return fmt.Errorf("%w %s: it has a mirror, sources or a subject transform, which a migration would drop; "+
			"remove them (nats stream edit %s --no-mirror, --no-transform, or --config with a config without sources) and start again",
			ErrRefused, name, name)
	}
	return nil
}

// hold copies the v1 stream into a new held stream, seals the v1 stream
// and copies its tail, then marks the held stream complete. It returns
// when the v1 stream was sealed, the start of the time publishes fail.
func (m *migration) hold(ctx context.Context, name, heldName string, cur *jetstream.StreamInfo) (*jetstream.StreamInfo, time.Time, error) {
	cfgJSON, err := json.Marshal(cur.Config)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("migrate: encode the config of %s: %w", name, err)
	}
	var consJSON []byte
	cons, err := m.js.Consumer(ctx, name, intents.CoordinatorConsumer)
	switch {
	case err == nil:
		if consJSON, err = json.Marshal(cons.CachedInfo().Config); err != nil {
			return nil, time.Time{}, fmt.Errorf("migrate: encode the consumer of %s: %w", name, err)
		}
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, time.Time{}, fmt.Errorf("migrate: consumer %s on %s: %w", intents.CoordinatorConsumer, name, err)
	}
	hcfg := jetstream.StreamConfig{
		Name:        heldName,
		Description: "the intents of " + name + " (wire v1) while it is migrated to interest retention",
		Subjects:    []string{m.heldSubjects()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     cur.Config.Storage,
		Replicas:    cur.Config.Replicas,
		Placement:   cur.Config.Placement,
		MaxMsgSize:  cur.Config.MaxMsgSize,
		Duplicates:  cur.Config.Duplicates,
		Metadata: map[string]string{
			metaSource:   cur.Created.UTC().Format(time.RFC3339Nano),
			metaConfig:   string(cfgJSON),
			metaConsumer: string(consJSON),
		},
	}
	st, err := m.js.CreateStream(ctx, hcfg)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("migrate: create %s: %w", heldName, err)
	}
	if err := m.step("held.created"); err != nil {
		return nil, time.Time{}, err
	}
	old, err := m.js.Stream(ctx, name)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("migrate: stream %s: %w", name, err)
	}
	toHeld := func(s string) string {
		return m.base() + ".migrate.held." + strings.TrimPrefix(s, m.base()+".intents.")
	}
	// The bulk while clients still publish to the v1 stream, then the
	// tail once it is sealed: the unavailable time is the tail's.
	var total copied
	next := uint64(1)
	if err := m.copyFrom(ctx, readBySeq(old, &next), heldName, toHeld, "held.copying", &total); err != nil {
		return nil, time.Time{}, fmt.Errorf("migrate: copy %s into %s: %w", name, heldName, err)
	}
	if err := m.step("held.copied"); err != nil {
		return nil, time.Time{}, err
	}
	sealed := time.Now()
	if !cur.Config.Sealed {
		seal := cur.Config
		seal.Sealed = true
		if _, err := m.js.UpdateStream(ctx, seal); err != nil {
			return nil, time.Time{}, fmt.Errorf("migrate: seal %s: %w", name, err)
		}
	}
	if err := m.step("old.sealed"); err != nil {
		return nil, time.Time{}, err
	}
	if err := m.copyFrom(ctx, readBySeq(old, &next), heldName, toHeld, "held.copying", &total); err != nil {
		return nil, time.Time{}, fmt.Errorf("migrate: copy %s into %s: %w", name, heldName, err)
	}
	// Sealed, the v1 stream can no longer change: every one of its
	// messages was either stored in the held stream or a duplicate there.
	oi, err := old.Info(ctx)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("migrate: stream %s: %w", name, err)
	}
	hi, err := st.Info(ctx)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("migrate: stream %s: %w", heldName, err)
	}
	if total.all != oi.State.Msgs || hi.State.Msgs != total.stored {
		return nil, time.Time{}, fmt.Errorf("migrate: copy %s into %s: %d of %d messages copied, %d stored (%d in %s); nothing was deleted, start again",
			name, heldName, total.all, oi.State.Msgs, total.stored, hi.State.Msgs, heldName)
	}
	hcfg.Sealed = true
	if _, err := m.js.UpdateStream(ctx, hcfg); err != nil {
		return nil, time.Time{}, fmt.Errorf("migrate: seal %s: %w", heldName, err)
	}
	if err := m.step("held.complete"); err != nil {
		return nil, time.Time{}, err
	}
	hi, err = st.Info(ctx)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("migrate: stream %s: %w", heldName, err)
	}
	return hi, sealed, nil
}

// fill resumes a migration at the making of the v2 stream.
func (m *migration) fill(ctx context.Context, held *jetstream.StreamInfo, found string) error {
	return m.fillSince(ctx, held, time.Now(), found)
}

// fillSince makes the v2 intents stream from the held stream: created
// closed to clients, its consumer added before any message arrives (an
// interest stream drops at once a message nobody is interested in), the
// held messages copied in order, then opened on the intents subjects.
// start is when publishes began to fail.
func (m *migration) fillSince(ctx context.Context, held *jetstream.StreamInfo, start time.Time, found string) error {
	name := m.subj.Stream(intents.StreamIntents)
	heldName := held.Config.Name
	var cfg jetstream.StreamConfig
	if err := json.Unmarshal([]byte(held.Config.Metadata[metaConfig]), &cfg); err != nil {
		return fmt.Errorf("%w %s: the v1 config recorded on %s does not decode (%v); remove %s (nats stream rm %s) only if you accept losing its %d messages",
			ErrRefused, name, heldName, err, heldName, heldName, held.State.Msgs)
	}
	for k := range cfg.Metadata {
		if strings.HasPrefix(k, "_nats.") {
			delete(cfg.Metadata, k) // the server's own, set again by it
		}
	}
	cfg.Name = name
	cfg.Retention = jetstream.InterestPolicy
	if cfg.Sealed { // sealed before the migration came, which sealing also set
		cfg.Sealed, cfg.DenyDelete, cfg.DenyPurge = false, false, false
	}
	open := cfg
	cfg.Subjects = []string{m.copySubjects()}
	cfg.SubjectTransform = &jetstream.SubjectTransformConfig{Source: m.copySubjects(), Destination: m.subj.AllIntents()}
	st, err := m.js.CreateStream(ctx, cfg)
	if err != nil {
		return fmt.Errorf("migrate: create the v2 %s: %w", name, err)
	}
	if err := m.step("new.created"); err != nil {
		return err
	}
	ccfg := jetstream.ConsumerConfig{Durable: intents.CoordinatorConsumer, AckPolicy: jetstream.AckAllPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy, FilterSubject: m.subj.AllIntents(), MaxDeliver: -1}
	if raw := held.Config.Metadata[metaConsumer]; raw != "" {
		var old jetstream.ConsumerConfig
		if err := json.Unmarshal([]byte(raw), &old); err == nil {
			ccfg.AckWait, ccfg.MaxAckPending, ccfg.MaxDeliver = old.AckWait, old.MaxAckPending, old.MaxDeliver
		}
	}
	if _, err := m.js.CreateConsumer(ctx, name, ccfg); err != nil {
		return fmt.Errorf("migrate: create consumer %s on the v2 %s: %w", intents.CoordinatorConsumer, name, err)
	}
	if err := m.step("new.consumer"); err != nil {
		return err
	}
	read, stop, err := m.readOrdered(ctx, heldName, held.State.LastSeq)
	if err != nil {
		return fmt.Errorf("migrate: read %s: %w", heldName, err)
	}
	defer stop()
	toCopy := func(s string) string {
		return m.base() + ".migrate.copy." + strings.TrimPrefix(s, m.base()+".migrate.held.")
	}
	var total copied
	if err := m.copyFrom(ctx, read, name, toCopy, "new.copying", &total); err != nil {
		return fmt.Errorf("migrate: copy %s into the v2 %s: %w", heldName, name, err)
	}
	if err := m.step("new.copied"); err != nil {
		return err
	}
	ni, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("migrate: stream %s: %w", name, err)
	}
	if total.all != held.State.Msgs || ni.State.Msgs != total.stored {
		return fmt.Errorf("migrate: copy %s into the v2 %s: %d of %d messages copied, %d stored (%d in %s); %s is kept, start again",
			heldName, name, total.all, held.State.Msgs, total.stored, ni.State.Msgs, name, heldName)
	}
	if _, err := m.js.UpdateStream(ctx, open); err != nil {
		return fmt.Errorf("migrate: open the v2 %s on %v: %w", name, open.Subjects, err)
	}
	unavailable := time.Since(start)
	if err := m.step("new.opened"); err != nil {
		return err
	}
	if err := m.js.DeleteStream(ctx, heldName); err != nil {
		return fmt.Errorf("migrate: delete %s: %w", heldName, err)
	}
	m.log.Info("stream migrated from wire v1", "stream", name, "found", found,
		"did", "recreated with interest retention and the AckAll consumer "+intents.CoordinatorConsumer+", the stored intents moved in order",
		"intents", total.stored, "duplicates", total.all-total.stored, "unavailable", unavailable.Round(time.Microsecond))
	return nil
}

// copied counts the messages of a copy: all that were sent, and of them
// those the target stored (the others were duplicates of a Nats-Msg-Id).
type copied struct{ all, stored uint64 }

// reader returns a stream's messages in order, and ErrMsgNotFound after
// the last.
type reader func(ctx context.Context) (*jetstream.RawStreamMsg, error)

// readBySeq reads st by sequence from seq on, one request a message: the
// way to read a work-queue stream without taking its messages (a consumer
// that does not acknowledge is refused on one, and one that does removes
// them). *seq is the sequence after the last message read.
func readBySeq(st jetstream.Stream, seq *uint64) reader {
	return func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		m, err := st.GetMsg(ctx, *seq, jetstream.WithGetMsgSubject(">"))
		if err != nil {
			return nil, err
		}
		*seq = m.Sequence + 1
		return m, nil
	}
}

// readOrdered reads the sealed stream name, whose last sequence is last,
// with an ordered consumer: delivered in batches, it keeps the time the
// intents subjects take no publish short. stop ends the consumer.
func (m *migration) readOrdered(ctx context.Context, name string, last uint64) (r reader, stop func(), err error) {
	var done uint64
	if last == 0 {
		return func(context.Context) (*jetstream.RawStreamMsg, error) { return nil, jetstream.ErrMsgNotFound }, func() {}, nil
	}
	cons, err := m.js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, nil, err
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		if done >= last {
			return nil, jetstream.ErrMsgNotFound
		}
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return nil, err
		}
		done = meta.Sequence.Stream
		return &jetstream.RawStreamMsg{Subject: msg.Subject(), Sequence: done, Header: msg.Headers(), Data: msg.Data()}, nil
	}, it.Stop, nil
}

// copyFrom copies the messages read returns, in order, into the stream
// target on the subject rename gives, with their headers but the server's
// own (Nats-Msg-Id is kept), until read has no more. It calls the step
// stepName once the first message is on its way.
func (m *migration) copyFrom(ctx context.Context, read reader, target string, rename func(string) string, stepName string, total *copied) error {
	var inflight []jetstream.PubAckFuture
	wait := func(keep int) error {
		for len(inflight) > keep {
			f := inflight[0]
			inflight = inflight[1:]
			select {
			case ack := <-f.Ok():
				total.all++
				if !ack.Duplicate {
					total.stored++
				}
			case err := <-f.Err():
				return fmt.Errorf("store %s: %w", f.Msg().Subject, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	for {
		raw, err := read(ctx)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			_ = wait(0)
			return fmt.Errorf("read: %w", err)
		}
		msg := nats.NewMsg(rename(raw.Subject))
		msg.Data = raw.Data
		for k, vs := range raw.Header {
			if k != jetstream.MsgIDHeader && strings.HasPrefix(strings.ToLower(k), "nats-") {
				continue // server control headers: expectations, TTLs, the source's own
			}
			msg.Header[k] = vs
		}
		msg.Header.Set(jetstream.ExpectedStreamHeader, target)
		f, err := m.js.PublishMsgAsync(msg)
		if err != nil {
			_ = wait(0)
			return fmt.Errorf("publish sequence %d: %w", raw.Sequence, err)
		}
		inflight = append(inflight, f)
		if total.all+uint64(len(inflight)) == 1 {
			if err := m.step(stepName); err != nil {
				_ = wait(0)
				return err
			}
		}
		if err := wait(copyWindow); err != nil {
			_ = wait(0)
			return err
		}
	}
	return wait(0)
}

// events narrows a v1 COAGENT_EVENTS to the change feed of v2.
func (m *migration) events(ctx context.Context) error {
	name := m.subj.Stream(intents.StreamEvents)
	cur, err := m.stream(ctx, name)
	if err != nil || cur == nil {
		return err
	}
	v2 := []string{m.subj.EventsChange(">")}
	switch {
	case slices.Equal(cur.Config.Subjects, v2):
		return nil
	case !slices.Equal(cur.Config.Subjects, []string{m.subj.AllEvents()}):
		return fmt.Errorf("%w %s: it has subjects %v, neither [%s] (wire v1) nor %v (v2); run nats stream edit %s --subjects '%s' and start again",
			ErrRefused, name, cur.Config.Subjects, m.subj.AllEvents(), v2, name, v2[0])
	}
	// The other event types are dropped first, while the stream still
	// names them: a run killed after this purges nothing more and only
	// narrows the subjects.
	before := cur.State.Msgs
	st, err := m.js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("migrate: stream %s: %w", name, err)
	}
	did := "kept only the change feed, the other event types purged (their history is in the event log)"
	if cur.Config.DenyPurge {
		did = "kept only the change feed; the other event types stay until they age out (the stream denies purges)"
	} else if err := st.Purge(ctx, jetstream.WithPurgeSubject(m.base()+".events.*")); err != nil {
		return fmt.Errorf("migrate: purge the non-change events of %s: %w", name, err)
	}
	if err := m.step("events.purged"); err != nil {
		return err
	}
	cfg := cur.Config
	cfg.Subjects = v2
	if _, err := m.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("migrate: narrow %s to %v: %w", name, v2, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("migrate: stream %s: %w", name, err)
	}
	m.log.Info("stream migrated from wire v1", "stream", name, "found", "subjects "+m.subj.AllEvents()+" (wire v1)",
		"did", did, "subjects", v2[0], "purged", before-info.State.Msgs, "kept", info.State.Msgs)
	return nil
}
