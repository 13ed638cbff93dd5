package state

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/coagent/coagent/intents"
)

// View is the tree as it would be after a planned change, without applying
// it: what postconditions evaluate against. Only paths the change touches are
// computed; everything else reads through to the tree. The value of each
// change is decoded once, on first use, and shared by every Get.
type View struct {
	t       *Tree
	changes []intents.Applied
	decoded []afterValue // by change, once decoded
	at      time.Time    // when the change would be made (At)
}

type afterValue struct {
	done bool
	ok   bool
	v    any
}

// After returns the view of t with changes applied. changes must come from
// t.Plan and t must not change while the view is in use.
func (t *Tree) After(changes []intents.Applied) *View {
	return &View{t: t, changes: changes}
}

// At sets when the change would be made: the mod_time of the paths it
// touches (ModTime). It returns v.
func (v *View) At(at time.Time) *View {
	v.at = at
	return v
}

// ModTime returns when path would have last changed after the change: the
// view's time (At) where the change touches it, as Version counts, and the
// tree's otherwise. It implements cond.Reader.
func (v *View) ModTime(path string) time.Time {
	if v.Version(path) != v.t.Version(path) {
		if _, ok := v.Get(path); ok {
			return v.at
		}
		return time.Time{}
	}
	return v.t.ModTime(path)
}

// Version returns the version path would have after the change: one more
// where the change touches it — at, above, or under it where something
// exists before or after, as Apply counts.
func (v *View) Version(path string) uint64 {
	n := v.t.Version(path)
	for _, c := range v.changes {
		if !intents.Overlaps(c.Path, path) {
			continue
		}
		if len(path) <= len(c.Path) {
			return n + 1
		}
		_, before := v.t.Get(path)
		_, after := v.Get(path)
		if before || after {
			return n + 1
		}
	}
	return n
}

// GetWithin is Get, and how many object members it reads from the tree,
// as Tree.GetWithin counts them (a value a change decides alone counts 0:
// the size of the intent bounds it); with more than limit it builds
// nothing. It implements cond.Sizer.
func (v *View) GetWithin(path string, limit int64) (any, bool, int64) {
	for _, c := range v.changes {
		if intents.Within(path, c.Path) {
			val, ok := v.Get(path)
			return val, ok, 0
		}
	}
	n := v.t.find(path)
	var m int64
	if n != nil {
		m = n.members(limit)
	}
	if m > limit {
		return nil, true, m
	}
	val, ok := v.Get(path)
	return val, ok, m
}

// Get returns the value at path after the change. What comes from a change
// is shared between calls: it must not be changed.
func (v *View) Get(path string) (any, bool) {
	// A change at or above path decides it alone: planned writes never
	// overlap one another.
	for i, c := range v.changes {
		if intents.Within(path, c.Path) {
			val, ok := v.afterOf(i)
			return descend(val, ok, strings.TrimPrefix(path[len(c.Path):], "."))
		}
	}
	val, ok := v.t.Get(path) // objects come materialized fresh, safe to edit
	for i, c := range v.changes {
		if !intents.Within(c.Path, path) {
			continue
		}
		cv, cok := v.afterOf(i)
		rel := strings.Split(c.Path[len(path)+1:], ".")
		m, isObj := val.(map[string]any)
		if !ok || !isObj {
			m, ok = map[string]any{}, true
			val = m
		}
		for _, seg := range rel[:len(rel)-1] {
			next, isObj := m[seg].(map[string]any)
			if !isObj {
				next = map[string]any{}
				m[seg] = next
			}
			m = next
		}
		if cok {
			m[rel[len(rel)-1]] = cv
		} else {
			delete(m, rel[len(rel)-1])
		}
	}
	return val, ok
}

// afterOf is after(v.changes[i]), decoded once.
func (v *View) afterOf(i int) (any, bool) {
	if v.decoded == nil {
		v.decoded = make([]afterValue, len(v.changes))
	}
	d := &v.decoded[i]
	if !d.done {
		d.v, d.ok = v.after(v.changes[i])
		d.done = true
	}
	return d.v, d.ok
}

// after returns the value at c.Path once c is applied.
func (v *View) after(c intents.Applied) (any, bool) {
	var x any
	if c.Op != intents.OpDelete && json.Unmarshal(c.Value, &x) != nil {
		return nil, false
	}
	switch c.Op {
	case intents.OpDelete:
		return nil, false
	case intents.OpAppend:
		cur, _ := v.t.Get(c.Path)
		arr, _ := cur.([]any)
		return append(arr[:len(arr):len(arr)], x), true
	case intents.OpIncr:
		cur, _ := v.t.Get(c.Path)
		n, _ := cur.(float64)
		d, _ := x.(float64)
		return n + d, true
	}
	return x, true
}

func descend(v any, ok bool, rel string) (any, bool) {
	if rel == "" || !ok {
		return v, ok
	}
	for seg := range strings.SplitSeq(rel, ".") {
		m, isObj := v.(map[string]any)
		if !isObj {
			return nil, false
		}
		if v, ok = m[seg]; !ok {
			return nil, false
		}
	}
	return v, true
}
