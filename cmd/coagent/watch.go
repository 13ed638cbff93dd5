package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/spf13/cobra"
)

// newWatchCmd is `coagent watch PATH`: the changes under a path, as they
// are committed, until interrupted.
func newWatchCmd(e *env) *cobra.Command {
	var conn natsFlags
	var out output
	var from uint64
	c := &cobra.Command{
		Use:   "watch PATH [--from REV]",
		Short: "print each change under a path as it is committed, until interrupted",
		Long: "Follow the commits that touch PATH or anything under it, one line a change (-o json: one JSON object a line):\n" +
			"  rev 12 report.title = \"Q3\" (v3)\n" +
			"from the next commit on, or from revision --from REV on (the log still holds it unless compacted), with no\n" +
			"gaps and each once, until SIGINT. Where the readers rules keep a value from you, the line says redacted.",
		Args: argsBetween(1, 1, "PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			if err := intents.CheckPath(args[0]); err != nil {
				return usagef(c, "PATH %q: %v", args[0], err)
			}
			return runWatch(c.Context(), &conn, args[0], from, out.json(), e.stdout, e.stderr)
		},
	}
	c.Flags().Uint64Var(&from, "from", 0, "start at this revision (default: the next commit)")
	conn.register(c.Flags(), e.defaultNATS())
	out.register(c.Flags(), true)
	return c
}

// watchLine is a change as -o json prints it.
type watchLine struct {
	Rev      uint64            `json:"rev"`
	Time     time.Time         `json:"time"`
	Agent    string            `json:"agent"`
	Intent   string            `json:"intent,omitempty"`
	Txn      string            `json:"txn,omitempty"`
	Writes   []intents.Applied `json:"writes"`
	Redacted []string          `json:"redacted,omitempty"`
}

func runWatch(ctx context.Context, conn *natsFlags, path string, from uint64, asJSON bool, stdout, stderr io.Writer) error {
	nc, err := conn.connect("coagent watch")
	if err != nil {
		return err
	}
	defer nc.Close()
	name := conn.agent()
	if name == "" {
		name = "coagent-watch" // any name: without --auth a watch needs no identity
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cl, err := agents.Connect(ctx, nc, name, agents.WithPrefix(conn.prefix), agents.WithLogger(log))
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer cl.Close()
	// Watch delivers what comes after the revision it is given.
	after := from - min(from, 1)
	if from == 0 {
		st, err := cl.Read(ctx, path)
		if err != nil {
			return fmt.Errorf("watch %s: read the current revision: %w", path, err)
		}
		after = st.Rev
	}
	w, err := cl.Watch(ctx, path, after)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer w.Stop()
	fmt.Fprintf(stderr, "watching %s after rev %d; interrupt to stop\n", path, after)
	enc := json.NewEncoder(stdout)
	for ch := range w.Changes() {
		if asJSON {
			if err := enc.Encode(watchLine{Rev: ch.Rev, Time: ch.Time, Agent: ch.Agent, Intent: ch.Intent, Txn: ch.Txn,
				Writes: ch.Writes, Redacted: ch.Redacted}); err != nil {
				return err
			}
			continue
		}
		if _, err := fmt.Fprintln(stdout, describeChange(&ch)); err != nil {
			return err
		}
	}
	if err := w.Err(); err != nil {
		return err
	}
	return nil
}

// describeChange is a change as one line: `rev 12 report.title = "Q3" (v3)`,
// its writes separated by commas.
func describeChange(ch *agents.Change) string {
	ws := make([]string, 0, len(ch.Writes))
	for _, a := range ch.Writes {
		value := string(a.Value)
		if value == "" {
			value = "(redacted)"
		}
		switch a.Op {
		case intents.OpDelete:
			ws = append(ws, fmt.Sprintf("%s deleted (v%d)", a.Path, a.NewVersion))
		case intents.OpIncr:
			ws = append(ws, fmt.Sprintf("%s += %s (v%d)", a.Path, value, a.NewVersion))
		case intents.OpAppend:
			ws = append(ws, fmt.Sprintf("%s append %s (v%d)", a.Path, value, a.NewVersion))
		default:
			ws = append(ws, fmt.Sprintf("%s = %s (v%d)", a.Path, value, a.NewVersion))
		}
	}
	return fmt.Sprintf("rev %d %s", ch.Rev, strings.Join(ws, ", "))
}
