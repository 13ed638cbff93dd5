package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/coagent/coagent/internal/natsauth"
)

// operatorName is the agent `serve --auth` registers at its first start
// when no agent holds the role admin, so that someone can run the
// administrative commands (rules set, dlq) against the live coordinator.
const operatorName = "admin"

// ensureOperator registers the operator in reg, and writes its seed, when
// no registered agent has the role admin. It says what it did on stderr.
// On a node of a cluster (node is its name, "" alone) it says besides that
// the other nodes need this registry: each node's server admits the agents
// of its own, so a node started on an empty one would make an admin of its
// own, whom the others do not know.
func ensureOperator(data, node string, reg *natsauth.Registry, stderr io.Writer) error {
	for _, a := range reg.Agents {
		if slices.Contains(a.Roles, natsauth.RoleAdmin) {
			return nil
		}
	}
	if _, taken := reg.Agents[operatorName]; taken {
		fmt.Fprintf(stderr, "coagent: no agent has the role admin, so nobody may run rules set or dlq; add one with 'coagent agents add NAME --role admin'\n")
		return nil
	}
	seed, err := reg.Add(operatorName, []string{natsauth.RoleAdmin})
	if err != nil {
		return err
	}
	seedPath, err := writeSeed(data, operatorName, seed)
	if err != nil {
		return err
	}
	if err := reg.Save(natsauth.RegistryPath(data)); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "coagent: registered the operator %q (role admin, for rules set and dlq); its key is %s: keep it secret\n", operatorName, seedPath)
	if node != "" {
		fmt.Fprintf(stderr, "coagent: node %s of a cluster: copy %s to every other node's data directory before it starts, and after each agents add or remove (then SIGHUP): each node admits the agents of its own registry\n",
			node, natsauth.RegistryPath(data))
	}
	return nil
}

// writeSeed writes an agent's nkey seed where `--nkey` finds it, readable
// by its owner only. The seed goes before the registry entry: an entry
// whose seed was lost is useless, a seed without its entry merely unused.
func writeSeed(data, name string, seed []byte) (string, error) {
	path := natsauth.SeedPath(data, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("write the seed of %s: %w", name, err)
	}
	return path, nil
}
