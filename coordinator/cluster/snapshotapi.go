package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// snapshotQueue is the queue group of the subscription on
// Subjects.ClusterSnapshot: only the active member subscribes, but for
// the instant of a failover when the deposed one has not yet
// unsubscribed and its successor has, the group still gives each request
// to one of them, and a snapshot is asked of one coordinator once.
const snapshotQueue = "coagent-snapshot"

// snapshotRequestTimeout bounds the snapshot a request asks for: a client
// that gave up long since is not worth a snapshot taken for it.
const snapshotRequestTimeout = 10 * time.Minute

// answerSnapshots subscribes to Subjects.ClusterSnapshot while svc is the
// active Service, on ctx (the snapshot loop's, which ends when this member
// steps down), and returns the unsubscription. Only the active member
// subscribes, so a standby never answers: with none active the request
// has no responders at once, rather than a timeout or a refusal from
// whichever member the server chose.
func (m *Member) answerSnapshots(ctx context.Context, svc *coordinator.Service) (stop func(), err error) {
	sub, err := m.nc.QueueSubscribe(m.subj.ClusterSnapshot(), snapshotQueue, func(req *nats.Msg) {
		m.answerSnapshot(ctx, svc, req)
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: subscribe %s: %w", m.subj.ClusterSnapshot(), err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// answerSnapshot stores a snapshot now, as Snapshot does, and answers req
// with an intents.SnapshotReply, or with an error in the micro service's
// headers, as every API endpoint answers one. Under Options.Auth only an
// admin may ask, as only an admin may put rules in force: a snapshot
// costs the active coordinator a pass over its whole log.
func (m *Member) answerSnapshot(ctx context.Context, svc *coordinator.Service, req *nats.Msg) {
	if m.opts.Auth {
		if agent, ok := svc.Holds(req.Reply, rules.RoleAdmin); !ok {
			who := "a client that is no agent (its reply subject is no agent's inbox)"
			if agent != "" {
				who = "agent " + agent
			}
			respondSnapshotError(req, intents.ReasonUnauthorized, fmt.Sprintf("snapshot: %s may not ask for a snapshot: it needs the role %s", who, rules.RoleAdmin))
			return
		}
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotRequestTimeout)
	defer cancel()
	st, err := m.Snapshot(ctx)
	switch {
	case errors.Is(err, ErrNotActive) || (err != nil && ctx.Err() != nil):
		respondSnapshotError(req, intents.CodeUnavailable, fmt.Sprintf("snapshot: coordinator %s stepped down before it stored one; ask the active coordinator again", m.opts.Node))
		return
	case err != nil:
		respondSnapshotError(req, intents.CodeUnavailable, err.Error())
		return
	}
	reply := intents.SnapshotReply{SnapshotStatus: st, Node: m.opts.Node}
	// The trim's result is the log's own word: a trim that failed (it is
	// logged) leaves the first message where it was.
	if info, err := m.logs.Info(ctx); err == nil {
		reply.LogFirst = info.State.FirstSeq
	} else {
		m.log.Warn("read the replicated log after a snapshot", "err", err)
	}
	data, err := json.Marshal(reply)
	if err != nil {
		respondSnapshotError(req, intents.CodeInternal, err.Error())
		return
	}
	_ = req.Respond(data)
}

// respondSnapshotError answers req with an error as a micro endpoint
// does, so that a client reads every error of the API one way.
func respondSnapshotError[C ~string](req *nats.Msg, code C, description string) {
	msg := nats.NewMsg(req.Reply)
	msg.Header.Set(micro.ErrorCodeHeader, string(code))
	msg.Header.Set(micro.ErrorHeader, description)
	_ = req.RespondMsg(msg)
}
