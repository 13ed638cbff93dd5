package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/coagent/coagent/internal/natsauth"
)

// agentsCommand manages the agent registry that `coagent serve --auth`
// admits: agents add NAME --role ROLE, agents list.
type agentsCommand struct{}

func (*agentsCommand) Synopsis() string {
	return "register agents for serve --auth (agents add NAME --role ROLE) and list them"
}

func (c *agentsCommand) Run(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprintln(stderr, "usage: coagent agents add NAME [--role ROLE]... [--data DIR]\n       coagent agents list [--data DIR]")
	}
	if len(args) == 0 {
		usage()
		return errUsage
	}
	fs := flag.NewFlagSet("agents "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", defaultData, "data directory of the server")
	var roles roleList
	fs.Var(&roles, "role", "a role of the agent (repeatable): arbiter, observer, or any role the rules name")
	switch args[0] {
	case "add":
		if len(args) < 2 {
			usage()
			return errUsage
		}
		name := args[1]
		if err := fs.Parse(args[2:]); err != nil || fs.NArg() > 0 {
			usage()
			return errUsage
		}
		return addAgent(*data, name, roles, stdout)
	case "list":
		if err := fs.Parse(args[1:]); err != nil || fs.NArg() > 0 {
			usage()
			return errUsage
		}
		reg, err := natsauth.Load(natsauth.RegistryPath(*data))
		if err != nil {
			return err
		}
		for _, n := range slices.Sorted(maps.Keys(reg.Agents)) {
			a := reg.Agents[n]
			fmt.Fprintf(stdout, "%-20s %-24s %s\n", n, strings.Join(a.Roles, ","), a.Nkey)
		}
		return nil
	}
	usage()
	return errUsage
}

func addAgent(data, name string, roles []string, stdout io.Writer) error {
	path := natsauth.RegistryPath(data)
	reg, err := natsauth.Load(path)
	if err != nil {
		return err
	}
	seed, err := reg.Add(name, roles)
	if err != nil {
		return err
	}
	seedPath := natsauth.SeedPath(data, name)
	if err := os.MkdirAll(filepath.Dir(seedPath), 0o700); err != nil {
		return err
	}
	// The seed first: a registry entry whose seed was lost is useless,
	// a seed without its entry is merely unused.
	if err := os.WriteFile(seedPath, append(seed, '\n'), 0o600); err != nil {
		return fmt.Errorf("write the seed: %w", err)
	}
	if err := reg.Save(path); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "agent %s registered (roles: %s); its nkey seed is in %s\n", name, orNone(roles), seedPath)
	fmt.Fprintf(stdout, "a running coagent serve --auth admits it after SIGHUP; connect with --nkey %s\n", seedPath)
	return nil
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

// roleList is a repeatable --role flag.
type roleList []string

func (r *roleList) String() string { return strings.Join(*r, ",") }

func (r *roleList) Set(v string) error {
	if v == "" {
		return errors.New("empty role")
	}
	*r = append(*r, v)
	return nil
}
