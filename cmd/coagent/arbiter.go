package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// arbiterCommand runs a built-in rule arbiter until interrupted.
type arbiterCommand struct{}

func (*arbiterCommand) Synopsis() string {
	return "run a rule arbiter (--policy " + strings.Join(arbiter.Policies, "|") + ") on the escalations"
}

func (c *arbiterCommand) Run(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("arbiter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyName := fs.String("policy", "", "the rule: "+strings.Join(arbiter.Policies, ", ")+" (required)")
	name := fs.String("name", "", "the arbiter's name in resolutions and the log (default the policy's name)")
	var conn natsFlags
	conn.register(fs, nats.DefaultURL)
	ackWait := fs.Duration("ack-wait", 30*time.Second, "how long a case held by a silent arbiter waits before it goes to another")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: coagent arbiter --policy "+strings.Join(arbiter.Policies, "|")+" [--name N] [--nats URL] [--prefix P]\n"+
			"priority: the higher priority wins, a tie goes to the transaction in flight\n"+
			"first:    the transaction in flight keeps its grant, the escalated intent loses\n"+
			"reject:   the escalated intent loses\n"+
			"runs until interrupted; logs each case to stderr")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *policyName == "" {
		fs.Usage()
		return errUsage
	}
	policy, err := arbiter.ByName(*policyName)
	if err != nil {
		fmt.Fprintln(stderr, "coagent arbiter:", err)
		fs.Usage()
		return errUsage
	}
	if *name == "" {
		*name = *policyName
	}
	if !intents.ValidSegment(*name) {
		return fmt.Errorf("--name %q: not an agent name", *name)
	}
	nc, err := conn.connect("coagent arbiter " + *name)
	if err != nil {
		return err
	}
	defer nc.Close()
	decide := func(_ context.Context, cs *intents.Escalation) (*intents.Resolution, error) {
		return policy(*name, cs), nil
	}
	fmt.Fprintf(stdout, "coagent: arbiter %s (policy %s) on %s\n", *name, *policyName, nc.ConnectedUrlRedacted())
	err = agents.RunArbiter(ctx, nc, *name, decide, agents.WithPrefix(conn.prefix), agents.WithAckWait(*ackWait),
		agents.WithLogger(slog.New(slog.NewTextHandler(stderr, nil))))
	if err != nil {
		return err
	}
	if err := nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("drain: %w", err)
	}
	fmt.Fprintln(stdout, "coagent: arbiter stopped")
	return nil
}
