package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/spf13/cobra"
)

// newLogCmd is `coagent log`: the audit trail, from the log's indexes.
func newLogCmd(e *env) *cobra.Command {
	var data, typ string
	var q eventlog.Query
	var out output
	c := &cobra.Command{
		Use:   "log",
		Short: "query the audit trail by agent, path, type or transaction",
		Long:  "Print the events of a stopped server's log that match every filter given, one a line (-o json: one JSON event a line);\nwhen more match than --limit, stderr says where to go on (more: --from SEQ).",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if typ != "" {
				q.Type = intents.EventType(typ)
				if !slices.Contains(intents.EventTypes, q.Type) {
					return usagef(c, "--type %q: want one of %s", typ, typeNames())
				}
			}
			return runLog(data, q, out.json(), e.stdout, e.stderr)
		},
	}
	fs := c.Flags()
	fs.StringVar(&data, "data", defaultData, "data directory of a stopped server")
	fs.StringVar(&q.Agent, "agent", "", "events of this agent")
	fs.StringVar(&q.Path, "path", "", "events concerning this path, anything under it or an ancestor of it")
	fs.StringVar(&typ, "type", "", "events of this type ("+typeNames()+")")
	fs.StringVar(&q.Txn, "txn", "", "events of this transaction")
	fs.Uint64Var(&q.From, "from", 0, "start at this sequence number")
	fs.IntVar(&q.Limit, "limit", 100, "at most this many events")
	out.register(fs, true)
	return c
}

func runLog(data string, q eventlog.Query, asJSON bool, stdout, stderr io.Writer) error {
	log, err := openLog(data)
	if err != nil {
		return err
	}
	defer log.Close()
	events, next, err := log.Query(q)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	for _, ev := range events {
		if asJSON {
			if err := enc.Encode(ev); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(stdout, summary(ev))
	}
	if next != 0 {
		fmt.Fprintf(stderr, "more: --from %d\n", next)
	}
	return nil
}

func typeNames() string {
	s := make([]string, len(intents.EventTypes))
	for i, t := range intents.EventTypes {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}

// summary is one line a person can read: seq, time, type, agent, and what
// the event says.
func summary(ev *intents.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6d %s %-8s %-12s", ev.Seq, ev.Time.Format(time.RFC3339Nano), ev.Type, ev.Agent)
	if ev.Intent != "" {
		fmt.Fprintf(&b, " intent=%s", ev.Intent)
	}
	if ev.Txn != "" {
		fmt.Fprintf(&b, " txn=%s", ev.Txn)
	}
	switch {
	case ev.Decision != nil:
		d := ev.Decision
		fmt.Fprintf(&b, " %s", d.Outcome)
		if d.Reason != "" {
			fmt.Fprintf(&b, " %s", d.Reason)
		}
		if d.Duplicate {
			b.WriteString(" (duplicate)")
		}
		if d.Detail != "" {
			fmt.Fprintf(&b, ": %s", d.Detail)
		}
	case ev.Change != nil:
		for _, w := range ev.Change.Writes {
			fmt.Fprintf(&b, " %s %s", w.Op, w.Path)
			if len(w.Value) > 0 {
				fmt.Fprintf(&b, "=%s", w.Value)
			}
			fmt.Fprintf(&b, " (v%d→v%d)", w.OldVersion, w.NewVersion)
		}
	case ev.Received != nil && ev.Received.Intent != nil:
		in := ev.Received.Intent
		fmt.Fprintf(&b, " %s", in.Kind)
		if in.Action != "" {
			fmt.Fprintf(&b, " %s", in.Action)
		}
	case ev.Received != nil:
		fmt.Fprintf(&b, " invalid: %s", ev.Received.Error)
	case ev.Notice != nil:
		fmt.Fprintf(&b, " %s: %s", ev.Notice.Kind, ev.Notice.Detail)
	case ev.Release != nil:
		fmt.Fprintf(&b, " %s", ev.Release.Cause)
	case ev.Wait != nil:
		fmt.Fprintf(&b, " until %s", ev.Wait.Deadline.Format(time.RFC3339Nano))
	case ev.Grant != nil:
		fmt.Fprintf(&b, " fence=%d expires %s", ev.Grant.Fence, ev.Grant.Expires.Format(time.RFC3339Nano))
	}
	return b.String()
}
