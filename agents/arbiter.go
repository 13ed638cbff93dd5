package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// Decide is an arbiter written as a function: given a case (SPEC §5), it
// returns the resolution — the winners, the losers or a replacement, and a
// rationale. It may leave the resolution's Escalation and Arbiter empty;
// RunArbiter fills them. An error means "no answer now": the case goes back
// to the queue and comes again. ctx ends when the case reaches its deadline
// or the arbiter stops, and Decide should return then.
type Decide func(ctx context.Context, c *intents.Escalation) (*intents.Resolution, error)

// arbitersDurable is the durable consumer on the arbiter stream that every
// arbiter shares, so that each case goes to one of them. The coordinator
// creates it at start.
const arbitersDurable = intents.ArbitersConsumer

// arbiterUpdateWait bounds the attempt to set the shared consumer's
// AckWait to this arbiter's: under authentication an arbiter may not
// change consumers, and the server does not answer a refused request.
const arbiterUpdateWait = 2 * time.Second

// arbiterFetchWait bounds each pull request, so that an arbiter that stops
// leaves no request behind for long: a case delivered to a request nobody
// reads comes back only after AckWait.
const arbiterFetchWait = 5 * time.Second

// RunArbiter serves as the arbiter name, resolving cases with decide until
// ctx ends; then it returns nil. It creates, or joins, the durable pull
// consumer "arbiters" on the arbiter stream (COAGENT_ARBITER), which all
// arbiters share: each case goes to one of them (a case a panel of
// arbiters settles, Escalation.Panel, comes again after each vote until
// enough agree, never to an arbiter that voted on it), and comes again to another
// if that one dies or goes silent past its AckWait. It takes one case at a
// time, calls decide, sends the resolution to the coordinator's
// arbiter.resolve endpoint, and then acknowledges the case.
//
// What happens to a case that is not resolved:
//   - decide returns an error, or a resolution that does not fit the case:
//     the case is handed back (Nak) and comes again after the retry delay;
//   - the coordinator refuses the resolution as invalid — the case is no
//     longer open (another arbiter or the deadline's fallback settled it) or
//     the coordinator finds the resolution wrong — or the case is past its
//     deadline: the case is dropped (Term) and the refusal logged;
//   - the coordinator cannot be reached or answers with another error: the
//     case is handed back;
//   - ctx ends while decide runs: the case is handed back at once.
//
// The stream must exist: the coordinator creates it at start. RunArbiter
// returns an error if it cannot set up the consumer or if nc is closed.
func RunArbiter(ctx context.Context, nc *nats.Conn, name string, decide Decide, opts ...ArbiterOption) error {
	if !intents.ValidSegment(name) {
		return fmt.Errorf("agents: arbiter name %q is not an agent name", name)
	}
	if nc == nil || decide == nil {
		return errors.New("agents: RunArbiter needs a connection and a Decide")
	}
	cfg, err := newArbiterConfig(opts)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("agents: jetstream: %w", err)
	}
	a := &arbiterRun{nc: nc, js: js, name: name, decide: decide, cfg: cfg, subj: intents.Subjects{Prefix: cfg.prefix},
		log: cfg.logger.With("arbiter", name)}
	cons, err := a.consumer(ctx)
	if err != nil {
		return err
	}
	for {
		if ctx.Err() != nil {
			return nil
		}
		if nc.IsClosed() {
			return fmt.Errorf("agents: arbiter %s: %w", name, nats.ErrConnectionClosed)
		}
		fctx, cancel := context.WithTimeout(ctx, arbiterFetchWait)
		m, err := cons.Next(jetstream.FetchContext(fctx))
		cancel()
		switch {
		case err == nil:
			a.handle(ctx, m)
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
			// Nothing to do yet.
		case errors.Is(err, nats.ErrConnectionClosed):
			return fmt.Errorf("agents: arbiter %s: %w", name, err)
		default:
			a.log.Warn("fetching cases failed; trying again", "err", err)
			if !a.pause(ctx) {
				return nil
			}
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
				if c, err := a.consumer(ctx); err == nil {
					cons = c
				} else {
					a.log.Warn("recreating the consumer failed", "err", err)
				}
			}
		}
	}
}

// arbiterRun is one RunArbiter: it handles one case at a time on the
// caller's goroutine.
type arbiterRun struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	name   string
	decide Decide
	cfg    arbiterConfig
	subj   intents.Subjects
	log    *slog.Logger
	// ackWait is the AckWait of the consumer in use: a case in hand is
	// kept alive a third of the way through it.
	ackWait time.Duration
}

// consumer joins the arbiters' shared consumer, which the coordinator
// creates, and sets its AckWait to this arbiter's where it may; it creates
// the consumer where none exists (a coordinator that did not). The
// AckWait in force is the one the arbiter keeps a case alive by.
func (a *arbiterRun) consumer(ctx context.Context) (jetstream.Consumer, error) {
	stream := a.subj.Stream(intents.StreamArbiter)
	cfg := jetstream.ConsumerConfig{
		Durable:       arbitersDurable,
		FilterSubject: a.subj.Escalations(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       a.cfg.ackWait,
		MaxDeliver:    -1,
	}
	cons, err := a.js.Consumer(ctx, stream, arbitersDurable)
	switch {
	case err == nil && cons.CachedInfo().Config.AckWait != a.cfg.ackWait:
		uctx, cancel := context.WithTimeout(ctx, arbiterUpdateWait)
		updated, uerr := a.js.UpdateConsumer(uctx, stream, cfg)
		cancel()
		if uerr != nil {
			a.log.Warn("the arbiters' consumer keeps its ack wait; this arbiter may not change it",
				"ack_wait", cons.CachedInfo().Config.AckWait, "wanted", a.cfg.ackWait, "err", uerr)
		} else {
			cons = updated
		}
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		cons, err = a.js.CreateOrUpdateConsumer(ctx, stream, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("agents: consumer %s on %s (is the coordinator running?): %w", arbitersDurable, stream, err)
	}
	a.ackWait = cons.CachedInfo().Config.AckWait
	return cons, nil
}

// pause waits the retry delay (at least 100ms, so that a persistent failure
// does not spin); false if ctx ended first.
func (a *arbiterRun) pause(ctx context.Context) bool {
	return sleep(ctx, max(a.cfg.retryDelay, 100*time.Millisecond))
}

// handle settles one case, or hands it back, or drops it; see RunArbiter.
func (a *arbiterRun) handle(ctx context.Context, m jetstream.Msg) {
	var c intents.Escalation
	if err := json.Unmarshal(m.Data(), &c); err != nil || c.ID == "" {
		a.log.Error("dropped a message that is not a case", "err", err, "data", intents.Clip(string(m.Data()), 200))
		a.settle(m, jetstream.Msg.Term, "term")
		return
	}
	log := a.log.With("escalation", c.ID)
	if c.Panel != nil && slices.ContainsFunc(c.Votes, func(v intents.Vote) bool { return v.Agent == a.name }) {
		// A panel's case offered again for the votes it lacks: another
		// arbiter's to take.
		log.Debug("voted on this case already; handed back for another arbiter")
		a.nakLater(m)
		return
	}
	res, err := a.decideWhileAlive(ctx, m, &c)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		log.Info("stopping: case handed back", "err", err)
		a.settle(m, jetstream.Msg.Nak, "nak")
		return
	case errors.Is(err, errPastDeadline):
		log.Warn("case dropped: past its deadline, the coordinator's fallback settles it", "err", err)
		a.settle(m, jetstream.Msg.Term, "term")
		return
	default:
		log.Warn("no resolution; the case will come again", "err", err)
		a.nakLater(m)
		return
	}
	err = a.resolve(ctx, res)
	var refused *arbiterRefusal
	switch {
	case err == nil:
		log.Info("resolved", "winners", res.Winners, "losers", res.Losers, "replaced", res.Replacement != nil,
			"rationale", res.Rationale)
		a.settle(m, jetstream.Msg.Ack, "ack")
	case errors.As(err, &refused) && refused.Code == string(intents.ReasonInvalid):
		log.Warn("resolution refused; case dropped (settled already, past its deadline, or the resolution is wrong)",
			"err", err)
		a.settle(m, jetstream.Msg.Term, "term")
	default:
		log.Warn("resolution not delivered; the case will come again", "err", err)
		a.nakLater(m)
	}
}

var errPastDeadline = errors.New("agents: the case is past its deadline")

// decideWhileAlive runs decide under a context that ends at the case's
// deadline, and meanwhile tells the server, three times per AckWait, that
// the case is being worked on. It returns decide's resolution, filled and
// checked against the case.
func (a *arbiterRun) decideWhileAlive(ctx context.Context, m jetstream.Msg, c *intents.Escalation) (*intents.Resolution, error) {
	dctx, cancel := ctx, context.CancelFunc(func() {})
	if !c.Deadline.IsZero() {
		dctx, cancel = context.WithDeadlineCause(ctx, c.Deadline, errPastDeadline)
	}
	defer cancel()
	beat := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(a.ackWait/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if err := m.InProgress(); err != nil {
					a.log.Debug("telling the server the case is in hand failed", "escalation", c.ID, "err", err)
				}
			case <-beat:
				return
			case <-dctx.Done():
				return // past the deadline nobody should hold the case
			}
		}
	})
	res, err := a.decide(dctx, c)
	close(beat)
	wg.Wait()
	if err != nil {
		if errors.Is(context.Cause(dctx), errPastDeadline) {
			return nil, fmt.Errorf("%w: %w", errPastDeadline, err)
		}
		return nil, err
	}
	if res == nil {
		return nil, errors.New("agents: decide returned no resolution and no error")
	}
	r := *res
	if r.Escalation == "" {
		r.Escalation = c.ID
	}
	if r.Arbiter == "" {
		r.Arbiter = a.name
	}
	if err := arbiter.Check(c, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// settle acks, naks or terms m, logging a failure (the server then
// delivers the case again after AckWait, which is harmless).
func (a *arbiterRun) settle(m jetstream.Msg, how func(jetstream.Msg) error, what string) {
	if err := how(m); err != nil {
		a.log.Warn("could not "+what+" the case; it will come again after the ack wait", "err", err)
	}
}

func (a *arbiterRun) nakLater(m jetstream.Msg) {
	a.settle(m, func(m jetstream.Msg) error { return m.NakWithDelay(a.cfg.retryDelay) }, "nak")
}

// arbiterRefusal is the coordinator's refusal of a resolution: the micro
// error code (a SPEC §3 reason) and its description.
type arbiterRefusal struct {
	Code, Detail string
}

func (e *arbiterRefusal) Error() string {
	return fmt.Sprintf("agents: arbiter.resolve refused (%s): %s", e.Code, e.Detail)
}

// resolve sends res to the coordinator. It is not cut short when ctx ends:
// a resolution in hand is delivered, within the resolve timeout.
func (a *arbiterRun) resolve(ctx context.Context, res *intents.Resolution) error {
	data, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("agents: encode resolution: %w", err)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.resolveTimeout)
	defer cancel()
	reply, err := a.nc.RequestWithContext(rctx, a.subj.API(intents.APIArbiterResolve), data)
	if err != nil {
		return fmt.Errorf("agents: arbiter.resolve: %w", err)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		return &arbiterRefusal{Code: code, Detail: reply.Header.Get(micro.ErrorHeader)}
	}
	var ok struct {
		OK bool `json:"ok"`
	}
	if err := json.Unmarshal(reply.Data, &ok); err != nil || !ok.OK {
		return fmt.Errorf("agents: arbiter.resolve: unexpected reply %q", intents.Clip(string(reply.Data), 200))
	}
	return nil
}
