package natsauth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// OperatorName is the agent EnsureOperator registers, so that someone can
// run the administrative commands (rules set, dlq) against a coordinator
// started with --auth.
const OperatorName = "admin"

// ErrOperatorNameTaken is EnsureOperator's error when no agent has the
// role admin and OperatorName is an agent's without it: nobody may do
// what only an admin may until one is added.
var ErrOperatorNameTaken = errors.New("natsauth: no agent has the role admin, and the operator's name is taken")

// EnsureOperator registers OperatorName with the role admin when no agent
// of r has that role: it writes the agent's seed where --nkey finds it
// (SeedPath) and saves r under the data directory data. It returns the
// seed's path, "" when an admin is registered already.
func (r *Registry) EnsureOperator(data string) (string, error) {
	for _, a := range r.Agents {
		if slices.Contains(a.Roles, RoleAdmin) {
			return "", nil
		}
	}
	if _, taken := r.Agents[OperatorName]; taken {
		return "", ErrOperatorNameTaken
	}
	seed, err := r.Add(OperatorName, []string{RoleAdmin})
	if err != nil {
		return "", err
	}
	// The seed before the registry entry: an entry whose seed was lost
	// is useless, a seed without its entry merely unused.
	path := SeedPath(data, OperatorName)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("write the seed of %s: %w", OperatorName, err)
	}
	if err := r.Save(RegistryPath(data)); err != nil {
		return "", err
	}
	return path, nil
}
