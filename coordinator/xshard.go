package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Cross-shard applies between coordinators (engine/xshard.go): the
// coordinating shard's driver asks each other shard to prepare its part,
// hands the votes to its engine, whose decision is the commit point, and
// tells each shard how it ended once that decision is durable. A
// participant whose part stays prepared past xDoubtAfter asks the
// coordinator for its decision (shard.decided) until it has a final one,
// so a finish lost with a coordinator killed between its decision and
// its message is not lost: the part waits out the coordinator's failover
// instead of expiring into an outcome the coordinator contradicted.

const (
	// xPrepareTimeout bounds the wait for every shard's vote: a shard
	// that has not answered by then has refused.
	xPrepareTimeout = 5 * time.Second
	// xDoubtAfter is how long a prepared part waits for its finish before
	// its shard asks the coordinator, and xResolveEvery how often a shard
	// looks for such parts.
	xDoubtAfter   = 2 * time.Second
	xResolveEvery = time.Second
	// xTellTries is how many times an abort is sent before the
	// participant is left to ask.
	xTellTries = 3
	// xReadWait bounds the wait of a read of paths a prepared part holds.
	xReadWait = 10 * time.Second
)

// XPrepare prepares this shard's part of a cross-shard apply
// (engine.XPrepare) and returns its vote: durable once Commit's Pending
// is.
func (c *Core) XPrepare(now time.Time, x *intents.XShard) (intents.XVote, error) {
	n := len(c.out)
	var r engine.Ready
	var v intents.XVote
	var err error
	if !c.guard(n, "a cross-shard prepare", func() { r, v, err = c.eng.XPrepare(now, x, c.out) }) {
		return v, fmt.Errorf("%w: the prepare of intent %s", ErrInternal, x.Intent)
	}
	c.done(n, r, 0, false)
	return v, err
}

// XFinish ends this shard's prepared part of intent id (engine.XFinish).
func (c *Core) XFinish(now time.Time, id string, commit bool) error {
	n := len(c.out)
	var r engine.Ready
	var err error
	if !c.guard(n, "a cross-shard finish", func() { r, err = c.eng.XFinish(now, id, commit, c.out) }) {
		return fmt.Errorf("%w: the finish of intent %s", ErrInternal, id)
	}
	c.done(n, r, 0, false)
	return err
}

// XDecide decides a cross-shard apply this shard coordinates
// (engine.XDecide) and returns its decision: the rejection answered, or
// the commit point's, answered by XDone; nil if it was decided before.
func (c *Core) XDecide(now time.Time, id string, votes []intents.XVote) (*intents.Decision, error) {
	n := len(c.out)
	var r engine.Ready
	var err error
	if !c.guard(n, "a cross-shard decision", func() { r, err = c.eng.XDecide(now, id, votes, c.out) }) {
		return nil, fmt.Errorf("%w: the decision of intent %s", ErrInternal, id)
	}
	c.done(n, r, 0, false)
	for _, ev := range c.out[n:] {
		if d := ev.Decision; d != nil && d.Intent == id && d.Outcome.Final() {
			return d, err
		}
		if x := ev.XShard; x != nil && x.Intent == id && x.Decision != nil {
			return x.Decision, err
		}
	}
	return nil, err
}

// XDone answers a cross-shard apply this shard committed
// (engine.XDone).
func (c *Core) XDone(now time.Time, id string) error {
	n := len(c.out)
	var r engine.Ready
	if !c.guard(n, "a cross-shard answer", func() { r = c.eng.XDone(now, id, c.out) }) {
		return fmt.Errorf("%w: the answer of intent %s", ErrInternal, id)
	}
	c.done(n, r, 0, false)
	return nil
}

// xshards runs the cross-shard work of a service: the drivers of the
// applies it coordinates and the resolver of the parts it prepared.
type xshards struct {
	mu      sync.Mutex
	driving map[string]bool // the intents a driver runs for
	wg      sync.WaitGroup
	// ctx ends when the service stops (cancel, under mu).
	ctx    context.Context
	cancel context.CancelFunc
	// ended is closed, and replaced, once a part prepared here ends
	// durably: the reads that wait for one look again.
	ended chan struct{}
	// lose drops every finish this shard would send while it is set, as
	// a network that lost them would: tests set it to make participants
	// ask.
	lose atomic.Bool
}

// xstart starts the resolver, and a driver for every cross-shard apply
// the log left begun and unanswered: a coordinator that restarts
// finishes what its predecessor began. Called once the API is up.
func (s *Service) xstart(ctx context.Context) error {
	var begun []engine.XPending
	if !s.call(ctx, func() { begun = s.core.Engine().Coordinating() }) {
		return errUnavailable
	}
	for _, p := range begun {
		s.xdrive(&intents.XShard{Phase: intents.XShardBegin, Intent: p.Intent, Coord: s.core.Engine().Shard(), Parts: p.Parts,
			Decision: p.Decided})
	}
	s.xs.wg.Add(1)
	go s.xresolve()
	return nil
}

// xclose stops the drivers and the resolver and waits for them.
func (s *Service) xclose() {
	// Under mu, so that no driver starts (xdrive) once Wait may run.
	s.xs.mu.Lock()
	s.xs.cancel()
	s.xs.mu.Unlock()
	s.xs.wg.Wait()
}

// xbegun starts a driver for each cross-shard apply a durable group
// began, and wakes the reads that wait for a part the group ended.
// Called by the output stage.
func (s *Service) xbegun(g *Group) {
	ended := false
	for _, ev := range g.Live {
		x := ev.XShard
		switch {
		case x == nil:
		case x.Phase == intents.XShardBegin:
			s.xdrive(x)
		case x.Phase == intents.XShardCommit || x.Phase == intents.XShardAbort:
			ended = true
		}
	}
	if ended {
		s.xs.mu.Lock()
		close(s.xs.ended)
		s.xs.ended = make(chan struct{})
		s.xs.mu.Unlock()
	}
}

// xended is closed once a part prepared here next ends durably.
func (s *Service) xended() <-chan struct{} {
	s.xs.mu.Lock()
	defer s.xs.mu.Unlock()
	return s.xs.ended
}

// xdrive runs the two phases of x, begun here, unless a driver runs them
// already; x.Decision set, only what follows its commit point.
func (s *Service) xdrive(x *intents.XShard) {
	xs := s.xs
	xs.mu.Lock()
	defer xs.mu.Unlock()
	select {
	case <-xs.ctx.Done():
		return
	default:
	}
	if xs.driving[x.Intent] {
		return
	}
	xs.driving[x.Intent] = true
	xs.wg.Add(1)
	go func() {
		defer xs.wg.Done()
		defer func() {
			xs.mu.Lock()
			delete(xs.driving, x.Intent)
			xs.mu.Unlock()
		}()
		s.xrun(x)
	}()
}

// xcontext is a context that ends after timeout, or when the service
// stops.
func (s *Service) xcontext(timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.xs.ctx, timeout)
}

// newXShards is a service's cross-shard work, before it starts.
func newXShards() *xshards {
	xs := &xshards{driving: map[string]bool{}, ended: make(chan struct{})}
	xs.ctx, xs.cancel = context.WithCancel(context.Background())
	return xs
}

func (s *Service) xrun(x *intents.XShard) {
	d := x.Decision
	if d == nil {
		if d = s.xdecide(x); d == nil {
			return
		}
	}
	commit := d.Outcome == intents.OutcomeApplied
	var tell sync.WaitGroup
	for _, p := range x.Parts[1:] {
		tell.Go(func() { s.xtell(x, p.Shard, commit) })
	}
	tell.Wait()
	if !commit {
		return
	}
	select {
	case <-s.xs.ctx.Done():
		return // the next coordinator tells them again, and answers
	default:
	}
	// Every shard has applied its part: whoever is told the decision
	// reads it on every board.
	ctx, cancel := s.xcontext(time.Minute)
	defer cancel()
	var derr error
	if err := s.durably(ctx, func() { derr = s.core.XDone(s.opts.Now(), x.Intent) }); err != nil || derr != nil {
		s.log.Warn("a cross-shard apply was not answered; the next coordinator answers it", "intent", x.Intent, "err", errors.Join(err, derr))
	}
}

// xdecide gathers the votes of x's other shards and decides it, and
// returns the decision: nil if there is none to carry on with (the
// service stops, or it was decided before).
func (s *Service) xdecide(x *intents.XShard) *intents.Decision {
	ctx, cancel := s.xcontext(xPrepareTimeout)
	votes := make([]intents.XVote, len(x.Parts)-1)
	var wg sync.WaitGroup
	for i, p := range x.Parts[1:] {
		wg.Go(func() { votes[i] = s.xask(ctx, x, p) })
	}
	wg.Wait()
	cancel()
	select {
	case <-s.xs.ctx.Done():
		return nil // the next coordinator drives it again
	default:
	}
	var d *intents.Decision
	var derr error
	dctx, dcancel := s.xcontext(time.Minute)
	err := s.durably(dctx, func() { d, derr = s.core.XDecide(s.opts.Now(), x.Intent, votes) })
	dcancel()
	if err != nil || derr != nil {
		s.log.Warn("a cross-shard apply was not decided; the next coordinator decides it", "intent", x.Intent, "err", errors.Join(err, derr))
		return nil
	}
	return d
}

// xsubject is the subject of endpoint on shard.
func (s *Service) xsubject(shard, endpoint string) (string, bool) {
	r := s.routing.Load()
	if r == nil {
		return "", false
	}
	return r.base.Shard(shard).API(endpoint), true
}

// xrequest sends body to endpoint on shard and decodes the answer into
// out, until ctx ends: a shard that is failing over answers unavailable
// or nothing for a while.
func (s *Service) xrequest(ctx context.Context, shard, endpoint string, body, out any) error {
	subject, ok := s.xsubject(shard, endpoint)
	if !ok {
		return fmt.Errorf("shard %s: no routing", shard)
	}
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	for {
		m, err := s.nc.RequestWithContext(ctx, subject, data)
		if err == nil && isErrorReply(m) {
			se := &shardError{shard: shard, code: m.Header.Get(micro.ErrorCodeHeader), detail: m.Header.Get(micro.ErrorHeader)}
			if se.code != codeUnavailable {
				return se
			}
			err = se
		}
		if err == nil {
			return json.Unmarshal(m.Data, out)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return err
		}
	}
}

// shardError is another shard's error answer to a cross-shard request.
type shardError struct{ shard, code, detail string }

func (e *shardError) Error() string {
	return fmt.Sprintf("shard %s: %s: %s", e.shard, e.code, e.detail)
}

// xask asks shard p.Shard to prepare its part of x and returns its vote:
// not prepared, naming why, when it did not answer.
func (s *Service) xask(ctx context.Context, x *intents.XShard, p intents.XPart) intents.XVote {
	req := &intents.XShard{Phase: intents.XShardPrepare, Intent: x.Intent, Coord: x.Coord, Parts: []intents.XPart{p}}
	var v intents.XVote
	if err := s.xrequest(ctx, p.Shard, intents.APIShardPrepare, req, &v); err != nil {
		return intents.XVote{Shard: p.Shard, Decision: &intents.Decision{Outcome: intents.OutcomeRejected, Reason: intents.ReasonConflict,
			Detail: fmt.Sprintf("no answer within %s (%v)", xPrepareTimeout, err)}}
	}
	v.Shard = p.Shard
	return v
}

// xtell tells shard how x ended. A commit is told until the shard has
// applied its part, since the decision is answered only then; an abort a
// few times, past which the shard asks.
func (s *Service) xtell(x *intents.XShard, shard string, commit bool) {
	phase := intents.XShardAbort
	if commit {
		phase = intents.XShardCommit
	}
	req := &intents.XShard{Phase: phase, Intent: x.Intent, Coord: x.Coord}
	for attempt := 1; ; attempt++ {
		if !s.xs.lose.Load() {
			ctx, cancel := s.xcontext(time.Second)
			err := s.xrequest(ctx, shard, intents.APIShardFinish, req, &struct{}{})
			cancel()
			if err == nil {
				return
			}
		}
		if !commit && attempt >= xTellTries {
			s.log.Warn("a shard was not told of a cross-shard apply's abort; it will ask", "intent", x.Intent, "shard", shard)
			return
		}
		select {
		case <-s.xs.ctx.Done():
			return
		case <-time.After(min(time.Duration(attempt)*100*time.Millisecond, time.Second)):
		}
	}
}

// xresolve asks, for each part prepared here for xDoubtAfter, its
// coordinator's decision, and ends the part once it is final.
func (s *Service) xresolve() {
	defer s.xs.wg.Done()
	tick := time.NewTicker(xResolveEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.xs.ctx.Done():
			return
		case <-tick.C:
		}
		var doubt []engine.XPrepared
		self := ""
		ctx, cancel := s.xcontext(time.Minute)
		ok := s.call(ctx, func() {
			doubt = s.core.Engine().InDoubt()
			self = s.core.Engine().Shard()
		})
		cancel()
		if !ok {
			return
		}
		now := s.opts.Now()
		for _, p := range doubt {
			if p.Coord == self || now.Sub(p.At) < xDoubtAfter {
				continue
			}
			ctx, cancel := s.xcontext(time.Second)
			var d intents.Decision
			err := s.xrequest(ctx, p.Coord, intents.APIShardDecided, map[string]string{"intent": p.Intent}, &d)
			cancel()
			var se *shardError
			switch {
			case errors.As(err, &se) && se.code == codeNotFound:
				// The coordinator answers and never began the intent (it
				// logs the begin durably before it asks anyone to
				// prepare): nobody will decide the part, so it is dropped
				// rather than held for ever.
				s.log.Warn("a prepared part's coordinator never began its apply; dropping the part", "intent", p.Intent, "coord", p.Coord)
				d = intents.Decision{Outcome: intents.OutcomeRejected}
			case err != nil || !d.Outcome.Final():
				continue
			}
			commit := d.Outcome == intents.OutcomeApplied
			var ferr error
			fctx, fcancel := s.xcontext(time.Minute)
			err = s.durably(fctx, func() { ferr = s.core.XFinish(s.opts.Now(), p.Intent, commit) })
			fcancel()
			if err != nil || ferr != nil {
				s.log.Warn("a prepared part was not finished", "intent", p.Intent, "err", errors.Join(err, ferr))
				continue
			}
			s.log.Info("a prepared part was finished as its coordinator decided", "intent", p.Intent, "coord", p.Coord, "outcome", d.Outcome)
		}
	}
}

// handleShardPrepare prepares this shard's part of another shard's
// cross-shard apply and answers the vote once it is durable.
func (s *Service) handleShardPrepare(req micro.Request) {
	var x intents.XShard
	if err := json.Unmarshal(req.Data(), &x); err != nil {
		replyError(req, intents.ReasonInvalid, "%s: the request is not a cross-shard request: %v", intents.APIShardPrepare, err)
		return
	}
	var v intents.XVote
	var xerr error
	if err := s.durably(context.Background(), func() { v, xerr = s.core.XPrepare(s.opts.Now(), &x) }); err != nil {
		replyErrorLater(req, codeUnavailable, "%v", err)
		return
	}
	if xerr != nil {
		replyError(req, intents.ReasonInvalid, "%s: %v", intents.APIShardPrepare, xerr)
		return
	}
	respond(req, v)
}

// handleShardFinish ends this shard's part as its coordinator decided.
func (s *Service) handleShardFinish(req micro.Request) {
	var x intents.XShard
	if err := json.Unmarshal(req.Data(), &x); err != nil {
		replyError(req, intents.ReasonInvalid, "%s: the request is not a cross-shard request: %v", intents.APIShardFinish, err)
		return
	}
	if x.Phase != intents.XShardCommit && x.Phase != intents.XShardAbort || x.Intent == "" {
		replyError(req, intents.ReasonInvalid, "%s: field phase = %q, intent = %q: want commit or abort of an intent", intents.APIShardFinish, x.Phase, x.Intent)
		return
	}
	var xerr error
	if err := s.durably(context.Background(), func() { xerr = s.core.XFinish(s.opts.Now(), x.Intent, x.Phase == intents.XShardCommit) }); err != nil {
		replyErrorLater(req, codeUnavailable, "%v", err)
		return
	}
	if xerr != nil {
		replyError(req, intents.ReasonInvalid, "%s: %v", intents.APIShardFinish, xerr)
		return
	}
	respond(req, struct{}{})
}

// handleShardDecided answers a participant's question: this shard's
// durable decision of a cross-shard intent it coordinates.
func (s *Service) handleShardDecided(req micro.Request) {
	var body struct {
		Intent string `json:"intent"`
	}
	if err := strictJSON(req.Data(), &body); err != nil || body.Intent == "" {
		replyError(req, intents.ReasonInvalid, "%s: want {\"intent\": id}: %v", intents.APIShardDecided, err)
		return
	}
	var out *intents.Decision
	coordinated := false
	s.readEngine(context.Background(), func(e *engine.Engine, u *unsynced) uint64 {
		out, coordinated = e.XOutcome(body.Intent)
		return u.any()
	}, func(ok bool) {
		switch {
		case !ok:
			replyErrorLater(req, codeUnavailable, "%v", errUnavailable)
		case !coordinated:
			s.answerDecided(req, body.Intent)
		case out == nil:
			respond(req, &intents.Decision{Intent: body.Intent, Outcome: intents.OutcomeQueued, Detail: "not decided yet"})
		default:
			respond(req, out)
		}
	})
}

// answerDecided answers shard.decided of an intent this shard answered
// (or never coordinated) with its recorded decision.
func (s *Service) answerDecided(req micro.Request, id string) {
	s.decisionGet(context.Background(), id, func(d *intents.Decision, err error) {
		switch {
		case err != nil:
			replyErrorLater(req, codeUnavailable, "%v", err)
		case d == nil:
			replyErrorLater(req, codeNotFound, "%s: no decision recorded for intent %s", intents.APIShardDecided, id)
		default:
			respond(req, d)
		}
	})
}
