package agents_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// Each option is of the kind of what it configures, so that an arbiter's
// option given to Connect, or a client's to RunArbiter, does not compile:
// here the type assertions stand in for the compiler.
func TestOptionKinds(t *testing.T) {
	client := map[string]any{
		"WithResend":          agents.WithResend(time.Second),
		"WithRetries":         agents.WithRetries(1),
		"WithBackoff":         agents.WithBackoff(time.Millisecond, time.Second),
		"WithDecisionHook":    agents.WithDecisionHook(func(*intents.Decision) {}),
		"WithTraceparentFunc": agents.WithTraceparentFunc(func(context.Context) string { return "" }),
	}
	arbiter := map[string]any{
		"WithAckWait":        agents.WithAckWait(time.Second),
		"WithRetryDelay":     agents.WithRetryDelay(time.Second),
		"WithResolveTimeout": agents.WithResolveTimeout(time.Second),
	}
	shared := map[string]any{
		"WithPrefix": agents.WithPrefix("p"),
		"WithLogger": agents.WithLogger(nil),
	}
	kinds := func(o any) (isClient, isArbiter bool) {
		_, isClient = o.(agents.Option)
		_, isArbiter = o.(agents.ArbiterOption)
		return
	}
	for name, o := range client {
		if c, a := kinds(o); !c || a {
			t.Errorf("%s: a client option %v, an arbiter option %v; want only a client's", name, c, a)
		}
	}
	for name, o := range arbiter {
		if c, a := kinds(o); c || !a {
			t.Errorf("%s: a client option %v, an arbiter option %v; want only an arbiter's", name, c, a)
		}
	}
	for name, o := range shared {
		if c, a := kinds(o); !c || !a {
			t.Errorf("%s: a client option %v, an arbiter option %v; want both", name, c, a)
		}
	}
}

// Bad values are refused before anything is set up, every one named.
func TestOptionsRefuseBadValues(t *testing.T) {
	nc := new(nats.Conn) // never used: the options are checked first
	_, err := agents.Connect(context.Background(), nc, "a", agents.WithResend(0), agents.WithRetries(-1))
	if err == nil || !strings.Contains(err.Error(), "resend 0s") || !strings.Contains(err.Error(), "retries -1") {
		t.Errorf("Connect with bad options: %v", err)
	}
	err = agents.RunArbiter(context.Background(), nc, "judge", agents.ModelArbiter(&agents.ScriptedModel{}),
		agents.WithAckWait(0), agents.WithRetryDelay(-time.Second))
	if err == nil || !strings.Contains(err.Error(), "ack wait 0s") || !strings.Contains(err.Error(), "retry delay -1s") {
		t.Errorf("RunArbiter with bad options: %v", err)
	}
}
