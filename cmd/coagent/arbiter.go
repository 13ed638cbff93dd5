package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// arbiterFlags are the flags of `coagent arbiter`.
type arbiterFlags struct {
	policy, name string
	conn         natsFlags
	ackWait      time.Duration
}

// newArbiterCmd is `coagent arbiter`: a built-in rule arbiter, until
// interrupted.
func newArbiterCmd(e *env) *cobra.Command {
	var f arbiterFlags
	c := &cobra.Command{
		Use:   "arbiter --policy " + strings.Join(arbiter.Policies, "|"),
		Short: "run a rule arbiter (--policy " + strings.Join(arbiter.Policies, "|") + ") on the escalations",
		Long: "Run a rule arbiter on the escalations until interrupted; it logs each case to stderr.\n" +
			"priority: the higher priority wins, a tie goes to the transaction in flight\n" +
			"first:    the transaction in flight keeps its grant, the escalated intent loses\n" +
			"reject:   the escalated intent loses",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if f.policy == "" {
				return usagef(c, "missing --policy (%s)", strings.Join(arbiter.Policies, ", "))
			}
			policy, err := arbiter.ByName(f.policy)
			if err != nil {
				return usagef(c, "--policy: %v", err)
			}
			return runArbiter(c.Context(), &f, policy, e.stdout, e.stderr)
		},
	}
	fs := c.Flags()
	fs.StringVar(&f.policy, "policy", "", "the rule: "+strings.Join(arbiter.Policies, ", ")+" (required)")
	fs.StringVar(&f.name, "name", "", "the arbiter's name in resolutions and the log (default the policy's name)")
	f.conn.register(fs, e.defaultNATS())
	fs.DurationVar(&f.ackWait, "ack-wait", 30*time.Second, "how long a case held by a silent arbiter waits before it goes to another")
	return c
}

func runArbiter(ctx context.Context, f *arbiterFlags, policy arbiter.Policy, stdout, stderr io.Writer) error {
	if f.name == "" {
		f.name = f.policy
	}
	if !intents.ValidSegment(f.name) {
		return fmt.Errorf("--name %q: not an agent name", f.name)
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	log := logger.With("arbiter", f.name) // as RunArbiter's own lines say
	// An arbiter is started with the server or before it: it waits for
	// the server, and for the coordinator's streams, rather than exit.
	nc, err := f.conn.connectWaiting(ctx, "coagent arbiter "+f.name, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer nc.Close()
	decide := func(_ context.Context, cs *intents.Escalation) (*intents.Resolution, error) {
		return policy(f.name, cs), nil
	}
	fmt.Fprintf(stdout, "coagent: arbiter %s (policy %s) on %s\n", f.name, f.policy, nc.ConnectedUrlRedacted())
	for waited := false; ; waited = true {
		err = agents.RunArbiter(ctx, nc, f.name, decide, agents.WithPrefix(f.conn.prefix), agents.WithAckWait(f.ackWait),
			agents.WithLogger(logger))
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			break
		}
		// The server is up and its coordinator not yet: it makes the
		// arbiters' stream as it starts.
		if !waited {
			log.Info("waiting for the coordinator", "stream", f.conn.subjects().Stream(intents.StreamArbiter))
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			err = nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return err
	}
	if err := nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("drain: %w", err)
	}
	fmt.Fprintln(stdout, "coagent: arbiter stopped")
	return nil
}
