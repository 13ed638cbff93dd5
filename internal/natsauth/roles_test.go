package natsauth

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/coordinator/rules"
)

// MergeRoles adds the registry's roles and leaves the rest of the file as
// written, so a mistake in it still meets the rules' own checks.
func TestMergeRoles(t *testing.T) {
	file := []byte(`{"agents":{"boss":{"role":["lead"]},"alice":{"roles":["b"]}},"rules":[]}`)
	merged, err := MergeRoles(file, map[string][]string{"alice": {"a", "b"}, "carol": {"c"}})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Agents map[string]map[string]any `json:"agents"`
	}
	if err := json.Unmarshal(merged, &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]any{"boss": {"role": []any{"lead"}}, "alice": {"roles": []any{"a", "b"}}, "carol": {"roles": []any{"c"}}}
	if !reflect.DeepEqual(doc.Agents, want) {
		t.Fatalf("merged agents %v, want %v", doc.Agents, want)
	}
	if _, err := rules.Compile(merged, cond.NewCompiler(cond.Options{})); err == nil || !strings.Contains(err.Error(), "role") {
		t.Fatalf("the misspelt field compiled: %v", err)
	}
	// No file: the registry's roles are the whole of it.
	merged, err = MergeRoles(nil, map[string][]string{"alice": {"a"}})
	if err != nil || string(merged) != `{"agents":{"alice":{"roles":["a"]}}}` {
		t.Fatalf("roles into no file: %s %v", merged, err)
	}
	if _, err := MergeRoles([]byte(`{"agents":{"alice":{"roles":"a"}}}`), map[string][]string{"alice": {"b"}}); err == nil || !strings.Contains(err.Error(), "agents.alice.roles") {
		t.Fatalf("roles that are not a list: %v", err)
	}
}
