package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/spf13/cobra"
)

// caseRow is one open case as txn.list lists it with "cases": true: an
// escalation (kind conflict), or a task to reconcile (kind reconcile, its
// id the task, Case the task record).
type caseRow struct {
	ID         string             `json:"id"`
	Kind       string             `json:"kind"`
	Agent      string             `json:"agent,omitempty"`
	IntentKind string             `json:"intent_kind,omitempty"`
	Deadline   time.Time          `json:"deadline,omitzero"`
	Conflicts  []intents.Conflict `json:"conflicts,omitempty"`
	Pending    []string           `json:"pending,omitempty"`
	ModRev     uint64             `json:"mod_rev,omitempty"`
	// By, Quorum and Approvals are an approval case's: who may approve,
	// how many must, how many have.
	By        []string        `json:"by,omitempty"`
	Quorum    int             `json:"quorum,omitempty"`
	Approvals int             `json:"approvals,omitempty"`
	Case      json.RawMessage `json:"case"`
}

// newCaseCmd is `coagent case`: the open cases, for a person to read and
// settle. Its flags belong to the group, so that they may come before the
// subcommand too.
func newCaseCmd(e *env) *cobra.Command {
	var conn natsFlags
	var out output
	list := &cobra.Command{
		Use:   "list",
		Short: "list the open cases: escalations waiting for an arbiter, the nearest deadline first, then tasks to reconcile",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			rows, err := listCases(c.Context(), &conn)
			if err != nil {
				return err
			}
			return printCases(rows, out.json(), e.stdout, e.stderr)
		},
	}
	show := &cobra.Command{
		Use:   "show ID",
		Short: "print one open case as JSON, as the caller may see it: an escalation's intents, the state of their paths, its conflicts and deadline; a task to reconcile, its record",
		Args:  argsBetween(1, 1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			rows, err := listCases(c.Context(), &conn)
			if err != nil {
				return err
			}
			for _, r := range rows {
				if r.ID == args[0] {
					var b bytes.Buffer
					if out.json() {
						b.Write(r.Case)
					} else if err := json.Indent(&b, r.Case, "", "  "); err != nil {
						return fmt.Errorf("case %s: the coordinator answered %q: %w", r.ID, intents.Clip(string(r.Case), 200), err)
					}
					fmt.Fprintln(e.stdout, b.String())
					return nil
				}
			}
			return fmt.Errorf("no open case %s", args[0])
		},
	}
	var res intents.Resolution
	var as string
	resolve := &cobra.Command{
		Use:   "resolve ID",
		Short: "settle an open case as an arbiter: the intents that win (--winner) or lose (--loser), and why (--rationale)",
		Long: "Send the resolution of case ID to the coordinator (arbiter.resolve) as --agent (default the agent of --nkey,\n" +
			"else " + defaultKVAgent + "): --winner and --loser name intents of the case (the escalated one, the propose of the\n" +
			"transaction it conflicts with), each as often as needed; --rationale is recorded with it. Under --auth the\n" +
			"agent needs the role arbiter.",
		Args: argsBetween(1, 1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			if strings.TrimSpace(res.Rationale) == "" {
				return usagef(c, "--rationale: missing; say why, for the log")
			}
			if len(res.Winners) == 0 && len(res.Losers) == 0 {
				return usagef(c, "--winner or --loser: name at least one intent of the case")
			}
			res.Escalation, res.Arbiter = args[0], retryAgent(&conn, as)
			body, err := json.Marshal(res)
			if err != nil {
				return err
			}
			data, err := conn.request(c.Context(), "coagent case", conn.subjects().API(intents.APIArbiterResolve), body)
			if err != nil {
				return fmt.Errorf("case resolve %s: %w", args[0], err)
			}
			var reply struct {
				Settled *bool `json:"settled"`
			}
			if json.Unmarshal(data, &reply) == nil && reply.Settled != nil && !*reply.Settled {
				fmt.Fprintf(e.stdout, "voted on %s as %s: its panel settles it when enough agree\n", args[0], res.Arbiter)
				return nil
			}
			fmt.Fprintf(e.stdout, "resolved %s as %s\n", args[0], res.Arbiter)
			return nil
		},
	}
	fs := resolve.Flags()
	fs.StringArrayVar(&res.Winners, "winner", nil, "an intent of the case that wins")
	fs.StringArrayVar(&res.Losers, "loser", nil, "an intent of the case that loses")
	fs.StringVar(&res.Rationale, "rationale", "", "why, recorded with the resolution (required)")
	fs.StringVar(&as, "agent", "", "the arbiter the resolution is sent as")
	var vote intents.Vote
	voteCmd := func(verdict, use, short string) *cobra.Command {
		cmd := &cobra.Command{
			Use:   use,
			Short: short,
			Long: short + ".\nThe vote goes to the coordinator (case.vote) as --agent (default the agent of --nkey, else " + defaultKVAgent + "),\n" +
				"who must be one the case's rule names in approve.by, and not the intent's own agent. Under --auth it is\n" +
				"the agent of --nkey.",
			Args: argsBetween(1, 1, "ID"),
			RunE: func(c *cobra.Command, args []string) error {
				if verdict == intents.VerdictDeny && strings.TrimSpace(vote.Rationale) == "" {
					return usagef(c, "--reason: missing; say why, for the intent's agent and the log")
				}
				v := intents.Vote{Case: args[0], Agent: retryAgent(&conn, as), Verdict: verdict, Rationale: vote.Rationale}
				return castVote(c.Context(), &conn, v, out.json(), e.stdout)
			},
		}
		name := "rationale"
		if verdict == intents.VerdictDeny {
			name = "reason"
		}
		cmd.Flags().StringVar(&vote.Rationale, name, "", "why, recorded with the vote")
		cmd.Flags().StringVar(&as, "agent", "", "the approver the vote is sent as")
		return cmd
	}
	var answerWhy, answerAs string
	var answerString bool
	answer := &cobra.Command{
		Use:   "answer ID VALUE",
		Short: "answer an input case (an agent's question, meta.ask): VALUE, JSON, is written where the agent said",
		Long: "Send the answer to input case ID (case.vote, verdict answer) as --agent (default the agent of --nkey, else " + defaultKVAgent + ").\n" +
			"VALUE is JSON (42, \"text\", {\"a\": 1}); --string takes it as a string. It must satisfy the question's schema; the\n" +
			"agent's intent is then decided with it as its write's value.",
		Args: argsBetween(2, 2, "ID VALUE"),
		RunE: func(c *cobra.Command, args []string) error {
			value := []byte(args[1])
			if answerString || !json.Valid(value) {
				if !answerString {
					return usagef(c, "VALUE %q: not JSON (quote a string, or give --string)", intents.Clip(args[1], 80))
				}
				value, _ = json.Marshal(args[1])
			}
			v := intents.Vote{Case: args[0], Agent: retryAgent(&conn, answerAs), Verdict: intents.VerdictAnswer, Rationale: answerWhy, Answer: value}
			return castVote(c.Context(), &conn, v, out.json(), e.stdout)
		},
	}
	answer.Flags().StringVar(&answerWhy, "rationale", "", "why, recorded with the answer")
	answer.Flags().StringVar(&answerAs, "agent", "", "the agent the answer is sent as")
	answer.Flags().BoolVar(&answerString, "string", false, "VALUE is a string, even when it reads as JSON")
	approve := voteCmd(intents.VerdictApprove, "approve ID", "approve an approval case: the intent is decided once its quorum has approved")
	deny := voteCmd(intents.VerdictDeny, "deny ID", "deny an approval case: the intent is rejected (arbiter_rejected), naming who denied it and --reason")
	c := group(&cobra.Command{
		Use:   "case",
		Short: "list, show, approve, deny, answer or resolve the open cases (escalations waiting for an arbiter, intents waiting for approval or review, questions, tasks to reconcile)",
	}, list, show, approve, deny, answer, resolve)
	conn.register(c.PersistentFlags(), e.defaultNATS())
	out.register(c.PersistentFlags(), true)
	return c
}

// castVote sends v (case.vote) and prints what it did: the intent's
// decision when the vote decided it, else that the case waits on.
func castVote(ctx context.Context, conn *natsFlags, v intents.Vote, asJSON bool, stdout io.Writer) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	data, err := conn.request(ctx, "coagent case", conn.subjects().API(intents.APICaseVote), body)
	if err != nil {
		return fmt.Errorf("case %s %s: %w", v.Verdict, v.Case, err)
	}
	if asJSON {
		_, err := fmt.Fprintln(stdout, string(data))
		return err
	}
	var reply struct {
		Agent    string            `json:"agent"`
		Decision *intents.Decision `json:"decision"`
	}
	if err := json.Unmarshal(data, &reply); err != nil {
		return fmt.Errorf("case.vote: the coordinator answered %q: %w", intents.Clip(string(data), 200), err)
	}
	past := map[string]string{intents.VerdictApprove: "approved", intents.VerdictDeny: "denied", intents.VerdictAnswer: "answered"}[v.Verdict]
	fmt.Fprintf(stdout, "%s %s as %s\n", past, v.Case, reply.Agent)
	switch d := reply.Decision; {
	case d == nil:
		fmt.Fprintln(stdout, "the case waits for more approvals")
	case d.Reason != "":
		fmt.Fprintf(stdout, "intent %s: %s (%s): %s\n", d.Intent, d.Outcome, d.Reason, d.Detail)
	default:
		fmt.Fprintf(stdout, "intent %s: %s\n", d.Intent, d.Outcome)
	}
	return nil
}

// listCases asks txn.list for the open cases.
func listCases(ctx context.Context, conn *natsFlags) ([]caseRow, error) {
	data, err := conn.request(ctx, "coagent case", conn.subjects().API(intents.APITxnList), []byte(`{"cases":true}`))
	if err != nil {
		return nil, fmt.Errorf("txn.list: %w", err)
	}
	var out struct {
		Cases []caseRow `json:"cases"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("txn.list: the coordinator answered %q: %w", intents.Clip(string(data), 200), err)
	}
	// The nearest deadline first; a case with none (a reconcile) waits
	// for a person whatever the time, after them.
	slices.SortFunc(out.Cases, func(a, b caseRow) int {
		return cmp.Or(cmp.Compare(btoi(a.Deadline.IsZero()), btoi(b.Deadline.IsZero())), a.Deadline.Compare(b.Deadline), strings.Compare(a.ID, b.ID))
	})
	return out.Cases, nil
}

// printCases prints a table with a header, or a JSON array; with none,
// stderr says so.
func printCases(rows []caseRow, asJSON bool, stdout, stderr io.Writer) error {
	if len(rows) == 0 {
		fmt.Fprintln(stderr, "no open cases")
	}
	if asJSON {
		if rows == nil {
			rows = []caseRow{}
		}
		b, err := json.Marshal(rows)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, string(b))
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tDEADLINE\tAGENT\tINTENT\tCONFLICTS")
	for _, r := range rows {
		if r.Kind == "reconcile" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\teffects pending: %s\n", r.ID, r.Kind, strings.Join(r.Pending, ", "))
			continue
		}
		var cs []string
		for _, cf := range r.Conflicts {
			if cf.Kind == intents.ConflictApproval && r.Kind == intents.CaseInput {
				cs = append(cs, fmt.Sprintf("a question, the answer for %s", cf.Path))
				continue
			}
			if cf.Kind == intents.ConflictApproval {
				cs = append(cs, fmt.Sprintf("approval of %s: %d of %d by %s", cf.Path, r.Approvals, r.Quorum, strings.Join(r.By, ", ")))
				continue
			}
			cs = append(cs, fmt.Sprintf("%s %s with %s", cf.Kind, cf.Path, cf.WithAgent))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Kind, r.Deadline.Format(time.RFC3339), r.Agent, r.IntentKind, strings.Join(cs, "; "))
	}
	return tw.Flush()
}
