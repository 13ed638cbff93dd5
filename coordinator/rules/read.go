package rules

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// The roles the coordinator itself gives meaning to, beside the rules'
// own: an observer reads everything (every agent's events, every value);
// an arbiter works the arbiter queue, and a case shows it the values that
// the readers rules let role:arbiter read; an admin, the operator, may put
// rules in force (rules.set) and work the dead letters, and reads
// everything an observer does.
const (
	RoleObserver = "observer"
	RoleArbiter  = "arbiter"
	RoleAdmin    = "admin"
)

// Viewer is who reads the state: an agent, whose roles are the rules'
// (the agent registry's roles are merged into them), plus Roles. A Viewer
// with no Agent stands for anyone who holds Roles; the zero Viewer is
// anyone at all, which is what a value published to every agent must be
// fit for.
type Viewer struct {
	Agent string
	Roles []string
}

// admits reports whether v is one of principals.
func (s *Set) admits(v Viewer, principals []string) bool {
	for _, p := range principals {
		if role, ok := strings.CutPrefix(p, "role:"); ok {
			if slices.Contains(v.Roles, role) || v.Agent != "" && slices.Contains(s.Roles(v.Agent), role) {
				return true
			}
		} else if v.Agent != "" && p == v.Agent {
			return true
		}
	}
	return false
}

// Observer reports whether v reads everything: it holds the role observer,
// or admin.
func (s *Set) Observer(v Viewer) bool {
	return s.Holds(v, RoleObserver) || s.Holds(v, RoleAdmin)
}

// Holds reports whether v holds role: among its own Roles, or given to its
// agent by the rules.
func (s *Set) Holds(v Viewer, role string) bool {
	return slices.Contains(v.Roles, role) || v.Agent != "" && slices.Contains(s.Roles(v.Agent), role)
}

// hiding returns the patterns of the readers rules that do not admit v:
// the paths v may not read.
func (s *Set) hiding(v Viewer) []Pattern {
	if s == nil || s.Observer(v) {
		return nil
	}
	var out []Pattern
	for _, r := range s.rules {
		if len(r.readers) > 0 && !s.admits(v, r.readers) {
			out = append(out, r.pat)
		}
	}
	return out
}

// Hides reports whether some paths are kept from v, so a caller can skip
// the work of Redact when none are.
func (s *Set) Hides(v Viewer) bool { return len(s.hiding(v)) > 0 }

// MayRead reports whether v may read path whole: no readers rule that
// does not admit v covers it or anything under it. (Conditions use
// Authorize, which is the same test.)
func (s *Set) MayRead(v Viewer, path string) bool {
	for _, p := range s.hiding(v) {
		if p.Overlaps(path) {
			return false
		}
	}
	return true
}

// Hidden reports whether path is kept from v whole: a readers rule that
// does not admit v covers it. A path only some members of which are kept
// is not hidden (its name may be shown).
func (s *Set) Hidden(v Viewer, path string) bool {
	for _, p := range s.hiding(v) {
		if p.Covers(path) {
			return true
		}
	}
	return false
}

// Redact returns value, the value at path, as v may read it, and the paths
// kept from v, sorted: nil and [path] when a readers rule that does not
// admit v covers path; otherwise value without the members such a rule
// matches below path. value is not changed (the objects on the way to a
// member removed are copied), so it may be the state's own.
func (s *Set) Redact(v Viewer, path string, value any) (any, []string) {
	hide := s.hiding(v)
	if len(hide) == 0 {
		return value, nil
	}
	depth := strings.Count(path, ".") + 1
	found := map[string]bool{}
	for _, p := range hide {
		if p.Covers(path) {
			return nil, []string{path}
		}
		if p.Overlaps(path) {
			p.walk(path, depth, value, found)
		}
	}
	if len(found) == 0 {
		return value, nil
	}
	hidden := slices.Sorted(maps.Keys(found))
	for _, h := range hidden {
		value = without(value, strings.Split(h[len(path)+1:], "."))
	}
	return value, hidden
}

// RedactJSON is Redact for a value as JSON (a committed write's), which
// comes back re-encoded only when something was removed. A value that
// does not decode is kept from v whole. A write with no value (a delete)
// of a path kept from v whole is named kept too, as a set of it is, so
// that whoever shows writes leaves it out alike.
func (s *Set) RedactJSON(v Viewer, path string, value json.RawMessage) (json.RawMessage, []string) {
	hide := s.hiding(v)
	if len(hide) == 0 {
		return value, nil
	}
	if len(value) == 0 {
		if slices.ContainsFunc(hide, func(p Pattern) bool { return p.Covers(path) }) {
			return nil, []string{path}
		}
		return value, nil
	}
	if !slices.ContainsFunc(hide, func(p Pattern) bool { return p.Overlaps(path) }) {
		return value, nil
	}
	var decoded any
	if json.Unmarshal(value, &decoded) != nil {
		return nil, []string{path}
	}
	out, hidden := s.Redact(v, path, decoded)
	if len(hidden) == 0 {
		return value, nil
	}
	if len(hidden) == 1 && hidden[0] == path {
		return nil, hidden
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, []string{path}
	}
	return b, hidden
}

// without returns value with the member at segs (a path below it)
// removed, copying each object on the way.
func without(value any, segs []string) any {
	obj, ok := value.(map[string]any)
	if !ok {
		return value
	}
	if _, ok := obj[segs[0]]; !ok {
		return value
	}
	cp := maps.Clone(obj)
	if len(segs) == 1 {
		delete(cp, segs[0])
	} else {
		cp[segs[0]] = without(obj[segs[0]], segs[1:])
	}
	return cp
}
