// Command coagent is CoAgent's command line: it wires flags, files and
// signals to the packages that do the work, and holds no logic of its own.
//
// The commands are spf13/cobra commands, one file each: cobra gives each
// command its own help on stdout, flags before or after the arguments,
// shell completion and --version, as etcdctl has them. Each command's
// RunE calls a plain function, so that tests run commands in-process too.
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
	var conn *connectError
	switch {
	case errors.As(err, &exit):
		os.Exit(int(exit))
	case errors.Is(err, errUsage):
		os.Exit(2) // run has said what was wrong and where the help is
	case errors.As(err, &conn):
		// No server, or one that refused us: what the command was about
		// to do adds nothing, and the hint says what to do.
		fmt.Fprintln(os.Stderr, "coagent:", conn)
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "coagent:", err)
		os.Exit(1)
	}
}

// exitError ends the program with a status and nothing more to say: the
// command has already printed why.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// errUsage is what every usage error wraps: the command line was wrong,
// not what it asked for. It exits with status 2.
var errUsage = errors.New("usage")

// run runs the command line args (without the program's name). A usage
// error is reported here, on stderr, as one line and a hint, and comes
// back wrapping errUsage; any other error is the caller's to print.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, natsURL: os.Getenv("NATS_URL")}
	root := newRoot(e)
	root.SetArgs(args)
	_, err := root.ExecuteContextC(ctx)
	var u *usageError
	if errors.As(err, &u) {
		fmt.Fprintf(stderr, "coagent: %s\nrun '%s --help' for usage\n", u.msg, u.cmd.CommandPath())
	}
	return err
}
