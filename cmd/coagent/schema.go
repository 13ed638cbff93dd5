package main

import (
	"fmt"

	"github.com/coagent/coagent/schemas"
	"github.com/spf13/cobra"
)

// newSchemaCmd is `coagent schema`: the JSON Schemas of the wire contract,
// so that a client in any language can validate what it sends and receives
// against exactly what this binary enforces.
func newSchemaCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "schema [NAME]",
		Short: "list the wire contract's JSON Schemas, or print one (coagent schema intent.json)",
		Args:  argsBetween(0, 1, ""),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return schemas.Names(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				for _, name := range schemas.Names() {
					fmt.Fprintln(e.stdout, name)
				}
				return nil
			}
			b, err := schemas.Get(args[0])
			if err != nil {
				return err
			}
			_, err = e.stdout.Write(b)
			return err
		},
	}
}
