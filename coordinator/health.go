package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/coagent/coagent/intents"
)

// ErrNotReady is wrapped by the errors Ready returns: the coordinator is
// up but does not serve intents now; the rest of the message says why.
var ErrNotReady = errors.New("not ready")

// Ready reports whether the service serves intents: it has not stopped,
// its event log has not failed, and every stream it decides from and
// answers on exists on the server. It asks the server about each stream,
// so it takes a round trip per stream; ctx bounds it. Safe for concurrent
// use.
func (s *Service) Ready(ctx context.Context) error {
	select {
	case <-s.stopped:
		if err := s.Err(); err != nil {
			return fmt.Errorf("%w: the coordinator stopped: %w", ErrNotReady, err)
		}
		return fmt.Errorf("%w: the coordinator stopped", ErrNotReady)
	default:
	}
	if s.broken.Load() {
		return fmt.Errorf("%w: the event log failed: %w", ErrNotReady, s.Err())
	}
	for _, name := range []string{intents.StreamIntents, intents.StreamDecisions, intents.StreamEvents, intents.StreamArbiter, intents.StreamDLQ} {
		stream := s.subj.Stream(name)
		if _, err := s.js.Stream(ctx, stream); err != nil {
			return fmt.Errorf("%w: stream %s: %w", ErrNotReady, stream, err)
		}
	}
	return nil
}
