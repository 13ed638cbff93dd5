package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// stateCommand prints the current values of paths with their versions.
type stateCommand struct{}

func (*stateCommand) Synopsis() string {
	return "print the current values of paths with their versions and the rev"
}

func (c *stateCommand) Run(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("state", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var conn natsFlags
	conn.register(fs, nats.DefaultURL)
	asJSON := fs.Bool("json", false, "print the API's JSON answer")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: coagent state [--nats URL] [--json] PATH...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	body, _ := json.Marshal(map[string][]string{"paths": fs.Args()})
	data, err := conn.request(ctx, "coagent state", conn.subjects().API(intents.APIStateGet), body)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if *asJSON {
		fmt.Fprintln(stdout, string(data))
		return nil
	}
	var out struct {
		Rev    uint64 `json:"rev"`
		Values map[string]struct {
			Exists  bool            `json:"exists"`
			Value   json.RawMessage `json:"value"`
			Version uint64          `json:"version"`
			ModRev  uint64          `json:"mod_rev"`
		} `json:"values"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return fmt.Errorf("state: the coordinator answered %q: %w", data, err)
	}
	for _, p := range fs.Args() {
		v := out.Values[p]
		if !v.Exists {
			fmt.Fprintf(stdout, "%s absent (version %d)\n", p, v.Version)
			continue
		}
		fmt.Fprintf(stdout, "%s = %s (version %d, mod_rev %d)\n", p, v.Value, v.Version, v.ModRev)
	}
	fmt.Fprintf(stdout, "rev %d\n", out.Rev)
	return nil
}
