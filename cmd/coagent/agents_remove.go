package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/coagent/coagent/internal/natsauth"
	"github.com/spf13/cobra"
)

// newAgentsRemoveCmd is `coagent agents remove NAME`; data is the group's
// --data.
func newAgentsRemoveCmd(e *env, data *string) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "take an agent out of the registry and delete its nkey seed",
		Long: "Take the agent out of DATA/agents.json and delete DATA/agents/NAME.nk. A running coagent serve --auth\n" +
			"drops it at SIGHUP: its connections are closed and it is refused from then on.",
		Args: argsBetween(1, 1, "NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			return removeAgent(*data, args[0], e.stdout, e.stderr)
		},
	}
}

func removeAgent(data, name string, stdout, stderr io.Writer) error {
	path := natsauth.RegistryPath(data)
	reg, err := natsauth.Load(path)
	if err != nil {
		return err
	}
	if err := reg.Remove(name); err != nil {
		if errors.Is(err, natsauth.ErrNotRegistered) {
			return fmt.Errorf("no agent %s in %s ('coagent agents list --data %s' lists them)", name, path, data)
		}
		return err
	}
	// The registry first: a seed without its entry is merely unused, and
	// the agent is out once the registry says so.
	if err := reg.Save(path); err != nil {
		return err
	}
	seed := natsauth.SeedPath(data, name)
	switch err := os.Remove(seed); {
	case err == nil:
		fmt.Fprintf(stdout, "agent %s removed; its nkey seed %s deleted\n", name, seed)
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(stdout, "agent %s removed (it had no seed in %s)\n", name, seed)
	default:
		return fmt.Errorf("agent %s removed, but its seed stays: %w", name, err)
	}
	fmt.Fprintln(stderr, "a running coagent serve --auth drops it after SIGHUP: its connections are closed, new ones refused")
	return nil
}
