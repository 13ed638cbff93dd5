package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// MergeRoles merges roles (the agent registry's) into the agents of a
// rules file, so that the registry gives agents their roles as well as the
// file does; an empty file is one with no rules. It touches only the
// roles, so whatever else the file says, right or wrong, reaches the
// rules' own checks as written. Its errors name the field that is not of
// the rules file's shape.
func MergeRoles(file []byte, roles map[string][]string) ([]byte, error) {
	if len(roles) == 0 {
		return file, nil
	}
	doc := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(file)) > 0 {
		if err := json.Unmarshal(file, &doc); err != nil {
			return nil, err
		}
	}
	agents := map[string]map[string]json.RawMessage{}
	if raw, ok := doc["agents"]; ok {
		if err := json.Unmarshal(raw, &agents); err != nil {
			return nil, fmt.Errorf("agents: %w", err)
		}
	}
	for name, rs := range roles {
		a := agents[name]
		if a == nil {
			a = map[string]json.RawMessage{}
		}
		var have []string
		if raw, ok := a["roles"]; ok {
			if err := json.Unmarshal(raw, &have); err != nil {
				return nil, fmt.Errorf("agents.%s.roles: %w", name, err)
			}
		}
		for _, r := range rs {
			if !slices.Contains(have, r) {
				have = append(have, r)
			}
		}
		slices.Sort(have)
		raw, err := json.Marshal(have)
		if err != nil {
			return nil, err
		}
		a["roles"] = raw
		agents[name] = a
	}
	raw, err := json.Marshal(agents)
	if err != nil {
		return nil, err
	}
	doc["agents"] = raw
	return json.Marshal(doc)
}
