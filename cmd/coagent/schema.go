package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/coagent/coagent/schemas"
)

// schemaCommand prints the JSON Schemas of the wire contract, so a client in
// any language can validate what it sends and receives against exactly what
// this binary enforces.
type schemaCommand struct{}

func (*schemaCommand) Synopsis() string {
	return "list the wire contract's JSON Schemas, or print one (coagent schema intent.json)"
}

func (c *schemaCommand) Run(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("schema", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, "usage: coagent schema [NAME]") }
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	switch fs.NArg() {
	case 0:
		for _, name := range schemas.Names() {
			fmt.Fprintln(stdout, name)
		}
		return nil
	case 1:
		b, err := schemas.Get(fs.Arg(0))
		if err != nil {
			return err
		}
		_, err = stdout.Write(b)
		return err
	}
	fs.Usage()
	return errUsage
}
