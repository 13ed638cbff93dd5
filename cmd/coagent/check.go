package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/intents"
	"github.com/spf13/cobra"
)

// newCheckCmd is `coagent check`: intent documents validated offline,
// exactly as the coordinator would before deciding them (strict decoding,
// paths, ops and values, and the compilation of every condition), with the
// read set the coordinator will use, conditions included.
func newCheckCmd(e *env) *cobra.Command {
	var out output
	var agent string
	c := &cobra.Command{
		Use:   "check FILE|-...",
		Short: "validate intent files (or - for stdin) and print their read sets",
		Long: "Validate intent files (or - for stdin) as the coordinator would, with no server, and print their read sets,\n" +
			"or every problem of each, a line each; exits 1 if any is invalid. As submit does, an intent without an id\n" +
			"is given one, and one that names no agent --agent's (without --agent, the agent is left to submit's --agent\n" +
			"or --nkey, and said so). -o json prints one JSON object per file.",
		Args: argsBetween(1, -1, "FILE (or - for stdin)"),
		RunE: func(c *cobra.Command, args []string) error {
			if agent != "" && !intents.ValidSegment(agent) {
				return usagef(c, "--agent %q: not an agent name", agent)
			}
			return runCheck(args, agent, out.json(), e.stdin, e.stdout)
		},
	}
	c.Flags().StringVar(&agent, "agent", "", "the intent's agent, where the intent names none, as submit --agent")
	out.register(c.Flags(), true)
	return c
}

// checkAgent is the agent an intent naming none is checked with when
// check has no --agent: submit fills it in from --agent or --nkey.
const checkAgent = "agent"

// checked is what check found of one file.
type checked struct {
	reads    []string
	problems []string
	// noAgent: the intent names no agent and check was given none.
	noAgent bool
}

func runCheck(files []string, agent string, asJSON bool, stdin io.Reader, stdout io.Writer) error {
	comp := cond.NewCompiler(cond.Options{})
	failed := 0
	for _, name := range files {
		r := checkFile(comp, name, agent, stdin)
		ok := len(r.problems) == 0
		if !ok {
			failed++
		}
		if asJSON {
			out := struct {
				File  string `json:"file"`
				OK    bool   `json:"ok"`
				Error string `json:"error,omitempty"` // the first of Errors
				// Errors are every problem found.
				Errors  []string `json:"errors,omitempty"`
				Reads   []string `json:"reads,omitempty"`
				NoAgent bool     `json:"no_agent,omitempty"`
			}{File: name, OK: ok, Errors: r.problems, Reads: r.reads, NoAgent: r.noAgent}
			if !ok {
				out.Error = r.problems[0]
			}
			b, _ := json.Marshal(out)
			fmt.Fprintln(stdout, string(b))
			continue
		}
		for _, p := range r.problems {
			fmt.Fprintf(stdout, "%s: %s\n", name, p)
		}
		if ok {
			note := ""
			if r.noAgent {
				note = "; it names no agent: submit --agent A (or --nkey) gives it one"
			}
			fmt.Fprintf(stdout, "%s: ok; reads %v%s\n", name, r.reads, note)
		}
	}
	if failed > 0 {
		return exitError(1)
	}
	return nil
}

// checkFile checks one intent file: every problem the coordinator would
// find (decoding, fields, and each condition's compilation), or the read
// set.
func checkFile(comp *cond.Compiler, name, agent string, stdin io.Reader) checked {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(io.LimitReader(stdin, intents.MaxIntentSize+1))
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return checked{problems: []string{fmt.Sprintf("read intent: %v", err)}}
	}
	// Fill in what submit fills in, so that the README's intent, which
	// leaves its id and agent to submit, checks as it will be decided.
	fill := agent
	if fill == "" {
		fill = checkAgent
	}
	filled, _, noAgent, err := completeIntent(data, fill, "--agent")
	if err != nil {
		if agent != "" {
			return checked{problems: []string{err.Error()}}
		}
		// The intent names its own agent, which is not the stand-in: check
		// it as written but for its id.
		filled, _, noAgent, _ = completeIntent(data, "", "")
	}
	data = filled
	r := checked{noAgent: noAgent && agent == ""}
	in, problems := intents.DecodeAll(data)
	for _, p := range problems {
		r.problems = append(r.problems, p.Error())
	}
	if in == nil {
		return r
	}
	for _, r2 := range in.Reads {
		r.reads = append(r.reads, r2.Path)
	}
	for _, cond := range []struct {
		field string
		list  []string
		post  bool
	}{{"pre", in.Pre, false}, {"post", in.Post, true}} {
		for i, src := range cond.list {
			field := fmt.Sprintf("%s[%d]", cond.field, i)
			if slices.ContainsFunc(problems, func(p *intents.ValidationError) bool { return p.Field == field }) {
				continue // its problem is said already
			}
			c, err := comp.Compile(field, src, cond.post)
			if err != nil {
				r.problems = append(r.problems, err.Error())
				continue
			}
			r.reads = append(r.reads, c.Paths...)
		}
	}
	if len(r.problems) > 0 {
		r.reads = nil
		return r
	}
	slices.Sort(r.reads)
	r.reads = slices.Compact(r.reads)
	return r
}
