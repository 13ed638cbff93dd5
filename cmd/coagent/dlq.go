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
		Short: "print one dead letter (a case by its id, a dead task by its path) as JSON",
		Args:  argsBetween(1, 1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return runDLQ(c.Context(), &conn, func(_ context.Context, _ *agents.DeadLetters, letters []agents.DeadLetter) error {
				l, err := findLetter(letters, args[0])
				if err != nil {
					return err
				}
				b, _ := json.MarshalIndent(letterBody(*l), "", "  ")
				if out.json() {
					b, _ = json.Marshal(letterBody(*l))
				}
				fmt.Fprintln(e.stdout, string(b))
				return nil
			})
		},
	}
	var retryWait time.Duration
	var retryAs string
	retry := &cobra.Command{
		Use:   "retry ID",
		Short: "send the escalated intent of a dead letter again under a new id, or put a dead task back in its pool, and remove the dead letter",
		Long: "A case: send the escalated intent again under a new id (meta.retry_of names the old one), so it is decided\n" +
			"anew and escalates again if it still conflicts; the dead letter is removed. A dead task (ID its path): apply,\n" +
			"as --agent (one of the task rule's operators), its status back to its pool's and its tries to 0; once that\n" +
			"is applied the dead letter is removed. Then print the new intent's decision as submit does (-o json: its\n" +
			"JSON): the final one, or the latest interim one (escalated, queued) after --wait.\n" +
			"Exits 0 only for applied, granted or committed.",
		Args: argsBetween(1, 1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return runDLQ(c.Context(), &conn, func(ctx context.Context, dl *agents.DeadLetters, letters []agents.DeadLetter) error {
				l, err := findLetter(letters, args[0])
				if err != nil {
					return err
				}
				d, err := retryLetter(ctx, dl, l, retryAgent(&conn, retryAs), retryWait, e.stderr)
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
	retry.Flags().StringVar(&retryAs, "agent", "", "for a dead task: the operator the retry is applied as (default the agent of --nkey, else "+defaultKVAgent+")")
	drop := &cobra.Command{
		Use:   "drop ID",
		Short: "remove a dead letter without retrying it (a dead task keeps its dead status)",
		Args:  argsBetween(1, 1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return runDLQ(c.Context(), &conn, func(ctx context.Context, dl *agents.DeadLetters, letters []agents.DeadLetter) error {
				l, err := findLetter(letters, args[0])
				if err != nil {
					return err
				}
				if err := dl.Remove(ctx, *l); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "dropped %s\n", l.ID())
				return nil
			})
		},
	}
	c := group(&cobra.Command{
		Use:   "dlq",
		Short: "list, show or retry the dead letters: cases no arbiter resolved by their deadline, tasks tried past their max_retries",
	}, list, show, retry, drop)
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
		bodies := make([]any, 0, len(letters))
		for _, l := range letters {
			bodies = append(bodies, letterBody(l))
		}
		b, err := json.Marshal(bodies)
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
		if t := l.Task; t != nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Task, t.Time.Format(time.RFC3339), t.Owner,
				fmt.Sprintf("task %s, %d tries", t.Status, t.Tries), "last try: "+t.Why+errorOf(t))
			continue
		}
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

// errorOf is what a dead task's last owner said of its error, for the
// table.
func errorOf(t *intents.DeadTask) string {
	if len(t.Error) == 0 {
		return ""
	}
	return " (" + intents.Clip(string(t.Error), 60) + ")"
}

func findLetter(letters []agents.DeadLetter, id string) (*agents.DeadLetter, error) {
	for i := range letters {
		if letters[i].ID() == id {
			return &letters[i], nil
		}
	}
	return nil, fmt.Errorf("no dead letter %s", id)
}

// retryAgent is who a dead task's retry is applied as.
func retryAgent(conn *natsFlags, as string) string {
	if as != "" {
		return as
	}
	if a := conn.agent(); a != "" {
		return a
	}
	return defaultKVAgent
}

// retryLetter retries l (a dead task as agent), says so on stderr, and
// returns the new intent's decision: the final one, or after wait the
// latest recorded. A dead task's letter is removed once the retry is
// applied.
func retryLetter(ctx context.Context, dl *agents.DeadLetters, l *agents.DeadLetter, agent string, wait time.Duration, stderr io.Writer) (*intents.Decision, error) {
	retry := dl.Retry
	if l.Task != nil {
		retry = func(ctx context.Context, l agents.DeadLetter) (*intents.Intent, error) {
			return dl.RetryTask(ctx, l, agent)
		}
	}
	again, err := retry(ctx, *l)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "retried %s as intent %s of agent %s\n", l.ID(), again.ID, again.Agent)
	d, err := dl.Decision(ctx, again.ID, wait)
	if err == nil && l.Task != nil && d.Outcome.Success() {
		if err := dl.Remove(ctx, *l); err != nil {
			return nil, fmt.Errorf("retry %s: applied as %s, but %w", l.ID(), again.ID, err)
		}
	}
	var api *agents.APIError
	switch {
	case errors.Is(err, agents.ErrNoDecision):
		err = fmt.Errorf("no decision recorded after %s; 'coagent log --type decision --agent %s' shows it when there is one", wait, again.Agent)
	case errors.As(err, &api):
		err = fmt.Errorf("decision.get: %s: %s", api.Code, api.Description)
	}
	if err != nil {
		return nil, fmt.Errorf("retry %s: sent as %s: %w", l.ID(), again.ID, err)
	}
	return d, nil
}

// letterBody is what show and list -o json print of l: its case, or its
// dead task.
func letterBody(l agents.DeadLetter) any {
	if l.Task != nil {
		return l.Task
	}
	return l.Case
}
