package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/spf13/cobra"
)

// newAgentsCmd is `coagent agents`: the agent registry that `coagent serve
// --auth` admits.
func newAgentsCmd(e *env) *cobra.Command {
	var data string
	var roles []string
	var httpToken bool
	var out output
	add := &cobra.Command{
		Use:   "add NAME [--role ROLE]...",
		Short: "register an agent and write its nkey seed to DATA/agents/NAME.nk",
		Args:  argsBetween(1, 1, "NAME"),
		RunE: func(c *cobra.Command, args []string) error {
			name := args[0]
			// A name is a path segment, which may begin with '-'; such a
			// name is a mistyped flag far more often than an agent.
			if strings.HasPrefix(name, "-") || !intents.ValidSegment(name) {
				return fmt.Errorf("agent name %q: want 1–%d letters, digits, '_' or '-', not beginning with '-'", name, intents.MaxSegmentLen)
			}
			for _, r := range roles {
				if r == "" {
					return usagef(c, "--role: empty role")
				}
			}
			return addAgent(data, name, roles, httpToken, e.stdout, e.stderr)
		},
	}
	add.Flags().StringArrayVar(&roles, "role", nil, "a role of the agent (repeatable): arbiter, observer, or any role the rules name")
	add.Flags().BoolVar(&httpToken, "http", false, "give the agent an HTTP token for serve --auth's console, where a person acts as it (approve, deny, resolve); an observer or arbiter gets one anyway")
	list := &cobra.Command{
		Use:   "list",
		Short: "list the registered agents: name, roles and public nkey",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			return listAgents(data, out.json(), e.stdout, e.stderr)
		},
	}
	out.register(list.Flags(), true)
	c := group(&cobra.Command{
		Use:   "agents",
		Short: "register agents for serve --auth (agents add NAME --role ROLE), list and remove them",
	}, add, list, newAgentsRemoveCmd(e, &data))
	c.PersistentFlags().StringVar(&data, "data", defaultData, "data directory of the server")
	return c
}

// listAgents prints the registry as a table with a header, or as a JSON
// array, by name; with none, stderr says so.
func listAgents(data string, asJSON bool, stdout, stderr io.Writer) error {
	reg, err := natsauth.Load(natsauth.RegistryPath(data))
	if err != nil {
		return err
	}
	type row struct {
		Name  string   `json:"name"`
		Roles []string `json:"roles"`
		Nkey  string   `json:"nkey"`
	}
	rows := []row{}
	for _, n := range slices.Sorted(maps.Keys(reg.Agents)) {
		a := reg.Agents[n]
		rows = append(rows, row{Name: n, Roles: append([]string{}, a.Roles...), Nkey: a.Nkey})
	}
	if len(rows) == 0 {
		fmt.Fprintf(stderr, "no agents registered in %s\n", natsauth.RegistryPath(data))
	}
	if asJSON {
		b, err := json.Marshal(rows)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, string(b))
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLES\tNKEY")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, orNone(r.Roles), r.Nkey)
	}
	return tw.Flush()
}

func addAgent(data, name string, roles []string, httpToken bool, stdout, stderr io.Writer) error {
	path := natsauth.RegistryPath(data)
	reg, err := natsauth.Load(path)
	if err != nil {
		return err
	}
	seed, err := reg.Add(name, roles)
	if err != nil {
		return err
	}
	// An observer reads the HTTP listener of serve --auth (metrics, the
	// console) with a token, an arbiter acts in the console with one, and
	// --http gives one to anyone a person acts as (an approver); the
	// registry keeps its hash.
	var token string
	if httpToken || slices.Contains(roles, natsauth.RoleObserver) || slices.Contains(roles, natsauth.RoleArbiter) {
		if token, err = reg.NewHTTPToken(name); err != nil {
			return err
		}
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
	if token != "" {
		fmt.Fprintf(stdout, "its HTTP token (shown only now): %s\n", token)
		fmt.Fprintf(stderr, "serve --auth's HTTP listener takes it as the header Authorization: Bearer TOKEN, or ?token=TOKEN in a browser\n")
	}
	fmt.Fprintf(stderr, "a running coagent serve --auth admits it after SIGHUP; connect with --nkey %s\n", seedPath)
	return nil
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}
