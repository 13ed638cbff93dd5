package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
)

// Ready reports whether the member serves its part of the cluster: the
// active coordinator that is Ready, or a current standby, one that has
// folded the replicated log to within LeaseTTL of its end and so could
// take over at once. Safe for concurrent use.
func (m *Member) Ready(ctx context.Context) error {
	select {
	case <-m.done:
		if m.err != nil {
			return fmt.Errorf("%w: the coordinator stopped: %w", coordinator.ErrNotReady, m.err)
		}
		return fmt.Errorf("%w: the coordinator stopped", coordinator.ErrNotReady)
	default:
	}
	m.mu.Lock()
	role, svc, logSeq, folded := m.mu.role, m.mu.svc, m.mu.logSeq, m.mu.folded
	m.mu.Unlock()
	if role == intents.RoleActive {
		if svc == nil {
			return fmt.Errorf("%w: becoming the active coordinator", coordinator.ErrNotReady)
		}
		return svc.Ready(ctx)
	}
	info, err := m.logs.Info(ctx)
	if err != nil {
		return fmt.Errorf("%w: standby: the replicated log %s does not answer: %w", coordinator.ErrNotReady, m.subj.Stream(intents.StreamLog), err)
	}
	last := info.State.LastSeq
	switch {
	case last <= logSeq:
		return nil
	case folded.IsZero():
		return fmt.Errorf("%w: standby: catching up, %d of the replicated log's %d groups folded", coordinator.ErrNotReady, logSeq, last)
	}
	if lag := info.State.LastTime.Sub(folded); lag > m.opts.LeaseTTL {
		return fmt.Errorf("%w: standby: %d groups (%s) behind the replicated log", coordinator.ErrNotReady, last-logSeq, lag.Round(time.Millisecond))
	}
	return nil
}
