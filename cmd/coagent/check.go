package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/coagent/coagent/intents"
	"github.com/spf13/cobra"
)

// newCheckCmd is `coagent check`: intent documents validated offline,
// exactly as the coordinator would before deciding them (strict decoding,
// paths, ops and values, and the compilation of every condition), with the
// read set the coordinator will use, conditions included.
func newCheckCmd(e *env) *cobra.Command {
	var out output
	c := &cobra.Command{
		Use:   "check FILE|-...",
		Short: "validate intent files (or - for stdin) and print their read sets",
		Long:  "Validate intent files (or - for stdin) as the coordinator would, with no server, and print their read sets;\nexits 1 if any is invalid. -o json prints one JSON object per file.",
		Args:  argsBetween(1, -1, "FILE (or - for stdin)"),
		RunE: func(c *cobra.Command, args []string) error {
			return runCheck(args, out.json(), e.stdin, e.stdout)
		},
	}
	out.register(c.Flags(), true)
	return c
}

func runCheck(files []string, asJSON bool, stdin io.Reader, stdout io.Writer) error {
	comp := intents.NewCompiler(intents.CompilerOptions{})
	failed := 0
	for _, name := range files {
		reads, err := checkFile(comp, name, stdin)
		if err != nil {
			failed++
		}
		if asJSON {
			out := struct {
				File  string   `json:"file"`
				OK    bool     `json:"ok"`
				Error string   `json:"error,omitempty"`
				Reads []string `json:"reads,omitempty"`
			}{File: name, OK: err == nil, Reads: reads}
			if err != nil {
				out.Error = err.Error()
			}
			b, _ := json.Marshal(out)
			fmt.Fprintln(stdout, string(b))
			continue
		}
		if err != nil {
			fmt.Fprintf(stdout, "%s: %v\n", name, err)
			continue
		}
		fmt.Fprintf(stdout, "%s: ok; reads %v\n", name, reads)
	}
	if failed > 0 {
		return exitError(1)
	}
	return nil
}

func checkFile(comp *intents.Compiler, name string, stdin io.Reader) ([]string, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(io.LimitReader(stdin, intents.MaxIntentSize+1))
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, fmt.Errorf("read intent: %w", err)
	}
	in, err := intents.Decode(data)
	if err != nil {
		return nil, err
	}
	var reads []string
	for _, r := range in.Reads {
		reads = append(reads, r.Path)
	}
	for kind, list := range map[bool][]string{false: in.Pre, true: in.Post} {
		for i, src := range list {
			field := fmt.Sprintf("pre[%d]", i)
			if kind {
				field = fmt.Sprintf("post[%d]", i)
			}
			cond, err := comp.Compile(field, src, kind)
			if err != nil {
				return nil, err
			}
			reads = append(reads, cond.Paths...)
		}
	}
	slices.Sort(reads)
	return slices.Compact(reads), nil
}
