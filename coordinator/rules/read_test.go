package rules

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

func TestRedact(t *testing.T) {
	s := compile(t, `{
		"agents": {"o": {"roles": ["observer"]}, "j": {"roles": ["judge"]}},
		"rules": [
			{"pattern": "secrets.**", "readers": ["role:judge"]},
			{"pattern": "tasks.*.private", "readers": ["j", "role:arbiter"]},
			{"pattern": "open.**", "writers": ["j"]}
		]}`)
	state := map[string]any{
		"t1": map[string]any{"title": "a", "private": map[string]any{"x": 1.0}},
		"t2": map[string]any{"title": "b"},
	}
	alice, judge, obs := Viewer{Agent: "alice"}, Viewer{Agent: "j"}, Viewer{Agent: "o"}
	arbiters := Viewer{Roles: []string{RoleArbiter}}
	for _, c := range []struct {
		name   string
		v      Viewer
		path   string
		value  any
		want   any
		hidden []string
	}{
		{"covered path", alice, "secrets.k", "s", nil, []string{"secrets.k"}},
		{"the pattern's own root", alice, "secrets", map[string]any{"k": "s"}, nil, []string{"secrets"}},
		{"members under a wildcard", alice, "tasks", state,
			map[string]any{"t1": map[string]any{"title": "a"}, "t2": map[string]any{"title": "b"}}, []string{"tasks.t1.private"}},
		{"one level down", alice, "tasks.t1", state["t1"], map[string]any{"title": "a"}, []string{"tasks.t1.private"}},
		{"beside the pattern", alice, "tasks.t1.title", "a", "a", nil},
		{"a writers rule keeps nothing from readers", alice, "open.x", 1.0, 1.0, nil},
		{"a reader by role", judge, "secrets.k", "s", "s", nil},
		{"a reader by name", judge, "tasks", state, state, nil},
		{"an observer", obs, "secrets.k", "s", "s", nil},
		{"arbiters by role", arbiters, "tasks.t1", state["t1"], state["t1"], nil},
		{"arbiters and a rule that names no role of theirs", arbiters, "secrets.k", "s", nil, []string{"secrets.k"}},
		{"anyone", Viewer{}, "tasks.t1.private.x", 1.0, nil, []string{"tasks.t1.private.x"}},
	} {
		got, hidden := s.Redact(c.v, c.path, c.value)
		if !reflect.DeepEqual(got, c.want) || !slices.Equal(hidden, c.hidden) {
			t.Errorf("%s: Redact(%+v, %s) = %v, %v; want %v, %v", c.name, c.v, c.path, got, hidden, c.want, c.hidden)
		}
		if may := s.MayRead(c.v, c.path); may != (len(c.hidden) == 0) {
			t.Errorf("%s: MayRead(%+v, %s) = %v", c.name, c.v, c.path, may)
		}
		if hidden := s.Hidden(c.v, c.path); hidden != slices.Equal(c.hidden, []string{c.path}) {
			t.Errorf("%s: Hidden(%+v, %s) = %v", c.name, c.v, c.path, hidden)
		}
	}
	// The state's own value is not changed by a redaction.
	if _, ok := state["t1"].(map[string]any)["private"]; !ok {
		t.Fatal("Redact changed the value it was given")
	}
	if !s.Observer(obs) || s.Observer(judge) || !s.Hides(alice) || s.Hides(obs) {
		t.Fatal("Observer or Hides")
	}
	var none *Set
	if got, hidden := none.Redact(alice, "secrets.k", "s"); got != "s" || hidden != nil || !none.MayRead(alice, "x") {
		t.Fatal("no rules keep nothing")
	}

	raw := json.RawMessage(`{"t1":{"title":"a","private":{"x":1}}}`)
	if got, hidden := s.RedactJSON(alice, "tasks", raw); string(got) != `{"t1":{"title":"a"}}` || !slices.Equal(hidden, []string{"tasks.t1.private"}) {
		t.Errorf("RedactJSON of a member: %s %v", got, hidden)
	}
	if got, hidden := s.RedactJSON(alice, "tasks.t9", json.RawMessage(`{"title":"z"}`)); string(got) != `{"title":"z"}` || hidden != nil {
		t.Errorf("RedactJSON with nothing to hide must give the value back as it was: %s %v", got, hidden)
	}
	if got, hidden := s.RedactJSON(alice, "secrets.k", json.RawMessage(`"s"`)); got != nil || !slices.Equal(hidden, []string{"secrets.k"}) {
		t.Errorf("RedactJSON of a covered path: %s %v", got, hidden)
	}
	// A delete carries no value, and of a covered path it is kept as a set
	// is: those who show writes leave it out by Redacted.
	if got, hidden := s.RedactJSON(alice, "secrets.k", nil); got != nil || !slices.Equal(hidden, []string{"secrets.k"}) {
		t.Errorf("RedactJSON of a delete of a covered path: %s %v", got, hidden)
	}
	if got, hidden := s.RedactJSON(alice, "tasks.t1", nil); got != nil || hidden != nil {
		t.Errorf("RedactJSON of a delete above a kept member keeps nothing: %s %v", got, hidden)
	}
	if _, hidden := s.RedactJSON(judge, "secrets.k", nil); hidden != nil {
		t.Errorf("RedactJSON of a delete the viewer may read: %v", hidden)
	}
}

// A file of roles alone (the registry's, with no --rules file) is not
// empty: it still says who observes and who administers. An admin reads
// what an observer does.
func TestRolesAlone(t *testing.T) {
	set, err := Compile([]byte(`{"agents":{"op":{"roles":["admin"]},"eye":{"roles":["observer"]},"w":{}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if set.Empty() {
		t.Fatal("a file giving roles is empty")
	}
	for agent, want := range map[string][2]bool{"op": {true, true}, "eye": {true, false}, "w": {false, false}, "": {false, false}} {
		v := Viewer{Agent: agent}
		if got := [2]bool{set.Observer(v), set.Holds(v, RoleAdmin)}; got != want {
			t.Errorf("%q: observer, admin = %v, want %v", agent, got, want)
		}
	}
	if !set.Holds(Viewer{Roles: []string{RoleAdmin}}, RoleAdmin) {
		t.Error("a viewer holding admin itself is no admin")
	}
	none, err := Compile([]byte(`{"agents":{"w":{}}}`), nil)
	if err != nil || !none.Empty() {
		t.Errorf("a file giving no role and no rule: empty %v, %v", none.Empty(), err)
	}
}
