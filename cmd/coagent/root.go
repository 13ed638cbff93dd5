package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// env is what run was given, handed to every command so that none reads a
// global: the three streams and the environment variables the CLI honours.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// natsURL is $NATS_URL, as the nats CLI reads it: the default of
	// --nats for the commands that talk to a running server.
	natsURL string
}

// defaultNATS is the default of --nats for a client command.
func (e *env) defaultNATS() string {
	if e.natsURL != "" {
		return e.natsURL
	}
	return nats.DefaultURL
}

// newRoot builds the command tree.
func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "coagent",
		Short: "CoAgent: a coordinator of shared state for teams of agents",
		Long: "CoAgent decides the intents of agents against a shared state over NATS JetStream, and logs every decision.\n" +
			"Start with `coagent demo`, or `coagent serve` and `coagent submit`; `coagent COMMAND --help` for one command.",
		Version: version(),
		// A root without a command prints its help; with an unknown one it
		// is a usage error naming the nearest command.
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			return unknownCommand(c, args[0])
		},
		SilenceErrors:     true, // run and main print errors, once
		SilenceUsage:      true, // an error is one line and a hint, never the usage
		CompletionOptions: cobra.CompletionOptions{},
	}
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetVersionTemplate("{{.Version}}")
	// The root and the groups run only to report a missing or unknown
	// subcommand: their usage is `coagent agents [command]` alone.
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "Usage:{{if .Runnable}}", "Usage:{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{cmd: c, msg: err.Error()}
	})
	root.SetHelpCommand(newHelpCmd(root))
	// The command list is in groups, in the order a newcomer meets them.
	groups := []struct {
		id, title string
		cmds      []*cobra.Command
	}{
		{"start", "Run a coordinator:", []*cobra.Command{newDemoCmd(e), newServeCmd(e), newArbiterCmd(e)}},
		{"client", "Talk to a running coordinator (--nats URL, $NATS_URL):", []*cobra.Command{
			newSubmitCmd(e), newPutCmd(e), newDelCmd(e), newIncrCmd(e), newStateCmd(e), newWatchCmd(e), newLogCmd(e), newTxnCmd(e), newTaskCmd(e), newRulesCmd(e), newConflictsCmd(e), newCaseCmd(e),
			newDLQCmd(e), newStatusCmd(e), newShardsCmd(e), newSnapshotCmd(e), newBenchCmd(e), newMCPCmd(e)}},
		{"data", "Work on a data directory (--data DIR):", []*cobra.Command{
			newReplayCmd(e), newVerifyCmd(e), newWhatifCmd(e), newCompactCmd(e), newAgentsCmd(e)}},
		{"offline", "Check documents offline:", []*cobra.Command{newCheckCmd(e), newSchemaCmd(e)}},
	}
	for _, g := range groups {
		root.AddGroup(&cobra.Group{ID: g.id, Title: g.title})
		for _, c := range g.cmds {
			c.GroupID = g.id
			root.AddCommand(c)
		}
	}
	root.AddCommand(newVersionCmd(e))
	return root
}

// usageError is a command line that does not fit the command: an unknown
// flag or command, a missing or extra argument, a flag's bad value.
type usageError struct {
	cmd *cobra.Command // whose --help the hint names
	msg string
}

func (u *usageError) Error() string { return u.cmd.CommandPath() + ": " + u.msg }
func (u *usageError) Unwrap() error { return errUsage }

// usagef is a usage error of c.
func usagef(c *cobra.Command, format string, args ...any) error {
	return &usageError{cmd: c, msg: fmt.Sprintf(format, args...)}
}

// unknownCommand is the usage error of a command c does not have, naming
// the nearest ones.
func unknownCommand(c *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q", name)
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's own default
	}
	if c.HasParent() {
		msg = fmt.Sprintf("unknown command %q for %q", name, c.CommandPath())
	}
	if s := c.SuggestionsFor(name); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return &usageError{cmd: c, msg: msg}
}

// group makes c a command of subcommands only: without one, or with one it
// does not have, it is a usage error.
func group(c *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	c.AddCommand(subs...)
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			var names []string
			for _, s := range c.Commands() {
				if s.IsAvailableCommand() {
					names = append(names, s.Name())
				}
			}
			return usagef(c, "missing subcommand: %s", strings.Join(names, ", "))
		}
		return unknownCommand(c, args[0])
	}
	return c
}

// argsBetween accepts from min to max positional arguments (max < 0: any
// number); what names them in the error, as the usage line does.
func argsBetween(min, max int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		switch {
		case len(args) < min:
			return usagef(c, "missing %s", what)
		case max >= 0 && len(args) > max:
			return usagef(c, "unexpected argument %q", args[max])
		}
		return nil
	}
}

var noArgs = argsBetween(0, 0, "")

// newHelpCmd is `coagent help [COMMAND...]`: the help of that command, on
// stdout, as --help prints it.
func newHelpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND]...",
		Short: "print the help of a command",
		Args:  cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err != nil {
				return usagef(c, "%v", err)
			}
			if len(rest) > 0 {
				return unknownCommand(target, rest[0])
			}
			return target.Help()
		},
		ValidArgsFunction: func(c *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			target, _, err := root.Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []cobra.Completion
			for _, s := range target.Commands() {
				if s.IsAvailableCommand() {
					names = append(names, cobra.CompletionWithDesc(s.Name(), s.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
	}
}

// output is the -o flag (and --json, its synonym where a command had it):
// how a command prints its data.
type output struct{ format string }

const (
	formatTable = "table"
	formatJSON  = "json"
)

// register adds -o to fs, and --json too when json is true.
func (o *output) register(fs *pflag.FlagSet, json bool) {
	o.format = formatTable
	fs.VarP((*formatValue)(&o.format), "output", "o", "output format: table or json")
	if json {
		fs.VarPF((*jsonValue)(&o.format), "json", "", "the same as -o json").NoOptDefVal = "true"
	}
}

func (o *output) json() bool { return o.format == formatJSON }

type formatValue string

func (f *formatValue) String() string { return string(*f) }
func (f *formatValue) Type() string   { return "format" }
func (f *formatValue) Set(v string) error {
	if v != formatTable && v != formatJSON {
		return fmt.Errorf("want %s or %s", formatTable, formatJSON)
	}
	*f = formatValue(v)
	return nil
}

// jsonValue is --json: a boolean that sets -o.
type jsonValue string

func (j *jsonValue) String() string { return fmt.Sprint(*j == formatJSON) }
func (j *jsonValue) Type() string   { return "bool" }
func (j *jsonValue) Set(v string) error {
	switch v {
	case "true":
		*j = formatJSON
	case "false":
		*j = formatTable
	default:
		return fmt.Errorf("want true or false")
	}
	return nil
}
