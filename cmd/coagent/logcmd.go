package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
)

// logCommand queries the audit trail from the log's indexes.
type logCommand struct{}

func (*logCommand) Synopsis() string {
	return "query the audit trail by agent, path, type or transaction"
}

func (c *logCommand) Run(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("log", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", defaultData, "data directory of a stopped server")
	var q eventlog.Query
	var typ string
	fs.StringVar(&q.Agent, "agent", "", "events of this agent")
	fs.StringVar(&q.Path, "path", "", "events concerning this path, anything under it or an ancestor of it")
	fs.StringVar(&typ, "type", "", "events of this type ("+typeNames()+")")
	fs.StringVar(&q.Txn, "txn", "", "events of this transaction")
	fs.Uint64Var(&q.From, "from", 0, "start at this sequence number")
	fs.IntVar(&q.Limit, "limit", 100, "at most this many events")
	asJSON := fs.Bool("json", false, "print one JSON event per line")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: coagent log [--data DIR] [--agent A] [--path P] [--type T] [--txn X] [--from SEQ] [--limit N] [--json]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if typ != "" {
		q.Type = intents.EventType(typ)
		if !slices.Contains(intents.EventTypes, q.Type) {
			return fmt.Errorf("--type %q: want one of %s", typ, typeNames())
		}
	}
	log, err := openLog(*data)
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
		if *asJSON {
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
