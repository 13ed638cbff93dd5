// Command coagent is CoAgent's command line: it wires flags, files and
// signals to the packages that do the work, and holds no logic of its own.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	var exit exitError
	switch {
	case errors.As(err, &exit):
		os.Exit(int(exit))
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "coagent:", err)
		os.Exit(1)
	}
}

// exitError ends the program with a status and nothing more to say: the
// command has already printed why.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

var errUsage = errors.New("usage")

// command is one subcommand: its own flags, its usage and what it does.
type command interface {
	Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error
	Synopsis() string
}

func commands() map[string]command {
	return map[string]command{
		"arbiter":   &arbiterCommand{},
		"agents":    &agentsCommand{},
		"bench":     &benchCommand{},
		"check":     &checkCommand{},
		"compact":   &compactCommand{},
		"conflicts": &conflictsCommand{},
		"demo":      &demoCommand{},
		"dlq":       &dlqCommand{},
		"log":       &logCommand{},
		"replay":    &replayCommand{},
		"rules":     &rulesCommand{},
		"schema":    &schemaCommand{},
		"serve":     &serveCommand{},
		"state":     &stateCommand{},
		"submit":    &submitCommand{},
		"verify":    &verifyCommand{},
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "coagent: unknown command %q\n", args[0])
		usage(stderr, cmds)
		return errUsage
	}
	return cmd.Run(ctx, args[1:], stdin, stdout, stderr)
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: coagent <command> [arguments]\n\ncommands:")
	for _, name := range []string{"serve", "arbiter", "submit", "state", "check", "schema", "replay", "log", "verify", "compact", "dlq", "conflicts", "rules", "agents", "bench", "demo"} {
		fmt.Fprintf(w, "  %-8s %s\n", name, cmds[name].Synopsis())
	}
}
