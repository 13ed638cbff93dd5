package agents_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/coagent/coagent/agents"
	"github.com/nats-io/nats.go"
)

// Permissions ends the calls under its contexts with the violation the
// server reported, naming the operation and the subject; any other
// asynchronous error leaves them be; the error handler set before it
// still hears everything.
func TestPermissionsOption(t *testing.T) {
	perms := agents.NewPermissions()
	var heard []error
	o := nats.GetDefaultOptions()
	for _, opt := range []nats.Option{nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { heard = append(heard, err) }), perms.Option()} {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := perms.Context(context.Background())
	defer cancel()
	o.AsyncErrorCB(nil, nil, nats.ErrSlowConsumer)
	if ctx.Err() != nil {
		t.Fatal("a slow consumer ended the call")
	}
	violation := fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Subscription to "coagent.decisions.bob"`)
	o.AsyncErrorCB(nil, nil, violation)
	<-ctx.Done()
	err := perms.Err(ctx, ctx.Err())
	var pe *agents.PermissionError
	if !errors.As(err, &pe) || pe.Op != "subscribe" || pe.Subject != "coagent.decisions.bob" || !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("err = %v, want a *PermissionError for subscribe to coagent.decisions.bob", err)
	}
	if len(heard) != 2 {
		t.Fatalf("the handler before heard %v", heard)
	}
	if perms.Err(ctx, nil) != nil {
		t.Fatal("a call that succeeded got an error")
	}
	// A context made after the violation is not ended by it.
	later, cancel2 := perms.Context(context.Background())
	defer cancel2()
	if later.Err() != nil {
		t.Fatal("a new call was ended by an old violation")
	}
}
