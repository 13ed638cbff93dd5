package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// newSnapshotCmd is `coagent snapshot`: the active coordinator of a
// cluster stores a snapshot of the replicated log now and trims the log
// below it, as it does by itself every serve --snapshot-every events
// (SPEC §10).
func newSnapshotCmd(e *env) *cobra.Command {
	var conn natsFlags
	var out output
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "snapshot [--timeout DURATION]",
		Short: "have a cluster's active coordinator store a snapshot of the replicated log now and trim COAGENT_LOG below it",
		Long: "Ask the active coordinator of a cluster (on PREFIX.cluster.snapshot, which it alone answers) to store a\n" +
			"snapshot of its log in the object store bucket COAGENT_LOG_SNAPSHOTS now, as it does every serve\n" +
			"--snapshot-every events, and to trim COAGENT_LOG below it: below the lowest of the snapshot's message and\n" +
			"the message each coordinator that answers its status has folded. It prints\n" +
			"\n" +
			"  snapshot at event 1204 (log message 402) stored by n1; COAGENT_LOG now starts at message 402\n" +
			"\n" +
			"-o json prints the answer: {seq, log_seq, stored, node, log_first}. A coordinator that joins with an\n" +
			"empty data directory loads the snapshot and follows the log from its message. With no coordinator\n" +
			"active (none runs in cluster mode, or a failover is under way) it fails at once; coagent status shows\n" +
			"the cluster. A coordinator alone compacts its log with coagent compact instead.",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return usagef(c, "--timeout %s: want a duration above 0, such as 2m", timeout)
			}
			return runSnapshot(c.Context(), &conn, out.json(), timeout, e.stdout)
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the snapshot to be stored (it is an export of the whole log)")
	conn.register(c.Flags(), e.defaultNATS())
	out.register(c.Flags(), true)
	return c
}

// runSnapshot asks for the snapshot and prints the answer.
func runSnapshot(ctx context.Context, conn *natsFlags, asJSON bool, timeout time.Duration, stdout io.Writer) error {
	nc, err := conn.connect("coagent snapshot")
	if err != nil {
		return err
	}
	defer nc.Close()
	subj := conn.subjects()
	subject := subj.ClusterSnapshot()
	reqCtx, cancelPerms := conn.guard(ctx)
	defer cancelPerms()
	reqCtx, cancel := context.WithTimeout(reqCtx, timeout)
	defer cancel()
	resp, err := nc.RequestWithContext(reqCtx, subject, nil)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("snapshot: no active coordinator of a cluster answers on %s\n  coagent status shows the cluster's coordinators (a failover may be under way); a coordinator alone compacts its log with coagent compact", subject)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return fmt.Errorf("snapshot: no answer on %s within --timeout %s\n  the snapshot may still be stored: coagent status shows each coordinator's last snapshot", subject, timeout)
	case err != nil:
		return fmt.Errorf("snapshot: %w", conn.refused(reqCtx, err))
	}
	if err := apiError(resp); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	var r intents.SnapshotReply
	if err := json.Unmarshal(resp.Data, &r); err != nil || r.Node == "" {
		if err == nil {
			err = errors.New("no node")
		}
		return fmt.Errorf("snapshot: the coordinator answered %.200q: %w", resp.Data, err)
	}
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, string(b))
		return err
	}
	_, err = fmt.Fprintf(stdout, "snapshot at event %d (log message %d) stored by %s; %s now starts at message %d\n",
		r.Seq, r.LogSeq, r.Node, subj.Stream(intents.StreamLog), r.LogFirst)
	return err
}
