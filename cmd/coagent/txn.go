package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// newTxnCmd is `coagent txn list`: the transactions in flight. Its flags
// belong to the group, so that they may come before `list` too.
func newTxnCmd(e *env) *cobra.Command {
	var conn natsFlags
	var out output
	var agent, path string
	list := &cobra.Command{
		Use:   "list [--agent A] [--path P]",
		Short: "list the transactions in flight: id, agent, fence, lease, writes and reads",
		Long: "List the transactions in flight (the API's txn.list), those of --agent A and touching --path P when given.\n" +
			"Under --auth another agent's transaction shows no fence and its writes without their values. On a cluster,\n" +
			"--node NAME asks that coordinator, a standby too, as far as it has followed the log (stderr says which node answered).",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if msg := conn.checkNode(); msg != "" {
				return usagef(c, "%s", msg)
			}
			if agent != "" && !intents.ValidSegment(agent) {
				return usagef(c, "--agent %q: not an agent name", agent)
			}
			if path != "" {
				if err := intents.CheckPath(path); err != nil {
					return usagef(c, "--path %q: %v", path, err)
				}
			}
			return runTxnList(c.Context(), &conn, agent, path, out.json(), e.stdout, e.stderr)
		},
	}
	list.Flags().StringVar(&agent, "agent", "", "the transactions of this agent")
	list.Flags().StringVar(&path, "path", "", "the transactions that write or read this path, under it or above it")
	conn.registerNode(list.Flags())
	c := group(&cobra.Command{
		Use:   "txn",
		Short: "list the transactions in flight (txn list)",
	}, list)
	conn.register(c.PersistentFlags(), e.defaultNATS())
	out.register(c.PersistentFlags(), true)
	return c
}

// txnRow is one transaction as txn.list answers it.
type txnRow struct {
	Txn          string          `json:"txn"`
	Agent        string          `json:"agent"`
	Fence        *uint64         `json:"fence,omitempty"`
	LeaseExpires time.Time       `json:"lease_expires"`
	Writes       []intents.Write `json:"writes"`
	Reads        []intents.Read  `json:"reads"`
}

func runTxnList(ctx context.Context, conn *natsFlags, agent, path string, asJSON bool, stdout, stderr io.Writer) error {
	body, _ := json.Marshal(map[string]string{"agent": agent, "path": path})
	m := nats.NewMsg(conn.readSubject(intents.APITxnList))
	m.Data = body
	resp, err := conn.requestReply(ctx, "coagent txn", m)
	if err != nil {
		return fmt.Errorf("txn list: %w", err)
	}
	data := resp.Data
	noteAnswered(conn, answeredBy(resp.Header), stderr)
	var out struct {
		Txns []txnRow `json:"txns"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return fmt.Errorf("txn list: the coordinator answered %q: %w", data, err)
	}
	if len(out.Txns) == 0 {
		fmt.Fprintln(stderr, "no transactions in flight")
	}
	if asJSON {
		fmt.Fprintln(stdout, string(data))
		return nil
	}
	if len(out.Txns) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TXN\tAGENT\tFENCE\tLEASE EXPIRES\tWRITES\tREADS")
	for _, t := range out.Txns {
		fence := "-"
		if t.Fence != nil {
			fence = fmt.Sprint(*t.Fence)
		}
		var ws, rs []string
		for _, w := range t.Writes {
			ws = append(ws, string(w.Op)+" "+w.Path)
		}
		for _, r := range t.Reads {
			if r.Version != nil {
				rs = append(rs, fmt.Sprintf("%s@v%d", r.Path, *r.Version))
			} else {
				rs = append(rs, r.Path)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Txn, t.Agent, fence, t.LeaseExpires.Format(time.RFC3339), orDash(ws), orDash(rs))
	}
	return tw.Flush()
}

func orDash(xs []string) string {
	if len(xs) == 0 {
		return "-"
	}
	return strings.Join(xs, ", ")
}
