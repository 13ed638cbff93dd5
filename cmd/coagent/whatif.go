package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/whatif"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/spf13/cobra"
)

// newWhatifCmd is `coagent whatif`: the log's intents decided again under
// other rules, and the decisions that would change.
func newWhatifCmd(e *env) *cobra.Command {
	var data, rulesFile string
	var from, until uint64
	var top int
	var failOnChange, cascade bool
	var arbiterTimeout time.Duration
	var out output
	var conn natsFlags
	c := &cobra.Command{
		Use:   "whatif [--rules NEW.json]",
		Short: "decide the log's intents again under other rules (or, without --rules, the recorded ones: a verification) and report the decisions that change",
		Long: "Decide the intents of the running server's log (read through log.query, as an observer or admin must under\n" +
			"--auth), or with --data DIR of a stopped server's, again under --rules. By default each intent is decided\n" +
			"under the new rules against the state and the transactions in flight exactly as they were when it was decided,\n" +
			"while the recorded rules decide the history again (which must come out as recorded: a verification), and the\n" +
			"report compares each intent's decision with the one the new rules would have made (isolated). With --cascade\n" +
			"the recorded intents, resolutions and votes are fed in order, at their recorded times, to an engine under the new\n" +
			"rules alone, and each intent's final decision compared, with the state the new history leaves; later intents are\n" +
			"replayed as they were sent: what an agent would have done after another answer is not known. Either way: the\n" +
			"first divergence, a matrix of recorded × new outcomes, the changes by rule, board and agent, the first divergences\n" +
			"with the command that shows each one's story. Without --rules the recorded rules decide, and any change is\n" +
			"non-determinism (exit 1). Read-only; the same log and rules give the same report.",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var rules []byte
			if rulesFile != "" {
				var err error
				if rules, err = os.ReadFile(rulesFile); err != nil {
					return fmt.Errorf("--rules: %w", err)
				}
			}
			opts := whatif.Options{Rules: rules, From: from, Until: until, Top: top, Cascade: cascade,
				Engine: engine.Config{ArbiterTimeout: arbiterTimeout}}
			var rep *whatif.Report
			var err error
			if c.Flags().Changed("data") {
				for _, flag := range []string{"nats", "nkey", "creds", "subject-prefix"} {
					if c.Flags().Changed(flag) {
						return usagef(c, "--data reads a stopped server's directory, --%s is for a running server: give one", flag)
					}
				}
				log, oerr := openLog(data)
				if oerr != nil {
					return oerr
				}
				defer log.Close()
				rep, err = whatif.Run(log, opts)
			} else {
				nc, cerr := conn.connect("coagent whatif")
				if cerr != nil {
					return cerr
				}
				defer nc.Close()
				data = ""
				rep, err = whatif.RunRemote(func(from uint64) ([]*intents.Event, uint64, error) {
					evs, next, _, err := logPage(c.Context(), nc, &conn, eventlog.Query{From: from, Limit: logPageMax})
					return evs, next, err
				}, opts)
			}
			if rep == nil {
				return err
			}
			if perr := printWhatif(rep, rulesFile, data, out.json(), e.stdout); perr != nil {
				return perr
			}
			if err != nil {
				return err
			}
			if failOnChange && rep.Changed > 0 {
				fmt.Fprintf(e.stderr, "coagent whatif: %d decisions change (--fail-on-change)\n", rep.Changed)
				return exitError(1)
			}
			return nil
		},
	}
	fs := c.Flags()
	fs.StringVar(&data, "data", "", "read the log in the data directory `DIR` of a stopped server (serve's default: "+defaultData+") instead of asking a running one")
	fs.StringVar(&rulesFile, "rules", "", "the rules file to decide under (default: the recorded rules, a verification)")
	fs.Uint64Var(&from, "from", 0, "the first event to decide again (default the log's first; the state before it is the log's)")
	fs.Uint64Var(&until, "until", 0, "the last event (default the log's last)")
	fs.IntVar(&top, "top", 10, "how many divergences to list")
	fs.BoolVar(&failOnChange, "fail-on-change", false, "exit 1 when a decision changes: for CI")
	fs.BoolVar(&cascade, "cascade", false, "feed the recorded intents in order to the new rules alone, rather than decide each against the state as it was (see docs/whatif.md)")
	fs.DurationVar(&arbiterTimeout, "arbiter-timeout", 0, "the --arbiter-timeout the server ran with (default 60s)")
	out.register(fs, true)
	conn.register(fs, e.defaultNATS())
	conn.alt = "or read a stopped server's log with --data DIR"
	return c
}

// printWhatif prints the report as a table, or its JSON.
func printWhatif(rep *whatif.Report, rulesFile, data string, asJSON bool, w io.Writer) error {
	if asJSON {
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	under := "the rules the log recorded (a verification)"
	if rulesFile != "" {
		under = rulesFile
	}
	fmt.Fprintf(w, "whatif: events %d–%d (%d intents) decided again under %s (%s)\n", rep.From, rep.Until, rep.Intents, under, rep.Mode)
	if rep.Changed == 0 {
		fmt.Fprintf(w, "no decision changes\n")
	} else {
		fmt.Fprintf(w, "%d of %d intents change; the first divergence is at event %d\n", rep.Changed, rep.Intents, rep.FirstDivergence)
	}
	fmt.Fprintf(w, "\nrecorded → new\n")
	for _, rec := range slices.Sorted(maps.Keys(rep.Matrix)) {
		for _, nw := range slices.Sorted(maps.Keys(rep.Matrix[rec])) {
			mark := ""
			if rec != nw {
				mark = "  changed"
			}
			fmt.Fprintf(w, "  %-32s %-32s %6d%s\n", rec, nw, rep.Matrix[rec][nw], mark)
		}
	}
	counts := func(title string, m map[string]int) {
		if len(m) == 0 {
			return
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
		fmt.Fprintf(w, "%s: %s\n", title, strings.Join(parts, ", "))
	}
	if rep.Changed > 0 {
		fmt.Fprintln(w)
		counts("changed by rule", rep.ByRule)
		counts("changed by board", rep.ByBoard)
		counts("changed by agent", rep.ByAgent)
		fmt.Fprintf(w, "\ndivergences (the first %d)\n", len(rep.Top))
		for _, d := range rep.Top {
			fmt.Fprintf(w, "  event %d  intent %s of %s\n", d.Seq, d.Intent, d.Agent)
			fmt.Fprintf(w, "    recorded  %s: %s\n", d.Recorded.Key(), d.Recorded.Detail)
			fmt.Fprintf(w, "    new       %s: %s\n", d.New.Key(), d.New.Detail)
			if data != "" {
				fmt.Fprintf(w, "    story     %s --data %s\n", d.Story, data)
			} else {
				fmt.Fprintf(w, "    story     %s\n", d.Story)
			}
		}
	}
	if len(rep.Broken) > 0 {
		fmt.Fprintf(w, "\ninvariants of the new rules the recorded history breaks\n")
		for _, b := range rep.Broken {
			fmt.Fprintf(w, "  %s: first after event %d, after %d changes in all: %s\n", b.Invariant, b.First, b.Changes, b.Detail)
		}
	}
	if rep.Mode == "isolated" {
		fmt.Fprintf(w, "\nstate: sha256 %s (isolated: each intent was decided against the state as it was; the history is the recorded one)\n", rep.RecordedHash)
		return nil
	}
	fmt.Fprintf(w, "\nstate: recorded sha256 %s\n       new      sha256 %s\n", rep.RecordedHash, rep.NewHash)
	if len(rep.PathsDiffer) > 0 {
		fmt.Fprintf(w, "paths whose values differ: %s\n", strings.Join(rep.PathsDiffer, ", "))
	}
	if rep.Mode == "cascade" {
		fmt.Fprintf(w, "later intents were replayed as they were sent: what an agent would have done after another answer is not known\n")
	}
	return nil
}
