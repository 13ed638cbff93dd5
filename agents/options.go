package agents

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/coagent/coagent/intents"
)

// Option configures a Client (Connect). The options of both a Client and
// an arbiter (WithPrefix, WithLogger) are SharedOptions, which are Options
// too; an arbiter's own options (WithAckWait, …) are ArbiterOptions only,
// so passing one to Connect does not compile.
type Option interface {
	applyClient(*clientConfig)
}

// ArbiterOption configures an arbiter (RunArbiter). A SharedOption is an
// ArbiterOption too; a Client's own options (WithResend, …) are not.
type ArbiterOption interface {
	applyArbiter(*arbiterConfig)
}

// SharedOption is an option of both a Client and an arbiter;
// OpenDeadLetters reads WithPrefix from them too.
type SharedOption interface {
	Option
	ArbiterOption
}

// shared is what both a Client and an arbiter are configured with.
type shared struct {
	prefix string
	logger *slog.Logger
}

type clientConfig struct {
	shared
	resend      time.Duration
	retries     int
	backoffBase time.Duration
	backoffMax  time.Duration
	onDecision  func(*intents.Decision)
	traceparent func(context.Context) string // nil: TraceparentFrom
}

type arbiterConfig struct {
	shared
	ackWait        time.Duration
	retryDelay     time.Duration
	resolveTimeout time.Duration
}

type clientOption func(*clientConfig)

func (o clientOption) applyClient(c *clientConfig) { o(c) }

type arbiterOption func(*arbiterConfig)

func (o arbiterOption) applyArbiter(c *arbiterConfig) { o(c) }

type sharedOption func(*shared)

func (o sharedOption) applyClient(c *clientConfig)   { o(&c.shared) }
func (o sharedOption) applyArbiter(c *arbiterConfig) { o(&c.shared) }

var (
	_ SharedOption  = sharedOption(nil)
	_ Option        = clientOption(nil)
	_ ArbiterOption = arbiterOption(nil)
)

// newClientConfig applies opts over the defaults and checks the result,
// reporting every bad value at once.
func newClientConfig(opts []Option) (clientConfig, error) {
	c := clientConfig{
		resend:      10 * time.Second,
		retries:     10,
		backoffBase: 10 * time.Millisecond,
		backoffMax:  time.Second,
	}
	for _, o := range opts {
		if o != nil {
			o.applyClient(&c)
		}
	}
	c.shared.ensureDefaults()
	if c.resend <= 0 || c.retries < 0 || c.backoffBase <= 0 || c.backoffMax < c.backoffBase {
		return c, fmt.Errorf("agents: options: resend %s and backoff base %s must be positive, max %s at least base, retries %d not negative",
			c.resend, c.backoffBase, c.backoffMax, c.retries)
	}
	return c, nil
}

// newArbiterConfig applies opts over the defaults and checks the result,
// reporting every bad value at once.
func newArbiterConfig(opts []ArbiterOption) (arbiterConfig, error) {
	c := arbiterConfig{
		ackWait:        30 * time.Second,
		retryDelay:     time.Second,
		resolveTimeout: 10 * time.Second,
	}
	for _, o := range opts {
		if o != nil {
			o.applyArbiter(&c)
		}
	}
	c.shared.ensureDefaults()
	if c.ackWait <= 0 || c.retryDelay < 0 || c.resolveTimeout <= 0 {
		return c, fmt.Errorf("agents: arbiter options: ack wait %s and resolve timeout %s must be positive, retry delay %s not negative",
			c.ackWait, c.resolveTimeout, c.retryDelay)
	}
	return c, nil
}

func (s *shared) ensureDefaults() {
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
}

// WithPrefix sets the coordinator's subject prefix. The default is
// "coagent".
func WithPrefix(prefix string) SharedOption {
	return sharedOption(func(c *shared) { c.prefix = prefix })
}

// WithLogger sets where the client reports what it retries and drops, and
// where RunArbiter reports each case it settles, hands back or drops, and
// why. The default discards the messages.
func WithLogger(l *slog.Logger) SharedOption {
	return sharedOption(func(c *shared) { c.logger = l })
}

// WithResend sets the longest one request of the client may take. A
// submit asks the coordinator to answer within it (Coagent-Wait-Ms: the
// interval less a quarter, or less a second when that is smaller), with
// the interim decision when no final one exists by then; a reply that has
// not come by the end of it was lost, and the same intent (same id) is
// sent again. A ctx deadline that comes sooner shortens it. Publish gives
// one attempt this long, and Decision asks for the recorded decision this
// often while it waits. The default is 10s, the coordinator's own default
// wait.
func WithResend(d time.Duration) Option {
	return clientOption(func(c *clientConfig) { c.resend = d })
}

// WithRetries bounds how many times Update tries again after a conflict
// or a stale read. The default is 10.
func WithRetries(n int) Option {
	return clientOption(func(c *clientConfig) { c.retries = n })
}

// WithBackoff sets the backoff of Update between attempts: exponential from
// base, capped at max, each pause drawn at random below its bound ("full
// jitter") so that agents that collided do not collide again in step. The
// defaults are 10ms and 1s.
func WithBackoff(base, max time.Duration) Option {
	return clientOption(func(c *clientConfig) { c.backoffBase, c.backoffMax = base, max })
}

// WithDecisionHook calls fn with every decision the client receives for
// its own intents, interim ones (queued, escalated) included, before the
// call waiting for it returns; and with the aborted decision of an open
// transaction's propose that an arbiter or a rule preempted. A decision
// that comes more than once for one call (the answer to each resend of a
// waiting intent is its interim decision again) is given once. fn runs on
// the goroutine that received the decision, the calling one or the
// client's subscription's, and must not block.
func WithDecisionHook(fn func(*intents.Decision)) Option {
	return clientOption(func(c *clientConfig) { c.onDecision = fn })
}

// WithAckWait sets how long a case may go without word from the arbiter
// holding it before it is delivered to another one. While Decide runs the
// arbiter tells the server it is still working, three times per AckWait,
// so this bounds how long a dead or cut-off arbiter keeps a case, not how
// long Decide may take. It is a setting of the consumer all arbiters share:
// the last arbiter to start sets it for all. The default is 30s.
func WithAckWait(d time.Duration) ArbiterOption {
	return arbiterOption(func(c *arbiterConfig) { c.ackWait = d })
}

// WithRetryDelay sets how long a case waits before it is delivered again
// after Decide failed or the coordinator could not be reached. The default
// is 1s.
func WithRetryDelay(d time.Duration) ArbiterOption {
	return arbiterOption(func(c *arbiterConfig) { c.retryDelay = d })
}

// WithResolveTimeout bounds the wait for the coordinator's answer to a
// resolution. The default is 10s.
func WithResolveTimeout(d time.Duration) ArbiterOption {
	return arbiterOption(func(c *arbiterConfig) { c.resolveTimeout = d })
}
