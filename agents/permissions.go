package agents

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// PermissionError is a permissions violation the server reported: the
// connection's user may not publish to (Op "publish") or subscribe to (Op
// "subscribe") Subject. It matches nats.ErrPermissionViolation.
type PermissionError struct {
	Op      string
	Subject string
	Err     error // the connection's error, as nats.go reported it
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("agents: the server refused to let this connection %s to %s (a permissions violation)", e.Op, e.Subject)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// parseViolation returns err as a *PermissionError, if it is a permissions
// violation. The server says which subject only in the text of its error
// (`Permissions Violation for Publish to "coagent.api.rules.set"`), so
// that text is read; nats.go marks the error with ErrPermissionViolation.
func parseViolation(err error) (*PermissionError, bool) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return nil, false
	}
	msg := err.Error()
	lower := strings.ToLower(msg)
	pe := &PermissionError{Err: err}
	var at int
	switch {
	case strings.Contains(lower, "for publish to "):
		pe.Op, at = "publish", strings.Index(lower, "for publish to ")+len("for publish to ")
	case strings.Contains(lower, "for subscription to "):
		pe.Op, at = "subscribe", strings.Index(lower, "for subscription to ")+len("for subscription to ")
	default:
		return pe, true // a violation of a kind this client does not know
	}
	subject := strings.TrimSpace(msg[at:])
	if unq, ok := strings.CutPrefix(subject, `"`); ok {
		subject, _, _ = strings.Cut(unq, `"`)
	} else {
		subject, _, _ = strings.Cut(subject, " ")
	}
	pe.Subject = subject
	return pe, true
}

// Permissions turns the permissions violations a server reports on a
// connection, which arrive apart from the call that caused them (a request
// the server refused to deliver just waits for its timeout), into that
// call's error, at once. Give Option to nats.Connect, and run each call
// under Context:
//
//	perms := agents.NewPermissions()
//	nc, err := nats.Connect(url, append(opts, perms.Option())...)
//	ctx, cancel := perms.Context(ctx)
//	defer cancel()
//	reply, err := nc.RequestWithContext(ctx, subject, body)
//	err = perms.Err(ctx, err) // a *PermissionError naming the subject refused
//
// Any violation ends every context it made that is still running: a
// connection used for one command at a time, as a command line's is, has
// no other call to blame. It is safe for concurrent use.
type Permissions struct {
	mu struct {
		sync.Mutex
		watching map[*context.CancelCauseFunc]struct{}
	}
}

// NewPermissions returns a Permissions watching no connection yet.
func NewPermissions() *Permissions {
	p := &Permissions{}
	p.mu.watching = map[*context.CancelCauseFunc]struct{}{}
	return p
}

// Option is the nats.Connect option that hands the connection's
// asynchronous errors to p, and then to the error handler set by the
// options before it, if any.
func (p *Permissions) Option() nats.Option {
	return func(o *nats.Options) error {
		prev := o.AsyncErrorCB
		o.AsyncErrorCB = func(nc *nats.Conn, sub *nats.Subscription, err error) {
			p.report(err)
			if prev != nil {
				prev(nc, sub, err)
			}
		}
		return nil
	}
}

func (p *Permissions) report(err error) {
	pe, ok := parseViolation(err)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for cancel := range p.mu.watching {
		(*cancel)(pe)
	}
}

// Context returns a context that ends, with a *PermissionError as its
// cause (context.Cause), when the server reports a permissions violation
// on the connection; and its cancel, which must be called.
func (p *Permissions) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	key := &cancel
	p.mu.Lock()
	p.mu.watching[key] = struct{}{}
	p.mu.Unlock()
	return ctx, func() {
		p.mu.Lock()
		delete(p.mu.watching, key)
		p.mu.Unlock()
		cancel(context.Canceled)
	}
}

// Err returns the *PermissionError that ended ctx, if one did, and err
// otherwise: the error to report of a call made under ctx.
func (p *Permissions) Err(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var pe *PermissionError
	if errors.As(context.Cause(ctx), &pe) {
		return pe
	}
	return err
}
