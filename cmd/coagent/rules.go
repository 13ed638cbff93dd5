package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// newRulesCmd is `coagent rules`: the board rules in force, a file put in
// force, or one checked offline.
func newRulesCmd(e *env) *cobra.Command {
	var conn natsFlags
	var out output
	get := &cobra.Command{
		Use:   "get",
		Short: "print the rules in force: a summary, or the rules file with -o json",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runRulesGet(c.Context(), &conn, out.json(), e.stdout, e.stderr)
		},
	}
	out.register(get.Flags(), true)
	var shadow bool
	var mode string
	set := &cobra.Command{
		Use:   "set [--shadow [--mode audit|warn]] FILE",
		Short: "put a rules file in force on the running coordinator, or in the shadow (--shadow: decided beside the rules in force, never enforced)",
		Long: "Put a rules file in force on the running coordinator. With --shadow the file is put in force in the shadow\n" +
			"instead: every intent is decided under it too, and each decision it would have changed is recorded as a shadow\n" +
			"event (coagent log --type shadow; coagent_shadow_divergences_total on /metrics); in --mode warn the agent's\n" +
			"decision also carries a warning. The rules in force decide. An empty file (/dev/null) removes the shadow file.\n" +
			"A rule or invariant of the file in force may be in the shadow on its own: \"mode\": \"warn\" or \"audit\".",
		Args: argsBetween(1, 1, "FILE"),
		RunE: func(c *cobra.Command, args []string) error {
			if !shadow && c.Flags().Changed("mode") {
				return usagef(c, "--mode is the shadow file's: it needs --shadow")
			}
			if shadow {
				if mode != intents.ModeAudit && mode != intents.ModeWarn {
					return usagef(c, "--mode %q: want audit or warn", mode)
				}
				return runRulesSet(c.Context(), &conn, args[0], mode, e.stdout)
			}
			return runRulesSet(c.Context(), &conn, args[0], "", e.stdout)
		},
	}
	set.Flags().BoolVar(&shadow, "shadow", false, "put the file in force in the shadow: decided on every intent, never enforced")
	set.Flags().StringVar(&mode, "mode", intents.ModeAudit, "the shadow file's mode: audit (record each divergence) or warn (also warn the agent)")
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "check a rules file offline, as the coordinator would",
		Args:  argsBetween(1, 1, "FILE"),
		RunE: func(_ *cobra.Command, args []string) error {
			file, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			// The engine's own compiler: the same checks the coordinator
			// makes, with no server.
			if _, err := rules.Compile(file, cond.NewCompiler(cond.Options{})); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			fmt.Fprintf(e.stdout, "%s: ok\n", args[0])
			return nil
		},
	}
	c := group(&cobra.Command{
		Use:   "rules",
		Short: "show the board rules in force (rules get), put a file in force (rules set FILE), or check one (rules check FILE)",
	}, get, set, check)
	conn.register(c.PersistentFlags(), e.defaultNATS())
	return c
}

// runRulesGet prints the rules in force: the file itself as JSON, or a
// summary table, with the rules' hash and source on stderr.
func runRulesGet(ctx context.Context, conn *natsFlags, asJSON bool, stdout, stderr io.Writer) error {
	data, err := conn.request(ctx, "coagent rules", conn.subjects().API(intents.APIRulesGet), nil)
	if err != nil {
		return fmt.Errorf("rules get: %w", err)
	}
	var cur intents.Rules
	if err := json.Unmarshal(data, &cur); err != nil {
		return fmt.Errorf("rules get: the coordinator answered %q: %w", data, err)
	}
	if cur.ShadowHash != "" {
		fmt.Fprintf(stderr, "shadow rules %.12s in force (%s): coagent log --type shadow shows what they would change\n",
			cur.ShadowHash, cmp.Or(cur.ShadowMode, intents.ModeAudit))
	}
	if cur.Hash == "" || len(cur.File) == 0 {
		fmt.Fprintln(stderr, "no rules in force")
		if asJSON {
			fmt.Fprintln(stdout, "{}") // an empty rules file: no rules
		}
		return nil
	}
	fmt.Fprintf(stderr, "rules %.12s from %s\n", cur.Hash, cur.Source)
	if asJSON {
		_, err := fmt.Fprintf(stdout, "%s\n", cur.File)
		return err
	}
	var f rules.File
	if err := json.Unmarshal(cur.File, &f); err != nil {
		return fmt.Errorf("rules get: the rules in force do not decode: %w", err)
	}
	return printRules(&f, stdout)
}

// printRules prints a rules file as tables: the rules in order, then the
// invariants, the agents' roles and the quotas, where there are any.
func printRules(f *rules.File, w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	dash := func(xs ...string) string {
		if s := strings.Join(xs, ","); s != "" {
			return s
		}
		return "-"
	}
	fmt.Fprintln(tw, "PATTERN\tKIND\tWRITERS\tREADERS\tON CONFLICT\tPREEMPT\tCHECKS")
	for _, r := range f.Rules {
		if r.Mode != "" && r.Mode != intents.ModeEnforce {
			r.Pattern += " (" + r.Mode + ")"
		}
		var checks []string
		if len(r.Transitions) > 0 {
			var ts []string
			for _, from := range slices.Sorted(maps.Keys(r.Transitions)) {
				ts = append(ts, from+"→"+strings.Join(r.Transitions[from], "|"))
			}
			checks = append(checks, "transitions "+strings.Join(ts, ", "))
		}
		if len(r.Initial) > 0 {
			checks = append(checks, "initial "+strings.Join(r.Initial, "|"))
		}
		if len(r.Schema) > 0 {
			checks = append(checks, "schema")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Pattern, dash(r.Kind), dash(r.Writers...), dash(r.Readers...),
			dash(string(r.OnConflict)), dash(r.Preempt...), dash(strings.Join(checks, "; ")))
	}
	if len(f.Invariants) > 0 {
		fmt.Fprintln(tw, "\nINVARIANT\tEXPR")
		for _, inv := range f.Invariants {
			fmt.Fprintf(tw, "%s\t%s\n", inv.Name, inv.Expr)
		}
	}
	if len(f.Agents) > 0 {
		fmt.Fprintln(tw, "\nAGENT\tROLES")
		for _, name := range slices.Sorted(maps.Keys(f.Agents)) {
			fmt.Fprintf(tw, "%s\t%s\n", name, dash(f.Agents[name].Roles...))
		}
	}
	if len(f.Quotas) > 0 {
		fmt.Fprintln(tw, "\nQUOTA\tINTENTS/S\tBURST\tMAX TXNS")
		for _, who := range slices.Sorted(maps.Keys(f.Quotas)) {
			q := f.Quotas[who]
			fmt.Fprintf(tw, "%s\t%g\t%d\t%d\n", who, q.IntentsPerSecond, q.Burst, q.MaxTxns)
		}
	}
	if l := f.Limits; l != nil {
		b, _ := json.Marshal(l)
		fmt.Fprintf(tw, "\nlimits %s\n", b)
	}
	return tw.Flush()
}

// runRulesSet puts the file at path in force, or in the shadow in mode
// when mode is set.
func runRulesSet(ctx context.Context, conn *natsFlags, path, mode string, stdout io.Writer) error {
	file, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	m := nats.NewMsg(conn.subjects().API(intents.APIRulesSet))
	m.Data = file
	m.Header.Set(coordinator.HeaderRulesSource, path)
	if mode != "" {
		m.Header.Set(coordinator.HeaderRulesShadow, mode)
	}
	body, err := conn.requestMsg(ctx, "coagent rules", m)
	if err != nil {
		return fmt.Errorf("rules set: %w", err)
	}
	var rec struct{ Hash, Source, Shadow string }
	if err := json.Unmarshal(body, &rec); err != nil {
		return fmt.Errorf("rules set: the coordinator answered %q: %w", body, err)
	}
	switch {
	case mode != "" && rec.Hash == "":
		fmt.Fprintf(stdout, "no shadow rules in force\n")
	case mode != "":
		fmt.Fprintf(stdout, "shadow rules %.12s from %s in force (%s)\n", rec.Hash, rec.Source, rec.Shadow)
	default:
		fmt.Fprintf(stdout, "rules %.12s from %s in force\n", rec.Hash, rec.Source)
	}
	return nil
}
