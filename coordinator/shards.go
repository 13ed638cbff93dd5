package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go/micro"
)

// Handoff records a shard's join or a board's release or adoption
// (engine.Join, Release, Adopt, chosen by h.Kind); it is durable once
// Commit's Pending is. A refused one (engine.ErrHandoff) changes nothing.
// It returns the event's seq and payload, which a release asked again
// answers from its first event.
func (c *Core) Handoff(now time.Time, h *intents.Handoff) (uint64, *intents.Handoff, error) {
	n := len(c.out)
	var r engine.Ready
	var err error
	seq, out := uint64(0), h
	if !c.guard(n, "a board handoff", func() {
		switch h.Kind {
		case intents.HandoffJoin:
			r, err = c.eng.Join(now, h.Shard, c.out)
		case intents.HandoffRelease:
			r, seq, out, err = c.eng.Release(now, h.Board, h.Shard, c.out)
		case intents.HandoffAdopt:
			r, err = c.eng.Adopt(now, h.Board, h.Shard, h.Seq, h.Nodes, c.out)
		default:
			r, err = engine.Ready{Events: c.out}, fmt.Errorf("%w: kind %q", engine.ErrHandoff, h.Kind)
		}
	}) {
		return 0, nil, fmt.Errorf("%w: the handoff of board %s", ErrInternal, h.Board)
	}
	c.done(n, r, 0, false)
	for _, ev := range c.out[n:] {
		if ev.Handoff != nil {
			seq, out = ev.Seq, ev.Handoff
		}
	}
	if err == nil && out == nil {
		// A release asked again: the engine named the event that made it.
		out, err = c.handoffAt(seq)
	}
	return seq, out, err
}

// handoffAt is the board event at seq: one not yet committed, or the
// log's.
func (c *Core) handoffAt(seq uint64) (*intents.Handoff, error) {
	for _, ev := range c.out {
		if ev.Seq == seq && ev.Handoff != nil {
			return ev.Handoff, nil
		}
	}
	if first := c.log.FirstSeq(); seq < first {
		return nil, fmt.Errorf("%w: the release at event %d is compacted away (the log starts at %d); adopt it from a copy of that event",
			engine.ErrHandoff, seq, first)
	}
	var h *intents.Handoff
	err := c.log.Scan(seq, seq, func(ev *intents.Event) error {
		h = ev.Handoff
		return nil
	})
	if err == nil && h == nil {
		err = fmt.Errorf("event %d is no board event", seq)
	}
	if err != nil {
		return nil, fmt.Errorf("coordinator: read the release at event %d: %w", seq, err)
	}
	return h, nil
}

// Handoff records h (Core.Handoff) and returns once it is durable.
func (s *Service) Handoff(ctx context.Context, h *intents.Handoff) (*intents.HandoffReply, error) {
	var herr error
	var reply intents.HandoffReply
	if err := s.durably(ctx, func() {
		reply.Seq, reply.Handoff, herr = s.core.Handoff(s.opts.Now(), h)
		s.setRouting()
	}); err != nil {
		return nil, err
	}
	if herr != nil {
		return nil, herr
	}
	return &reply, nil
}

// ShardInfo is what this shard's log says of its boards.
func (s *Service) ShardInfo(ctx context.Context) (intents.ShardInfo, error) {
	var info intents.ShardInfo
	if !s.call(ctx, func() {
		e := s.core.Engine()
		info = intents.ShardInfo{Shard: e.Shard(), Owners: e.Owners(), Rev: e.State().Rev()}
		info.InDoubt, info.Unanswered = e.XCounts()
	}) {
		return info, errUnavailable
	}
	return info, nil
}

// join makes the log the configured shard's, or says why it cannot be.
func (s *Service) join(ctx context.Context) error {
	want := s.opts.Shard
	if want == "" {
		want = intents.DefaultShard
	}
	var got string
	if !s.call(ctx, func() { got = s.core.Engine().Shard() }) {
		return errUnavailable
	}
	if got == want {
		return nil
	}
	if _, err := s.Handoff(ctx, &intents.Handoff{Kind: intents.HandoffJoin, Shard: want}); err != nil {
		return fmt.Errorf("coordinator: shard %s: %w", want, err)
	}
	return nil
}

// handleShardRelease gives a board away (coagent shards move). Under
// Options.Auth only an agent with the role admin may, as for rules.set.
func (s *Service) handleShardRelease(req micro.Request) {
	s.handleHandoff(req, intents.HandoffRelease)
}

// handleShardAdopt takes a board in with the state another shard's release
// carried.
func (s *Service) handleShardAdopt(req micro.Request) {
	s.handleHandoff(req, intents.HandoffAdopt)
}

func (s *Service) handleHandoff(req micro.Request, kind string) {
	endpoint := "shard." + kind
	if s.opts.Auth {
		v := s.viewerOf(req.Reply())
		if !v.set.Holds(v.Viewer, rules.RoleAdmin) {
			replyError(req, intents.ReasonUnauthorized, "%s: moving a board needs the role %s", endpoint, rules.RoleAdmin)
			return
		}
	}
	var hr intents.HandoffRequest
	if err := json.Unmarshal(req.Data(), &hr); err != nil {
		replyError(req, intents.ReasonInvalid, "%s: the request is not a handoff request: %v", endpoint, err)
		return
	}
	h := &intents.Handoff{Kind: kind, Board: hr.Board, Shard: hr.Shard}
	if kind == intents.HandoffAdopt {
		if hr.From == nil || hr.From.Kind != intents.HandoffRelease || hr.From.Board != hr.Board {
			replyError(req, intents.ReasonInvalid, "%s: field from: want the release event of board %q", endpoint, hr.Board)
			return
		}
		h.Nodes, h.Seq = hr.From.Nodes, hr.Seq
	}
	reply, err := s.Handoff(context.Background(), h)
	switch {
	case errors.Is(err, engine.ErrHandoff):
		replyError(req, intents.ReasonOutOfScope, "%s: %v", endpoint, err)
	case err != nil:
		replyErrorLater(req, codeUnavailable, "%v", err)
	default:
		respond(req, reply)
	}
}

// handleShardInfo answers ShardInfo.
func (s *Service) handleShardInfo(req micro.Request) {
	info, err := s.ShardInfo(context.Background())
	if err != nil {
		replyErrorLater(req, codeUnavailable, "%v", err)
		return
	}
	respond(req, info)
}
