package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// Ready reports whether the member serves its part of the cluster: the
// active coordinator that is Ready, or a current standby, one that has
// folded the replicated log to within LeaseTTL of its end and so could
// take over at once. Safe for concurrent use.
func (m *Member) Ready(ctx context.Context) error {
	select {
	case <-m.done:
		if m.err != nil {
			return fmt.Errorf("%w: the coordinator stopped: %w", ErrNotReady, m.err)
		}
		return fmt.Errorf("%w: the coordinator stopped", ErrNotReady)
	default:
	}
	m.mu.Lock()
	role, svc, logSeq, folded := m.mu.role, m.mu.svc, m.mu.logSeq, m.mu.folded
	m.mu.Unlock()
	if role == intents.RoleActive {
		if svc == nil {
			return fmt.Errorf("%w: becoming the active coordinator", ErrNotReady)
		}
		return svc.Ready(ctx)
	}
	info, err := m.logs.Info(ctx)
	if err != nil {
		return fmt.Errorf("%w: standby: the replicated log %s does not answer: %w", ErrNotReady, m.subj.Stream(intents.StreamLog), err)
	}
	last := info.State.LastSeq
	switch {
	case last <= logSeq:
		return nil
	case folded.IsZero():
		return fmt.Errorf("%w: standby: catching up, %d of the replicated log's %d groups folded", ErrNotReady, logSeq, last)
	}
	if lag := info.State.LastTime.Sub(folded); lag > m.opts.LeaseTTL {
		return fmt.Errorf("%w: standby: %d groups (%s) behind the replicated log", ErrNotReady, last-logSeq, lag.Round(time.Millisecond))
	}
	return nil
}
