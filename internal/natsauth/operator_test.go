package natsauth

import (
	"errors"
	"os"
	"slices"
	"testing"
)

// EnsureOperator registers the operator once, with its seed and the
// registry saved; an admin of any name is enough; the operator's name
// held by an agent without the role is said, and nobody is registered.
func TestEnsureOperator(t *testing.T) {
	data := t.TempDir()
	reg := &Registry{Agents: map[string]Agent{}}
	path, err := reg.EnsureOperator(data)
	if err != nil || path != SeedPath(data, OperatorName) || !slices.Equal(reg.Agents[OperatorName].Roles, []string{RoleAdmin}) {
		t.Fatalf("an empty registry: %q %v %v", path, err, reg.Agents)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the seed: %v %v", info, err)
	}
	saved, err := Load(RegistryPath(data))
	if err != nil || saved.Agents[OperatorName].Nkey != reg.Agents[OperatorName].Nkey {
		t.Fatalf("the registry saved: %v %v", saved, err)
	}
	if path, err := saved.EnsureOperator(t.TempDir()); path != "" || err != nil {
		t.Fatalf("again: %q %v", path, err)
	}
	other := &Registry{Agents: map[string]Agent{"boss": {Roles: []string{RoleAdmin}}}}
	if path, err := other.EnsureOperator(t.TempDir()); path != "" || err != nil || len(other.Agents) != 1 {
		t.Fatalf("an admin of another name: %q %v %v", path, err, other.Agents)
	}
	taken := &Registry{Agents: map[string]Agent{OperatorName: {Roles: []string{"writer"}}}}
	if path, err := taken.EnsureOperator(t.TempDir()); path != "" || !errors.Is(err, ErrOperatorNameTaken) {
		t.Fatalf("the name taken: %q %v", path, err)
	}
}
