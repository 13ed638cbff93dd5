package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// Publish stores in on the agent's intents stream (coagent.intents.<agent>,
// COAGENT_INTENTS) and returns its id once JetStream has acknowledged it:
// the store-and-forward path, for an agent that sends an intent and moves
// on, or while no coordinator runs. The coordinator decides it when it
// gets to it; Decision collects the decision, now or after a restart of
// the agent. An empty ID gets a fresh ULID and an empty Agent the client's
// name; in is not changed.
//
// The intent id is the message's Nats-Msg-Id, so a publish retried after a
// lost acknowledgement (Publish retries while ctx allows) is stored once,
// and the coordinator decides an id once whichever path it came by.
func (c *Client) Publish(ctx context.Context, in *intents.Intent) (string, error) {
	in, raw, err := c.prepare(in, false)
	if err != nil {
		return "", err
	}
	ctx, stop := c.bind(ctx)
	defer stop()
	if err := c.publish(ctx, in, raw); err != nil {
		if errors.Is(context.Cause(ctx), ErrClosed) {
			return "", ErrClosed
		}
		return "", err
	}
	return in.ID, nil
}

// publish stores the intent on the intents stream of the shard that owns
// its boards, retrying while ctx allows: the message id makes the stream keep one copy however many
// attempts reach it.
func (c *Client) publish(ctx context.Context, in *intents.Intent, raw []byte) error {
	id := in.ID
	// The intents stream of the shard that owns its boards, whose
	// decisions the client then listens to.
	subj, err := c.shardSubjects(ctx, c.route(ctx, in, ""))
	if err != nil {
		return err
	}
	m := nats.NewMsg(subj.Intents(c.name))
	m.Data = raw
	c.traceHeader(ctx, m)
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, c.cfg.resend)
		_, err := c.js.PublishMsg(pctx, m, jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("agents: publish intent %s: %w (%w)", id, context.Cause(ctx), err)
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return fmt.Errorf("agents: publish intent %s: %w", id, err)
		}
		c.log.Debug("publish failed; trying again", "intent", id, "attempt", attempt, "err", err)
		if !sleep(ctx, c.backoff(attempt)) {
			return fmt.Errorf("agents: publish intent %s: %w (%w)", id, context.Cause(ctx), err)
		}
	}
}

// Decision waits for the final decision of intent id and returns it,
// whatever the outcome (a rejection is a decision here, not an error). It
// is how an agent collects the decision of an intent it published: one
// that came while nobody waited (while the agent was away, too) is the
// coordinator's record, asked for at once (decision.get); one still to
// come arrives on the agent's decisions subject (coagent.decisions.<agent>).
// While it waits it asks the record again every resend interval
// (WithResend), so a decision sent while the connection was down is not
// missed. An interim decision goes to the decision hook
// (WithDecisionHook), and Decision waits on.
//
// Any intent of the agent's can be waited for, whichever path it took; an
// id the coordinator has not seen yet (not_found) is waited for as well,
// until ctx ends.
func (c *Client) Decision(ctx context.Context, id string) (*intents.Decision, error) {
	if _, err := ulid.ParseStrict(id); err != nil || strings.ToUpper(id) != id {
		return nil, fmt.Errorf("agents: decision of intent %q: not a ULID in canonical upper case", id)
	}
	ch, err := c.await(id)
	if err != nil {
		return nil, err
	}
	defer c.forget(id, ch)
	ctx, stop := c.bind(ctx)
	defer stop()
	// Asked at once: waiting is registered first, so a decision that comes
	// between the answer and the wait is delivered, not lost.
	poll := time.NewTimer(0)
	defer poll.Stop()
	var last error
	for {
		select {
		case d, ok := <-ch:
			if !ok {
				return nil, ErrClosed
			}
			if d.Outcome.Final() {
				return d, nil
			}
		case <-poll.C:
			d, err := c.recorded(ctx, id)
			var api *APIError
			switch {
			case err == nil:
				// Through the waiters, so the hook sees it once.
				c.deliver(d)
				if d.Outcome.Final() {
					return d, nil
				}
			case errors.As(err, &api) && api.Code == codeNotFound:
				// Not decided yet: it comes on the subscription.
			case ctx.Err() != nil:
				return nil, c.ended(ctx, id, last)
			case errors.Is(err, nats.ErrConnectionClosed):
				return nil, fmt.Errorf("agents: decision of intent %s: %w", id, err)
			default:
				last = err
				c.log.Debug("asking for a recorded decision failed; asking again later", "intent", id, "err", err)
			}
			poll.Reset(c.cfg.resend)
		case <-ctx.Done():
			return nil, c.ended(ctx, id, last)
		}
	}
}

// recorded asks the coordinator for the recorded decision of intent id
// (decision.get): the final one, the latest interim one, or the APIError
// not_found.
func (c *Client) recorded(ctx context.Context, id string) (*intents.Decision, error) {
	rctx, cancel := context.WithTimeout(ctx, max(c.requestTimeout(ctx), time.Millisecond))
	defer cancel()
	body, err := json.Marshal(map[string]string{"intent": id})
	if err != nil {
		return nil, fmt.Errorf("agents: decision.get: %w", err)
	}
	reply, err := c.nc.RequestWithContext(rctx, c.subj.API(intents.APIDecisionGet), body)
	if err != nil {
		return nil, fmt.Errorf("agents: decision.get: %w", err)
	}
	if err := apiError(reply); err != nil {
		return nil, err
	}
	var d intents.Decision
	if err := json.Unmarshal(reply.Data, &d); err != nil {
		return nil, fmt.Errorf("agents: decision.get reply %q: %w", intents.Clip(string(reply.Data), 200), err)
	}
	if d.Intent != id {
		return nil, fmt.Errorf("agents: decision.get of intent %s answered the decision of intent %q", id, d.Intent)
	}
	return &d, nil
}
