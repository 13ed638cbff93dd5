package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/coagent/coagent/conflict"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// conflictsCommand shows where conflicts happen.
type conflictsCommand struct{}

func (*conflictsCommand) Synopsis() string {
	return "show the conflict hotspots: by board, document and pair of agents (conflicts top)"
}

func (c *conflictsCommand) Run(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("conflicts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var conn natsFlags
	conn.register(fs, nats.DefaultURL)
	limit := fs.Int("limit", 20, "how many places")
	asJSON := fs.Bool("json", false, "print the API's JSON answer")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: coagent conflicts [--nats URL] [--limit N] [--json] top")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 || fs.Arg(0) != "top" {
		fs.Usage()
		return errUsage
	}
	body, _ := json.Marshal(map[string]int{"limit": *limit})
	data, err := conn.request(ctx, "coagent conflicts", conn.subjects().API(intents.APIConflictsTop), body)
	if err != nil {
		return fmt.Errorf("conflicts top: %w", err)
	}
	if *asJSON {
		fmt.Fprintln(stdout, string(data))
		return nil
	}
	var out struct {
		Spots []conflict.Spot `json:"spots"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return fmt.Errorf("conflicts top: the coordinator answered %q: %w", data, err)
	}
	fmt.Fprintf(stdout, "%-7s %-30s %8s %6s %6s %6s %6s  %s\n", "kind", "name", "last 1m", "total", "merges", "waits", "escal.", "by kind")
	for _, s := range out.Spots {
		var kinds []string
		for k, n := range s.Conflicts {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
		slices.Sort(kinds)
		fmt.Fprintf(stdout, "%-7s %-30s %8d %6d %6d %6d %6d  %s\n", s.Kind, s.Name, s.LastMinute, s.Total, s.Merges,
			s.Waits, s.Escalations, strings.Join(kinds, ", "))
	}
	return nil
}
