package agents

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/coagent/coagent/intents"
)

// traceKey is the context key of ContextWithTraceparent.
type traceKey struct{}

// ContextWithTraceparent returns a copy of ctx whose intents — sent with
// Submit, Apply, Propose, Commit, Abort, Update or Publish — carry tp as
// their W3C traceparent header (intents.HeaderTraceparent): the
// coordinator records its trace id on every event they cause, and
// `coagent log --trace` finds them. An empty tp sends none. The
// coordinator never refuses an intent for its traceparent; one it cannot
// read is recorded beside the intent (received.trace_error).
func ContextWithTraceparent(ctx context.Context, tp string) context.Context {
	return context.WithValue(ctx, traceKey{}, tp)
}

// TraceparentFrom returns the traceparent ContextWithTraceparent put in
// ctx, or "". It is the default of WithTraceparentFunc.
func TraceparentFrom(ctx context.Context) string {
	tp, _ := ctx.Value(traceKey{}).(string)
	return tp
}

// WithTraceparentFunc sets how a Client finds the traceparent of an
// intent from the context it is sent with, for a tracer that keeps its
// spans in the context its own way (an OpenTelemetry propagator's
// Inject, for one). fn returns "" for none. The default is
// TraceparentFrom.
func WithTraceparentFunc(fn func(context.Context) string) Option {
	return clientOption(func(c *clientConfig) { c.traceparent = fn })
}

// traceHeader sets the traceparent header of m from ctx, if there is one.
func (c *Client) traceHeader(ctx context.Context, m *nats.Msg) {
	fn := c.cfg.traceparent
	if fn == nil {
		fn = TraceparentFrom
	}
	if tp := fn(ctx); tp != "" {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header.Set(intents.HeaderTraceparent, tp)
	}
}
