package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/coagent/coagent/intents"
)

// checkCommand validates intent documents offline, exactly as the
// coordinator would before deciding them: strict decoding, paths, ops and
// values, and the compilation of every condition. It prints the read set the
// coordinator will use, conditions included.
type checkCommand struct{}

func (*checkCommand) Synopsis() string {
	return "validate intent files (or - for stdin) and print their read sets"
}

func (c *checkCommand) Run(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON object per file")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: coagent check [--json] FILE|- ...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	comp := intents.NewCompiler(intents.CompilerOptions{})
	failed := 0
	for _, name := range fs.Args() {
		reads, err := checkFile(comp, name, stdin)
		if err != nil {
			failed++
		}
		if *asJSON {
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
