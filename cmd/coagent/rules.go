package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// rulesCommand shows the board rules in force, puts a file in force, or
// checks one offline.
type rulesCommand struct{}

func (*rulesCommand) Synopsis() string {
	return "show the board rules in force (rules get), put a file in force (rules set FILE), or check one (rules check FILE)"
}

func (c *rulesCommand) Run(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var conn natsFlags
	conn.register(fs, nats.DefaultURL)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: coagent rules [--nats URL] get | set FILE | check FILE")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	subj := conn.subjects()
	switch verb := fs.Arg(0); {
	case verb == "get" && fs.NArg() == 1:
		data, err := conn.request(ctx, "coagent rules", subj.API(intents.APIRulesGet), nil)
		if err != nil {
			return fmt.Errorf("rules get: %w", err)
		}
		var cur intents.Rules
		if err := json.Unmarshal(data, &cur); err != nil {
			return fmt.Errorf("rules get: the coordinator answered %q: %w", data, err)
		}
		if cur.Hash == "" {
			fmt.Fprintln(stdout, "no rules in force")
			return nil
		}
		fmt.Fprintf(stdout, "rules %.12s from %s\n%s\n", cur.Hash, cur.Source, cur.File)
		return nil
	case (verb == "set" || verb == "check") && fs.NArg() == 2:
		file, err := os.ReadFile(fs.Arg(1))
		if err != nil {
			return err
		}
		if verb == "check" {
			// The engine's own compiler: the same checks the coordinator
			// makes, with no server.
			if _, err := rules.Compile(file, intents.NewCompiler(intents.CompilerOptions{})); err != nil {
				return fmt.Errorf("%s: %w", fs.Arg(1), err)
			}
			fmt.Fprintf(stdout, "%s: ok\n", fs.Arg(1))
			return nil
		}
		m := nats.NewMsg(subj.API(intents.APIRulesSet))
		m.Data = file
		m.Header.Set(coordinator.HeaderRulesSource, fs.Arg(1))
		body, err := conn.requestMsg(ctx, "coagent rules", m)
		if err != nil {
			return fmt.Errorf("rules set: %w", err)
		}
		var rec struct{ Hash, Source string }
		if err := json.Unmarshal(body, &rec); err != nil {
			return fmt.Errorf("rules set: the coordinator answered %q: %w", body, err)
		}
		fmt.Fprintf(stdout, "rules %.12s from %s in force\n", rec.Hash, rec.Source)
		return nil
	}
	fs.Usage()
	return errUsage
}
