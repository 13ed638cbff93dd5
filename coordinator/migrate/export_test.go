package migrate

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/coagent/coagent/intents"
)

// The metadata keys of a held stream, for the tests that make one a
// migration did not.
const (
	MetaSource = metaSource
	MetaConfig = metaConfig
)

// StreamsStopping is Streams with step called after each step by its name:
// an error from step stops the run there, as a killed process would, so
// that the tests can resume from every step.
func StreamsStopping(ctx context.Context, js jetstream.JetStream, subj intents.Subjects, log *slog.Logger, step func(name string) error) error {
	m := &migration{js: js, subj: subj, log: log, step: step}
	return m.run(ctx)
}
