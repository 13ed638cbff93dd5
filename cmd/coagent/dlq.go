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

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
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
			return runDLQ(c.Context(), &conn, func(_ context.Context, _ *agents.DeadLetters, letters []agents.DeadLetter) error {
				return printDeadLetters(letters, out.json(), e.stdout, e.stderr)
			})
		},
	}
	show := &cobra.Command{
		Use:   "show ID",
		Short: "print one dead letter, the case as JSON",
		Args:  argsBetween(1, 1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return runDLQ(c.Context(), &conn, func(_ context.Context, _ *agents.DeadLetters, letters []agents.DeadLetter) error {
				l, err := findLetter(letters, args[0])
				if err != nil {
					return err
				}
				b, _ := json.MarshalIndent(l.Case, "", "  ")
				if out.json() {
					b, _ = json.Marshal(l.Case)
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
			return runDLQ(c.Context(), &conn, func(ctx context.Context, dl *agents.DeadLetters, letters []agents.DeadLetter) error {
				l, err := findLetter(letters, args[0])
				if err != nil {
					return err
				}
				d, err := retryLetter(ctx, dl, l, retryWait, e.stderr)
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

// runDLQ opens the dead-letter stream, reads every letter and hands them
// to do.
func runDLQ(ctx context.Context, conn *natsFlags, do func(context.Context, *agents.DeadLetters, []agents.DeadLetter) error) error {
	nc, err := conn.connect("coagent dlq")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancelPerms := conn.guard(ctx)
	defer cancelPerms()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	dl, err := agents.OpenDeadLetters(ctx, nc, agents.WithPrefix(conn.prefix))
	if err != nil {
		name := conn.subjects().Stream(intents.StreamDLQ)
		var ce *connectError
		if err := conn.refused(ctx, err); errors.As(err, &ce) {
			return err
		}
		return fmt.Errorf("dead-letter stream %s: %w", name, err)
	}
	letters, err := dl.List(ctx)
	if err != nil {
		return conn.refused(ctx, err)
	}
	return conn.refused(ctx, do(ctx, dl, letters))
}

// printDeadLetters prints a table with a header, or a JSON array; with
// none, stderr says so.
func printDeadLetters(letters []agents.DeadLetter, asJSON bool, stdout, stderr io.Writer) error {
	if len(letters) == 0 {
		fmt.Fprintln(stderr, "no dead letters")
	}
	if asJSON {
		cases := make([]*intents.Escalation, 0, len(letters))
		for _, l := range letters {
			cases = append(cases, l.Case)
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
		if in := l.Case.Escalated(); in != nil {
			agent, what = in.Agent, string(in.Kind)
			if in.Action != "" {
				what += " " + in.Action
			}
		}
		var cs []string
		for _, cf := range l.Case.Conflicts {
			cs = append(cs, fmt.Sprintf("%s %s with %s", cf.Kind, cf.Path, cf.WithAgent))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.Case.ID, l.Case.Deadline.Format(time.RFC3339), agent, what, strings.Join(cs, "; "))
	}
	return tw.Flush()
}

func findLetter(letters []agents.DeadLetter, id string) (*agents.DeadLetter, error) {
	for i := range letters {
		if letters[i].Case.ID == id {
			return &letters[i], nil
		}
	}
	return nil, fmt.Errorf("no dead letter %s", id)
}

// retryLetter retries l, says so on stderr, and returns the new intent's
// decision: the final one, or after wait the latest recorded.
func retryLetter(ctx context.Context, dl *agents.DeadLetters, l *agents.DeadLetter, wait time.Duration, stderr io.Writer) (*intents.Decision, error) {
	again, err := dl.Retry(ctx, *l)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "retried %s as intent %s of agent %s\n", l.Case.ID, again.ID, again.Agent)
	d, err := dl.Decision(ctx, again.ID, wait)
	var api *agents.APIError
	switch {
	case errors.Is(err, agents.ErrNoDecision):
		err = fmt.Errorf("no decision recorded after %s; 'coagent log --type decision --agent %s' shows it when there is one", wait, again.Agent)
	case errors.As(err, &api):
		err = fmt.Errorf("decision.get: %s: %s", api.Code, api.Description)
	}
	if err != nil {
		return nil, fmt.Errorf("retry %s: sent as %s: %w", l.Case.ID, again.ID, err)
	}
	return d, nil
}
