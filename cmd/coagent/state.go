package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/coagent/coagent/intents"
	"github.com/spf13/cobra"
)

// newStateCmd is `coagent state`: the current values of paths, with their
// versions and the rev they were read at.
func newStateCmd(e *env) *cobra.Command {
	var conn natsFlags
	var out output
	c := &cobra.Command{
		Use:   "state PATH...",
		Short: "print the current values of paths with their versions and the rev",
		Args:  argsBetween(1, -1, "PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			return runState(c.Context(), &conn, &out, args, e.stdout)
		},
	}
	conn.register(c.Flags(), e.defaultNATS())
	out.register(c.Flags(), true)
	return c
}

func runState(ctx context.Context, conn *natsFlags, format *output, paths []string, stdout io.Writer) error {
	body, _ := json.Marshal(map[string][]string{"paths": paths})
	data, err := conn.request(ctx, "coagent state", conn.subjects().API(intents.APIStateGet), body)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if format.json() {
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
	for _, p := range paths {
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
