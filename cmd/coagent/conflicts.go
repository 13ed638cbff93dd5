package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/coagent/coagent/conflict"
	"github.com/coagent/coagent/intents"
	"github.com/spf13/cobra"
)

// newConflictsCmd is `coagent conflicts top`: where conflicts happen. Its
// flags belong to the group, so that they may come before `top` too.
func newConflictsCmd(e *env) *cobra.Command {
	var conn natsFlags
	var limit int
	var out output
	top := &cobra.Command{
		Use:   "top",
		Short: "the places with the most conflicts: by path prefix (board, document) and pair of agents",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runConflictsTop(c.Context(), &conn, limit, out.json(), e.stdout)
		},
	}
	c := group(&cobra.Command{
		Use:   "conflicts",
		Short: "show the conflict hotspots: by path prefix (board, document) and pair of agents (conflicts top)",
	}, top)
	fs := c.PersistentFlags()
	conn.register(fs, e.defaultNATS())
	fs.IntVar(&limit, "limit", 20, "how many places")
	out.register(fs, true)
	return c
}

func runConflictsTop(ctx context.Context, conn *natsFlags, limit int, asJSON bool, stdout io.Writer) error {
	body, _ := json.Marshal(map[string]int{"limit": limit})
	data, err := conn.request(ctx, "coagent conflicts", conn.subjects().API(intents.APIConflictsTop), body)
	if err != nil {
		return fmt.Errorf("conflicts top: %w", err)
	}
	if asJSON {
		fmt.Fprintln(stdout, string(data))
		return nil
	}
	var out struct {
		Spots []conflict.Spot `json:"spots"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return fmt.Errorf("conflicts top: the coordinator answered %q: %w", data, err)
	}
	fmt.Fprintf(stdout, "%-7s %-30s %8s %6s %6s %6s %6s %6s  %s\n", "kind", "name", "last 1m", "total", "pre", "merges", "waits", "escal.", "by kind")
	for _, s := range out.Spots {
		var kinds []string
		for k, n := range s.Conflicts {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
		slices.Sort(kinds)
		fmt.Fprintf(stdout, "%-7s %-30s %8d %6d %6d %6d %6d %6d  %s\n", s.Kind, s.Name, s.LastMinute, s.Total, s.Preconditions,
			s.Merges, s.Waits, s.Escalations, strings.Join(kinds, ", "))
	}
	return nil
}
