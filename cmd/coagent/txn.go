package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
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
		Short: "list the transactions in flight (txn list); commit, abort or renew one",
	}, list, newTxnEndCmd(e, &conn, &out, intents.KindCommit), newTxnEndCmd(e, &conn, &out, intents.KindAbort),
		newTxnEndCmd(e, &conn, &out, intents.KindRenew))
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

// txnEndFlags are the flags of txn commit, abort and renew.
type txnEndFlags struct {
	fence   uint64
	agent   string
	timeout time.Duration
	// sets, deletes and incrs are commit's --set PATH=VALUE, --delete PATH
	// and --incr PATH=N; writes its --writes FILE.
	sets, deletes, incrs []string
	writes               string
	lease                time.Duration // renew's --lease
}

// newTxnEndCmd is `coagent txn commit|abort|renew TXN`: the intent of that
// kind for a transaction a propose opened, its fence and agent looked up in
// txn.list unless given.
func newTxnEndCmd(e *env, conn *natsFlags, out *output, kind intents.Kind) *cobra.Command {
	var f txnEndFlags
	c := &cobra.Command{
		Use:  string(kind) + " TXN",
		Args: argsBetween(1, 1, "TXN"),
		RunE: func(c *cobra.Command, args []string) error {
			if f.agent != "" && !intents.ValidSegment(f.agent) {
				return usagef(c, "--agent %q: not an agent name", f.agent)
			}
			if c.Flags().Changed("lease") && f.lease < time.Millisecond {
				return usagef(c, "--lease %s: want at least 1ms", f.lease)
			}
			var writes []intents.Write
			if kind == intents.KindCommit {
				var err error
				if writes, err = f.commitWrites(e.stdin); err != nil {
					return usagef(c, "%v", err)
				}
			}
			return runTxnEnd(c, e, conn, out, kind, args[0], &f, writes)
		},
	}
	fs := c.Flags()
	fs.Uint64Var(&f.fence, "fence", 0, "the fencing token of the transaction's grant (default: the one txn list shows)")
	fs.StringVar(&f.agent, "agent", "", "the transaction's agent (default: the agent of --nkey, else the one txn list shows)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the decision")
	switch kind {
	case intents.KindCommit:
		c.Short = "commit a transaction: its writes' values from --set, --delete, --incr or --writes FILE"
		c.Long = "Commit the transaction TXN that a propose opened (its grant says `txn TXN fence N`), with the values of its\n" +
			"writes: --set PATH=VALUE (VALUE as put reads it: JSON, or else a string), --delete PATH, --incr PATH=N, each\n" +
			"as often as needed, or --writes FILE (- for stdin): a JSON array of writes [{\"path\", \"op\", \"value\"}], or an\n" +
			"object {PATH: VALUE, …} of sets. The fence and agent are the ones txn list shows unless --fence and --agent\n" +
			"(or --nkey) say. Prints the decision as submit does; exits 0 only for committed."
		fs.StringArrayVar(&f.sets, "set", nil, "set `PATH=VALUE` (repeatable)")
		fs.StringArrayVar(&f.deletes, "delete", nil, "delete `PATH` (repeatable)")
		fs.StringArrayVar(&f.incrs, "incr", nil, "add to a number: `PATH=N` (repeatable)")
		fs.StringVar(&f.writes, "writes", "", "the writes from `FILE` (- for stdin): an array of writes, or an object of PATH: VALUE sets")
	case intents.KindAbort:
		c.Short = "abort a transaction: its writes are dropped, what it held is free"
		c.Long = "Abort the transaction TXN that a propose opened. The fence and agent are the ones txn list shows unless\n" +
			"--fence and --agent (or --nkey) say. Prints the decision as submit does; exits 0 only for aborted."
	case intents.KindRenew:
		c.Short = "renew a transaction's lease"
		c.Long = "Renew the lease of the transaction TXN that a propose opened, for --lease (default: the lease it had).\n" +
			"The fence and agent are the ones txn list shows unless --fence and --agent (or --nkey) say. Prints the\n" +
			"decision as submit does; exits 0 only for renewed."
		fs.DurationVar(&f.lease, "lease", 0, "the new lease (default: the transaction's own)")
	}
	return c
}

// commitWrites are the writes of commit's flags, in the order given:
// --writes, then --set, --delete and --incr.
func (f *txnEndFlags) commitWrites(stdin io.Reader) ([]intents.Write, error) {
	var writes []intents.Write
	if f.writes != "" {
		var data []byte
		var err error
		if f.writes == "-" {
			data, err = io.ReadAll(io.LimitReader(stdin, intents.MaxIntentSize+1))
		} else {
			data, err = os.ReadFile(f.writes)
		}
		if err != nil {
			return nil, fmt.Errorf("--writes: %w", err)
		}
		if err := json.Unmarshal(data, &writes); err != nil {
			var sets map[string]json.RawMessage
			if json.Unmarshal(data, &sets) != nil {
				return nil, fmt.Errorf("--writes %s: not an array of writes nor an object of PATH: VALUE: %w", f.writes, err)
			}
			for _, p := range slices.Sorted(maps.Keys(sets)) {
				writes = append(writes, intents.Write{Path: p, Op: intents.OpSet, Value: sets[p]})
			}
		}
	}
	for _, kv := range f.sets {
		path, value, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--set %q: want PATH=VALUE", kv)
		}
		writes = append(writes, intents.Write{Path: path, Op: intents.OpSet, Value: jsonOrString(value)})
	}
	for _, path := range f.deletes {
		writes = append(writes, intents.Write{Path: path, Op: intents.OpDelete})
	}
	for _, kv := range f.incrs {
		path, n, ok := strings.Cut(kv, "=")
		if _, err := strconv.ParseFloat(n, 64); !ok || err != nil || !json.Valid([]byte(n)) {
			return nil, fmt.Errorf("--incr %q: want PATH=N, N a number", kv)
		}
		writes = append(writes, intents.Write{Path: path, Op: intents.OpIncr, Value: json.RawMessage(n)})
	}
	return writes, nil
}

// runTxnEnd sends the kind's intent for txn, with the fence and agent of
// txn.list unless f gives them.
func runTxnEnd(c *cobra.Command, e *env, conn *natsFlags, out *output, kind intents.Kind, txn string, f *txnEndFlags, writes []intents.Write) error {
	agent, fence := f.agent, f.fence
	if nk := conn.agent(); agent == "" {
		agent = nk
	}
	if fence == 0 || agent == "" {
		row, err := findTxn(c.Context(), conn, agent, txn)
		if err != nil {
			return err
		}
		if agent == "" {
			agent = row.Agent
		}
		if fence == 0 {
			if row.Fence == nil {
				return fmt.Errorf("txn %s: txn.list shows its fence to its agent, %s, alone: give --fence, or %s's --nkey", txn, row.Agent, row.Agent)
			}
			fence = *row.Fence
		}
	}
	in := map[string]any{"kind": kind, "txn": txn, "fence": fence}
	if len(writes) > 0 {
		in["writes"] = writes
	}
	if f.lease > 0 {
		in["lease_ms"] = f.lease.Milliseconds()
	}
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	success := map[intents.Kind]intents.Outcome{intents.KindCommit: intents.OutcomeCommitted,
		intents.KindAbort: intents.OutcomeAborted, intents.KindRenew: intents.OutcomeRenewed}[kind]
	s := submission{name: c.CommandPath(), conn: conn, timeout: f.timeout, agent: agent, out: out,
		success: func(o intents.Outcome) bool { return o == success }}
	return s.send(c.Context(), data, e.stdout, e.stderr)
}

// findTxn is txn's row of txn.list (of agent's, when known).
func findTxn(ctx context.Context, conn *natsFlags, agent, txn string) (*txnRow, error) {
	body, _ := json.Marshal(map[string]string{"agent": agent})
	data, err := conn.request(ctx, "coagent txn", conn.subjects().API(intents.APITxnList), body)
	if err != nil {
		return nil, fmt.Errorf("txn %s: look up its fence in txn.list: %w", txn, err)
	}
	var out struct {
		Txns []txnRow `json:"txns"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("txn.list: the coordinator answered %q: %w", data, err)
	}
	for i := range out.Txns {
		if out.Txns[i].Txn == txn {
			return &out.Txns[i], nil
		}
	}
	who := ""
	if agent != "" {
		who = " of agent " + agent
	}
	return nil, fmt.Errorf("txn %s: no such transaction in flight%s (coagent txn list shows them; it may have ended or expired)", txn, who)
}
