package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go/jetstream"
)

// streamConfigs are the streams of SPEC §6, version 2. JetStream stores
// only what a client needs later: the intents sent to be decided later
// (an interest stream: a message is gone once the coordinator has
// acknowledged it), their decisions, the changes watchers follow, and the
// arbiters' cases.
func (s *Service) streamConfigs() []jetstream.StreamConfig {
	cfgs := []jetstream.StreamConfig{
		{Name: s.subj.Stream(intents.StreamIntents), Subjects: []string{s.subj.AllIntents()},
			Retention: jetstream.InterestPolicy, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
			MaxMsgSize: MaxWireMessage},
		{Name: s.subj.Stream(intents.StreamDecisions), Subjects: []string{s.subj.AllDecisions()},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: s.opts.DecisionsMaxAge},
		{Name: s.subj.Stream(intents.StreamEvents), Subjects: []string{s.subj.EventsChange(">")},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: s.opts.EventsMaxAge},
		{Name: s.subj.Stream(intents.StreamArbiter), Subjects: []string{s.subj.Escalations()},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute},
		{Name: s.subj.Stream(intents.StreamDLQ), Subjects: []string{s.subj.DeadLetters()},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage},
	}
	for i := range cfgs {
		cfgs[i].Replicas = s.opts.Replicas
	}
	return cfgs
}

// MaxReplicas is the most replicas a JetStream stream can have.
const MaxReplicas = 5

// intentsConsumer is the coordinator's durable consumer on the intents
// stream. It acknowledges in bulk: one acknowledgement of a group's last
// message acknowledges every message before it.
func (s *Service) intentsConsumer() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       intents.CoordinatorConsumer,
		FilterSubject: s.subj.AllIntents(),
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       s.opts.AckWait,
		MaxAckPending: s.opts.MaxAckPending,
		MaxDeliver:    -1,
	}
}

// MaxWireMessage is the largest message the intents stream takes: larger
// than an intent may be (1 MiB), so that an oversized intent still reaches
// the coordinator and gets its invalid decision. A server must allow it as
// its max_payload for that; the embedded one does.
const MaxWireMessage = 8 << 20

// ErrStreamMismatch is returned (wrapped) when a stream exists with
// settings other than the coordinator's: it is reported, never changed.
var ErrStreamMismatch = errors.New("coordinator: stream exists with other settings")

// ensureStreams creates the streams that are missing, with the intents
// stream's consumer right after the stream (nothing published in between
// would be kept), and checks those that exist. It returns the intents
// consumer.
func (s *Service) ensureStreams(ctx context.Context) (jetstream.Consumer, error) {
	for _, want := range s.streamConfigs() {
		st, err := s.js.Stream(ctx, want.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			if _, err := s.js.CreateStream(ctx, want); err != nil {
				return nil, fmt.Errorf("coordinator: create stream %s: %w", want.Name, err)
			}
			s.log.Info("stream created", "stream", want.Name, "subjects", want.Subjects)
			if want.Name == s.subj.Stream(intents.StreamIntents) {
				if _, err := s.js.CreateConsumer(ctx, want.Name, s.intentsConsumer()); err != nil {
					return nil, fmt.Errorf("coordinator: create consumer %s on %s: %w", intents.CoordinatorConsumer, want.Name, err)
				}
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("coordinator: stream %s: %w", want.Name, err)
		}
		if err := CheckStream(s.log, st.CachedInfo().Config, want); err != nil {
			return nil, err
		}
	}
	name := s.subj.Stream(intents.StreamIntents)
	cons, err := s.js.Consumer(ctx, name, intents.CoordinatorConsumer)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		s.log.Warn("the coordinator's consumer on the intents stream was missing, and is made again: intents published while it was missing are lost (an interest stream keeps nothing nobody is interested in); do not delete it",
			"stream", name, "consumer", intents.CoordinatorConsumer)
		cons, err = s.js.CreateConsumer(ctx, name, s.intentsConsumer())
	case err == nil && cons.CachedInfo().Config.AckPolicy != jetstream.AckAllPolicy:
		return nil, fmt.Errorf("%w: consumer %s on %s acknowledges %s, want all; it cannot be changed in place, and deleting it loses what it holds: stop the coordinator and let it migrate the stream",
			ErrStreamMismatch, intents.CoordinatorConsumer, name, cons.CachedInfo().Config.AckPolicy)
	case err == nil:
		cons, err = s.js.UpdateConsumer(ctx, name, s.intentsConsumer())
	}
	if err != nil {
		return nil, fmt.Errorf("coordinator: consumer %s on %s: %w", intents.CoordinatorConsumer, name, err)
	}
	return cons, nil
}

// CheckStream compares a stream that exists with the configuration the
// coordinator wants: a setting it relies on that differs is an
// ErrStreamMismatch, other replicas are reported to log and kept. A
// cluster member checks its replicated log with it, as Start checks its
// streams.
func CheckStream(log *slog.Logger, have, want jetstream.StreamConfig) error {
	if diffs := streamDiffs(have, want); len(diffs) > 0 {
		return fmt.Errorf("%w: %s has %v", ErrStreamMismatch, want.Name, diffs)
	}
	if have.Replicas != want.Replicas {
		// Unlike the settings above, the replicas change nothing the
		// coordinator relies on, only how many servers' loss the stream
		// survives: a stream made before a cluster grew (or on purpose)
		// keeps working, and changing it moves its data, which is the
		// operator's call.
		log.Warn("stream exists with other replicas; kept as it is (change it with nats stream edit --replicas)",
			"stream", want.Name, "have", have.Replicas, "want", want.Replicas)
	}
	return nil
}

// streamDiffs says how a stream's configuration differs from the one the
// coordinator wants.
func streamDiffs(have, want jetstream.StreamConfig) []string {
	var diffs []string
	if !slices.Equal(have.Subjects, want.Subjects) {
		diffs = append(diffs, fmt.Sprintf("subjects %v, want %v", have.Subjects, want.Subjects))
	}
	if have.Retention != want.Retention {
		diffs = append(diffs, fmt.Sprintf("retention %s, want %s", have.Retention, want.Retention))
	}
	if have.Storage != want.Storage {
		diffs = append(diffs, fmt.Sprintf("storage %s, want %s", have.Storage, want.Storage))
	}
	if want.MaxMsgSize != 0 && have.MaxMsgSize != want.MaxMsgSize {
		diffs = append(diffs, fmt.Sprintf("max message size %d, want %d", have.MaxMsgSize, want.MaxMsgSize))
	}
	if want.Duplicates != 0 && have.Duplicates != want.Duplicates {
		diffs = append(diffs, fmt.Sprintf("duplicate window %s, want %s", have.Duplicates, want.Duplicates))
	}
	return diffs
}
