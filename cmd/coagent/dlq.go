package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"
)

// newDLQCmd is `coagent dlq`: the cases no arbiter resolved in time, to
// read and to retry. Its flags belong to the group, so that they may come
// before the subcommand too.
func newDLQCmd(e *env) *cobra.Command {
	var conn natsFlags
	var out output
	list := &cobra.Command{
		Use:   "list",
		Short: "list the dead letters, oldest first",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runDLQ(c.Context(), &conn, func(_ context.Context, _ *dlqConn, letters []deadLetter) error {
				return printDeadLetters(letters, out.json(), e.stdout, e.stderr)
			})
		},
	}
	show := &cobra.Command{
		Use:   "show ID",
		Short: "print one dead letter, the case as JSON",
		Args:  argsBetween(1, 1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return runDLQ(c.Context(), &conn, func(_ context.Context, _ *dlqConn, letters []deadLetter) error {
				l, err := findLetter(letters, args[0])
				if err != nil {
					return err
				}
				b, _ := json.MarshalIndent(l.c, "", "  ")
				if out.json() {
					b, _ = json.Marshal(l.c)
				}
				fmt.Fprintln(e.stdout, string(b))
				return nil
			})
		},
	}
	var retryWait time.Duration
	retry := &cobra.Command{
		Use:   "retry ID",
		Short: "send the escalated intent of a dead letter again under a new id, and remove the dead letter",
		Long: "Send the escalated intent again under a new id (meta.retry_of names the old one), so it is decided anew\n" +
			"and escalates again if it still conflicts; the dead letter is removed. Then print the new intent's decision\n" +
			"as submit does (-o json: its JSON): the final one, or the latest interim one (escalated, queued) after --wait.\n" +
			"Exits 0 only for applied, granted or committed.",
		Args: argsBetween(1, 1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return runDLQ(c.Context(), &conn, func(ctx context.Context, dc *dlqConn, letters []deadLetter) error {
				l, err := findLetter(letters, args[0])
				if err != nil {
					return err
				}
				d, err := dc.retry(ctx, l, retryWait, e.stderr)
				if err != nil {
					return err
				}
				if out.json() {
					b, _ := json.MarshalIndent(d, "", "  ")
					fmt.Fprintln(e.stdout, string(b))
				} else {
					fmt.Fprintln(e.stdout, describeDecision(d))
				}
				if !d.Outcome.Success() {
					return exitError(1)
				}
				return nil
			})
		},
	}
	retry.Flags().DurationVar(&retryWait, "wait", 5*time.Second, "how long to wait for a final decision before printing the interim one")
	c := group(&cobra.Command{
		Use:   "dlq",
		Short: "list, show or retry the cases no arbiter resolved by their deadline",
	}, list, show, retry)
	conn.register(c.PersistentFlags(), e.defaultNATS())
	out.register(c.PersistentFlags(), true)
	return c
}

// dlqConn is a connection to the dead-letter stream.
type dlqConn struct {
	nc     *nats.Conn
	subj   intents.Subjects
	js     jetstream.JetStream
	stream jetstream.Stream
}

// runDLQ connects to the dead-letter stream, reads every letter and hands
// them to do.
func runDLQ(ctx context.Context, conn *natsFlags, do func(context.Context, *dlqConn, []deadLetter) error) error {
	nc, err := conn.connect("coagent dlq")
	if err != nil {
		return err
	}
	defer nc.Close()
	dc := &dlqConn{nc: nc, subj: conn.subjects()}
	if dc.js, err = jetstream.New(nc); err != nil {
		return err
	}
	ctx, cancelPerms := conn.guard(ctx)
	defer cancelPerms()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	name := dc.subj.Stream(intents.StreamDLQ)
	if dc.stream, err = dc.js.Stream(ctx, name); err != nil {
		var ce *connectError
		if err := conn.refused(ctx, err); errors.As(err, &ce) {
			return err
		}
		return fmt.Errorf("dead-letter stream %s: %w", name, err)
	}
	letters, err := deadLetters(ctx, dc.stream)
	if err != nil {
		return conn.refused(ctx, err)
	}
	return conn.refused(ctx, do(ctx, dc, letters))
}

// printDeadLetters prints a table with a header, or a JSON array; with
// none, stderr says so.
func printDeadLetters(letters []deadLetter, asJSON bool, stdout, stderr io.Writer) error {
	if len(letters) == 0 {
		fmt.Fprintln(stderr, "no dead letters")
	}
	if asJSON {
		cases := make([]*intents.Escalation, 0, len(letters))
		for _, l := range letters {
			cases = append(cases, l.c)
		}
		b, err := json.Marshal(cases)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, string(b))
		return err
	}
	if len(letters) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tDEADLINE\tAGENT\tINTENT\tCONFLICTS")
	for _, l := range letters {
		agent, what := "-", "-"
		if in := l.c.Escalated(); in != nil {
			agent, what = in.Agent, string(in.Kind)
			if in.Action != "" {
				what += " " + in.Action
			}
		}
		var cs []string
		for _, cf := range l.c.Conflicts {
			cs = append(cs, fmt.Sprintf("%s %s with %s", cf.Kind, cf.Path, cf.WithAgent))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.c.ID, l.c.Deadline.Format(time.RFC3339), agent, what, strings.Join(cs, "; "))
	}
	return tw.Flush()
}

func findLetter(letters []deadLetter, id string) (*deadLetter, error) {
	for i := range letters {
		if letters[i].c.ID == id {
			return &letters[i], nil
		}
	}
	return nil, fmt.Errorf("no dead letter %s", id)
}

// retry sends the letter's escalated intent again under a new id, removes
// the letter and returns the new intent's decision: the final one, or
// after wait the latest recorded.
func (dc *dlqConn) retry(ctx context.Context, l *deadLetter, wait time.Duration, stderr io.Writer) (*intents.Decision, error) {
	id := l.c.ID
	again, err := arbiter.Retry(l.c, ulid.Make().String())
	if err != nil {
		return nil, fmt.Errorf("retry %s: %w", id, err)
	}
	data, err := json.Marshal(again)
	if err != nil {
		return nil, fmt.Errorf("retry %s: %w", id, err)
	}
	if _, err := dc.js.Publish(ctx, dc.subj.Intents(again.Agent), data, jetstream.WithMsgID(again.ID)); err != nil {
		return nil, fmt.Errorf("retry %s: %w", id, err)
	}
	if err := dc.stream.DeleteMsg(ctx, l.seq); err != nil {
		return nil, fmt.Errorf("retry %s: sent as %s, but the dead letter stays: %w", id, again.ID, err)
	}
	fmt.Fprintf(stderr, "retried %s as intent %s of agent %s\n", id, again.ID, again.Agent)
	d, err := dc.decision(ctx, again.ID, again.Agent, wait)
	if err != nil {
		return nil, fmt.Errorf("retry %s: sent as %s: %w", id, again.ID, err)
	}
	return d, nil
}

// decision asks decision.get for the decision of intent id until it is
// final or wait has passed, and returns the latest one; none at all by
// then is an error. The intent went through the stream, whose decisions
// are the agent's to subscribe to: asking the API needs no such right.
func (dc *dlqConn) decision(ctx context.Context, id, agent string, wait time.Duration) (*intents.Decision, error) {
	body, _ := json.Marshal(map[string]string{"intent": id})
	deadline := time.Now().Add(wait)
	var last *intents.Decision
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, 250*time.Millisecond) {
		reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := dc.nc.RequestWithContext(reqCtx, dc.subj.API(intents.APIDecisionGet), body)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("decision.get: %w", err)
		}
		switch err := apiError(resp); {
		case err == nil:
			var d intents.Decision
			if err := json.Unmarshal(resp.Data, &d); err != nil {
				return nil, fmt.Errorf("decision.get: the coordinator answered %q: %w", resp.Data, err)
			}
			if d.Outcome.Final() {
				return &d, nil
			}
			last = &d
		case resp.Header.Get(micro.ErrorCodeHeader) != "not_found":
			return nil, fmt.Errorf("decision.get: %w", err)
		}
		if time.Now().After(deadline) {
			if last != nil {
				return last, nil
			}
			return nil, fmt.Errorf("no decision recorded after %s; 'coagent log --type decision --agent %s' shows it when there is one", wait, agent)
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

type deadLetter struct {
	seq uint64
	c   *intents.Escalation
}

// deadLetters reads every case in the dead-letter stream, oldest first.
func deadLetters(ctx context.Context, stream jetstream.Stream) ([]deadLetter, error) {
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []deadLetter
	if info.State.Msgs == 0 {
		return nil, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // removed by a retry
		}
		if err != nil {
			return nil, fmt.Errorf("dead letter %d: %w", seq, err)
		}
		var c intents.Escalation
		if err := json.Unmarshal(m.Data, &c); err != nil {
			return nil, fmt.Errorf("dead letter %d: %w", seq, err)
		}
		out = append(out, deadLetter{seq: seq, c: &c})
	}
	return out, nil
}
