package natsauth

import (
	"errors"
	"path/filepath"
	"testing"
)

// Remove takes an agent out, and the saved registry no longer has it; an
// unknown name is ErrNotRegistered and changes nothing.
func TestRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agents.json")
	r, _ := Load(path)
	for _, n := range []string{"alice", "bob"} {
		if _, err := r.Add(n, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Remove("alice"); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove("alice"); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("alice removed twice: %v", err)
	}
	if err := r.Save(path); err != nil {
		t.Fatal(err)
	}
	again, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := again.Agents["alice"]; ok || len(again.Agents) != 1 {
		t.Fatalf("after Remove: %v", again.Agents)
	}
}
