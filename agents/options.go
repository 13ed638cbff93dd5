package agents

import (
	"log/slog"
	"time"

	"github.com/coagent/coagent/intents"
)

// Option configures a Client (Connect) or an arbiter (RunArbiter). Both
// take the same options, as nats.Connect does; each ignores the ones that
// are not about it, and says so in their documentation.
type Option func(*config)

type config struct {
	prefix string
	logger *slog.Logger

	// Client.
	resend      time.Duration
	retries     int
	backoffBase time.Duration
	backoffMax  time.Duration
	onDecision  func(*intents.Decision)

	// Arbiter.
	ackWait        time.Duration
	retryDelay     time.Duration
	resolveTimeout time.Duration
}

func newConfig(opts []Option) config {
	c := config{
		resend:         10 * time.Second,
		retries:        10,
		backoffBase:    10 * time.Millisecond,
		backoffMax:     time.Second,
		ackWait:        30 * time.Second,
		retryDelay:     time.Second,
		resolveTimeout: 10 * time.Second,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// WithPrefix sets the coordinator's subject prefix. The default is
// "coagent".
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithLogger sets where the client reports what it retries and drops, and
// where RunArbiter reports each case it settles, hands back or drops, and
// why. The default discards the messages.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithResend sets the longest one request of the client may take. A
// submit asks the coordinator to answer within it (Coagent-Wait-Ms: the
// interval less a quarter, or less a second when that is smaller), with
// the interim decision when no final one exists by then; a reply that has
// not come by the end of it was lost, and the same intent (same id) is
// sent again. A ctx deadline that comes sooner shortens it. Publish gives
// one attempt this long, and Decision asks for the recorded decision this
// often while it waits. The default is 10s, the coordinator's own default
// wait. Client only.
func WithResend(d time.Duration) Option {
	return func(c *config) { c.resend = d }
}

// WithRetries bounds how many times Update tries again after a conflict
// or a stale read. The default is 10. Client only.
func WithRetries(n int) Option {
	return func(c *config) { c.retries = n }
}

// WithBackoff sets the backoff of Update between attempts: exponential from
// base, capped at max, each pause drawn at random below its bound ("full
// jitter") so that agents that collided do not collide again in step. The
// defaults are 10ms and 1s. Client only.
func WithBackoff(base, max time.Duration) Option {
	return func(c *config) { c.backoffBase, c.backoffMax = base, max }
}

// WithDecisionHook calls fn with every decision the client receives for
// its own intents, interim ones (queued, escalated) included, before the
// call waiting for it returns; and with the aborted decision of an open
// transaction's propose that an arbiter or a rule preempted. A decision
// that comes more than once for one call (the answer to each resend of a
// waiting intent is its interim decision again) is given once. fn runs on
// the goroutine that received the decision, the calling one or the
// client's subscription's, and must not block. Client only.
func WithDecisionHook(fn func(*intents.Decision)) Option {
	return func(c *config) { c.onDecision = fn }
}

// WithAckWait sets how long a case may go without word from the arbiter
// holding it before it is delivered to another one. While Decide runs the
// arbiter tells the server it is still working, three times per AckWait,
// so this bounds how long a dead or cut-off arbiter keeps a case, not how
// long Decide may take. It is a setting of the consumer all arbiters share:
// the last arbiter to start sets it for all. The default is 30s. Arbiter
// only.
func WithAckWait(d time.Duration) Option {
	return func(c *config) { c.ackWait = d }
}

// WithRetryDelay sets how long a case waits before it is delivered again
// after Decide failed or the coordinator could not be reached. The default
// is 1s. Arbiter only.
func WithRetryDelay(d time.Duration) Option {
	return func(c *config) { c.retryDelay = d }
}

// WithResolveTimeout bounds the wait for the coordinator's answer to a
// resolution. The default is 10s. Arbiter only.
func WithResolveTimeout(d time.Duration) Option {
	return func(c *config) { c.resolveTimeout = d }
}
