package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coagent/coagent/intents"
)

type kind uint8

const (
	absent kind = iota // deleted, or an ancestor created by a deeper write that was later removed
	leaf               // a JSON scalar or array
	object             // a JSON object whose members are the node's kids
)

// node is one path. Deleted paths stay as absent nodes so that their version
// keeps counting: a path that is deleted and written again never shows an
// old version twice.
type node struct {
	kids    map[string]*node
	val     any
	kind    kind
	version uint64
	modRev  uint64
	// modTime is the time of the change at modRev, in Unix nanoseconds, and
	// modAgent the agent who made it; 0 and "" when the change came without
	// them (Apply), before trees kept them, or (the agent) from no agent.
	modTime  int64
	modAgent string
}

// Tree is the state. It is not safe for concurrent use.
type Tree struct {
	root     node
	rev      uint64
	tracking bool
	touched  []string // paths bumped since Touched was last called
	walked   []*node  // the nodes check went through, for apply to reuse
	stamp    Stamp    // who made the change being applied, and when
}

// Stamp is who made a change and when: what the paths it bumps keep as
// their mod_agent and mod_time.
type Stamp struct {
	Time  time.Time
	Agent string
}

// New returns an empty tree at rev 0.
func New() *Tree {
	return &Tree{root: node{kind: object}}
}

// Rev returns the revision of the last applied change.
func (t *Tree) Rev() uint64 { return t.rev }

// Entry is what the tree knows of one path.
type Entry struct {
	Exists  bool   `json:"exists"`
	Value   any    `json:"value,omitempty"`
	Version uint64 `json:"version"`
	ModRev  uint64 `json:"mod_rev,omitempty"`
}

func (t *Tree) find(path string) *node {
	n := &t.root
	for path != "" {
		seg := path
		if i := strings.IndexByte(path, '.'); i >= 0 {
			seg, path = path[:i], path[i+1:]
		} else {
			path = ""
		}
		n = n.kids[seg]
		if n == nil {
			return nil
		}
	}
	return n
}

// Lookup returns the value, version and mod_rev of path. Values are
// materialized fresh for objects; arrays are shared and must not be changed.
func (t *Tree) Lookup(path string) Entry {
	n := t.find(path)
	if n == nil {
		return Entry{}
	}
	v, ok := n.value()
	return Entry{Exists: ok, Value: v, Version: n.version, ModRev: n.modRev}
}

// Get returns the value at path and whether it exists. It implements
// cond.Reader.
func (t *Tree) Get(path string) (any, bool) {
	n := t.find(path)
	if n == nil {
		return nil, false
	}
	return n.value()
}

// Version returns how many commits changed path or anything under it. It
// implements cond.Reader.
func (t *Tree) Version(path string) uint64 {
	if n := t.find(path); n != nil {
		return n.version
	}
	return 0
}

// ModTime returns when path or anything under it last changed: the time
// of the change at its mod_rev. It is the zero time for a path that does
// not exist, or whose last change came without a time (Apply) or before
// trees kept it. It implements cond.Reader.
func (t *Tree) ModTime(path string) time.Time {
	if n := t.find(path); n != nil && n.kind != absent && n.modTime != 0 {
		return time.Unix(0, n.modTime).UTC()
	}
	return time.Time{}
}

// ModAgent returns the agent whose change is path's mod_rev: "" for a
// path never written, or whose last change no agent made (a reclaim) or
// came before trees kept it.
func (t *Tree) ModAgent(path string) string {
	if n := t.find(path); n != nil {
		return n.modAgent
	}
	return ""
}

// GetWithin is Get, and how many object members (at and under path) the
// value it builds has; with more than limit it builds nothing and returns
// a count past limit. Conditions are charged for a read by it, and refuse
// one too big before it is made. It implements cond.Sizer.
func (t *Tree) GetWithin(path string, limit int64) (any, bool, int64) {
	n := t.find(path)
	if n == nil {
		return nil, false, 0
	}
	if n.kind != object {
		v, ok := n.value()
		return v, ok, 0
	}
	m := n.members(limit)
	if m > limit {
		return nil, true, m
	}
	v, ok := n.value()
	return v, ok, m
}

func (n *node) members(limit int64) int64 {
	if n.kind != object {
		return 0
	}
	var c int64
	for _, k := range n.kids {
		if c > limit {
			break
		}
		if k.kind != absent {
			c += 1 + k.members(limit-c)
		}
	}
	return c
}

func (n *node) value() (any, bool) {
	switch n.kind {
	case leaf:
		return n.val, true
	case object:
		m := make(map[string]any, len(n.kids))
		for k, c := range n.kids {
			if v, ok := c.value(); ok {
				m[k] = v
			}
		}
		return m, true
	}
	return nil, false
}

// Root returns the whole state as one JSON object.
func (t *Tree) Root() map[string]any {
	v, _ := t.root.value()
	return v.(map[string]any)
}

// TypeError says that a write does not fit the value it meets: an incr on a
// string, a set below an array. It is a clean rejection, never a crash.
type TypeError struct {
	Path   string // the write's path
	At     string // the path whose value is in the way
	Op     intents.Op
	Found  string // the JSON type found at At
	Wanted string
}

func (e *TypeError) Error() string {
	if e.At == e.Path {
		return fmt.Sprintf("%s %s: the value there is %s, not %s", e.Op, e.Path, e.Found, e.Wanted)
	}
	return fmt.Sprintf("%s %s: %s is %s, not an object", e.Op, e.Path, e.At, e.Found)
}

// RangeError says that an incr would take a number beyond the range of a
// 64-bit float, where JSON has no number for it. Like a TypeError, it is a
// clean rejection of the write.
type RangeError struct {
	Path  string
	Op    intents.Op
	Value float64 // the number at Path
	By    float64 // the increment
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("%s %s: %s + %s is beyond ±%g, the range of a 64-bit float", e.Op, e.Path,
		strconv.FormatFloat(e.Value, 'g', -1, 64), strconv.FormatFloat(e.By, 'g', -1, 64), math.MaxFloat64)
}

// Plan turns an intent's writes into the changes Apply folds, checking each
// against the current values: merges become one set or delete per key (or
// one set of the whole object where none exists yet), incr gets its default
// of 1. It changes nothing. Writes must not overlap and values must be
// valid, with numbers a 64-bit float holds (intents.Validate ensures both).
// A write that does not fit the value it meets is a *TypeError; an incr
// whose sum is not a finite number is a *RangeError.
func (t *Tree) Plan(writes []intents.Write) ([]intents.Applied, error) {
	out := make([]intents.Applied, 0, len(writes))
	for _, w := range writes {
		n, err := t.check(w.Path, w.Op)
		if err != nil {
			return nil, err
		}
		old := uint64(0)
		if n != nil {
			old = n.version
		}
		a := intents.Applied{Path: w.Path, Op: w.Op, Value: w.Value, OldVersion: old, NewVersion: old + 1}
		switch w.Op {
		case intents.OpIncr:
			if len(a.Value) == 0 {
				a.Value = json.RawMessage("1")
			}
			if err := checkIncr(n, w.Path, a.Value); err != nil {
				return nil, err
			}
		case intents.OpMerge:
			if n == nil || n.kind != object {
				a.Op = intents.OpSet
				a.Value = dropNulls(w.Value)
				break
			}
			var members map[string]json.RawMessage
			if err := json.Unmarshal(w.Value, &members); err != nil {
				return nil, fmt.Errorf("merge %s: %w", w.Path, err)
			}
			for _, k := range slices.Sorted(maps.Keys(members)) {
				p := w.Path + "." + k
				c := Entry{}
				if kid := n.kids[k]; kid != nil {
					c.Version = kid.version
				}
				op, v := intents.OpSet, members[k]
				if string(v) == "null" {
					op, v = intents.OpDelete, nil
				}
				out = append(out, intents.Applied{Path: p, Op: op, Value: v, OldVersion: c.Version, NewVersion: c.Version + 1})
			}
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

// checkIncr verifies that adding by to the number at n (none: 0) gives a
// finite number: the state holds only numbers JSON can write.
func checkIncr(n *node, path string, by json.RawMessage) error {
	d, err := decodeValue(by)
	delta, ok := d.(float64)
	if err != nil || !ok {
		return fmt.Errorf("incr %s: the increment %s is not a number a 64-bit float holds", path, FormatValue(string(by)))
	}
	cur := 0.0
	if n != nil && n.kind == leaf {
		cur, _ = n.val.(float64)
	}
	if sum := cur + delta; math.IsInf(sum, 0) || math.IsNaN(sum) {
		return &RangeError{Path: path, Op: intents.OpIncr, Value: cur, By: delta}
	}
	return nil
}

// dropNulls removes the null members of a merge object that lands where no
// object exists yet: a null in a merge means "delete this key".
func dropNulls(v json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil {
		return v
	}
	changed := false
	for k, x := range m {
		if string(x) == "null" {
			delete(m, k)
			changed = true
		}
	}
	if !changed {
		return v
	}
	b, _ := json.Marshal(m)
	return b
}

// check returns the node at path (nil if none) after verifying that op can
// be applied there: every existing ancestor is an object, and the value at
// path has the type the op needs.
//
// The nodes it goes through below the root, as far as they exist, are left
// in t.walked.
func (t *Tree) check(path string, op intents.Op) (*node, error) {
	n := &t.root
	t.walked = t.walked[:0]
	for rest := path; rest != ""; {
		seg, tail, _ := strings.Cut(rest, ".")
		if n.kind == leaf {
			at := path[:len(path)-len(rest)-1]
			return nil, &TypeError{Path: path, At: at, Op: op, Found: intents.JSONType(n.val), Wanted: "an object"}
		}
		if n.kind == absent {
			return nil, nil // absent ancestors become objects
		}
		if n = n.kids[seg]; n == nil {
			return nil, nil
		}
		t.walked = append(t.walked, n)
		rest = tail
	}
	if n.kind != leaf && n.kind != object {
		return n, nil
	}
	var want string
	switch op {
	case intents.OpIncr:
		if _, ok := n.val.(float64); !ok || n.kind != leaf {
			want = "a number"
		}
	case intents.OpAppend:
		if _, ok := n.val.([]any); !ok || n.kind != leaf {
			want = "an array"
		}
	case intents.OpMerge:
		if n.kind != object {
			want = "an object"
		}
	}
	if want != "" {
		found := "an object"
		if n.kind == leaf {
			found = intents.JSONType(n.val)
		}
		return nil, &TypeError{Path: path, At: path, Op: op, Found: found, Wanted: want}
	}
	return n, nil
}

// Apply folds one committed change at rev: the only way the tree changes.
// Every path written, each of its ancestors and every path under it that
// exists before or after gets its version bumped once and mod_rev set to
// rev. Apply checks the whole change before touching anything, so an error
// (which only a corrupt log can cause) leaves the tree as it was.
func (t *Tree) Apply(rev uint64, writes []intents.Applied) error {
	return t.apply(rev, Stamp{}, writes, true)
}

// ApplyPlan is Apply for a change that Plan made on this tree with nothing
// applied since: it skips re-checking the paths and types Plan checked.
func (t *Tree) ApplyPlan(rev uint64, plan []intents.Applied) error {
	return t.apply(rev, Stamp{}, plan, false)
}

// ApplyAt is Apply for a change stamped by: the paths it bumps keep its
// time and agent (ModTime, ModAgent).
func (t *Tree) ApplyAt(rev uint64, by Stamp, writes []intents.Applied) error {
	return t.apply(rev, by, writes, true)
}

// ApplyPlanAt is ApplyPlan for a change stamped by, as ApplyAt.
func (t *Tree) ApplyPlanAt(rev uint64, by Stamp, plan []intents.Applied) error {
	return t.apply(rev, by, plan, false)
}

func (t *Tree) apply(rev uint64, by Stamp, writes []intents.Applied, verify bool) error {
	if rev <= t.rev {
		return fmt.Errorf("state: change at rev %d is not after rev %d", rev, t.rev)
	}
	vals := make([]any, len(writes))
	for i, w := range writes {
		op := w.Op
		if op == intents.OpMerge {
			return fmt.Errorf("state: rev %d: merge %s must be planned into sets", rev, w.Path)
		}
		if verify {
			if err := intents.CheckPath(w.Path); err != nil {
				return fmt.Errorf("state: rev %d: path %q: %v", rev, w.Path, err)
			}
			if _, err := t.check(w.Path, op); err != nil {
				return fmt.Errorf("state: rev %d: %w", rev, err)
			}
		}
		switch op {
		case intents.OpDelete:
			continue
		case intents.OpSet, intents.OpAppend, intents.OpIncr:
		default:
			return fmt.Errorf("state: rev %d: unknown op %q at %s", rev, op, w.Path)
		}
		v, err := decodeValue(w.Value)
		if err != nil {
			return fmt.Errorf("state: rev %d: value of %s: %v", rev, w.Path, err)
		}
		vals[i] = v
		if _, ok := vals[i].(float64); op == intents.OpIncr && !ok {
			return fmt.Errorf("state: rev %d: incr %s by %s", rev, w.Path, intents.JSONType(vals[i]))
		}
	}
	t.rev = rev
	t.stamp = by
	// With one write, the nodes check went through are still the path's:
	// nothing has changed since.
	var walked []*node
	if verify && len(writes) == 1 {
		walked = t.walked
	}
	for i, w := range writes {
		n := &t.root
		n.bump(rev, t.stamp)
		for k, end := 0, 0; end < len(w.Path); k++ {
			next := strings.IndexByte(w.Path[end:], '.')
			if next < 0 {
				next = len(w.Path)
			} else {
				next += end
			}
			seg := w.Path[end:next]
			if n.kind != object {
				n.kind, n.val = object, nil
			}
			var kid *node
			if k < len(walked) {
				kid = walked[k]
			} else {
				kid = n.kids[seg]
			}
			if kid == nil {
				if n.kids == nil {
					n.kids = make(map[string]*node, 1)
				}
				kid = &node{}
				n.kids[seg] = kid
			}
			n = kid
			t.bump(n, rev, w.Path[:next])
			end = next + 1
		}
		switch w.Op {
		case intents.OpSet:
			t.set(n, w.Path, rev, vals[i])
		case intents.OpDelete:
			t.set(n, w.Path, rev, deleted{})
		case intents.OpAppend:
			cur, _ := n.val.([]any)
			// A fresh array, never an append in place: readers may hold the
			// old one (conditions, lookups, snapshots).
			next := make([]any, len(cur), len(cur)+1)
			copy(next, cur)
			n.kind, n.val = leaf, append(next, vals[i])
		case intents.OpIncr:
			// Plan refuses a sum that is not finite, but a log written
			// before it did still folds as it always has, to ±Inf.
			cur, _ := n.val.(float64)
			n.kind, n.val = leaf, cur+vals[i].(float64)
		}
	}
	return nil
}

// Track turns on (or off) the recording of touched paths for Touched.
// It is off by default, so a tree nobody drains does not grow.
func (t *Tree) Track(on bool) {
	t.tracking = on
	t.touched = t.touched[:0]
}

// Touched returns the paths whose version changed since the last call —
// every path an Apply bumped, possibly repeated — and starts afresh. The
// slice is reused by later Applies. The event log writes the entries of
// exactly these paths to its materialized state.
func (t *Tree) Touched() []string {
	out := t.touched
	t.touched = t.touched[:0]
	return out
}

// Stat is what the tree keeps at one path, without materializing objects.
type Stat struct {
	Exists  bool
	Object  bool
	Value   any // a leaf's value; shared, never to be changed
	Version uint64
	ModRev  uint64
}

// Members returns the names of the members of the object at path that
// exist, sorted; none when path is not an object.
func (t *Tree) Members(path string) []string {
	n := t.find(path)
	if n == nil || n.kind != object {
		return nil
	}
	out := make([]string, 0, len(n.kids))
	for k, kid := range n.kids {
		if kid.kind != absent {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Stat returns what the tree keeps at path; ok is false for a path never
// written.
func (t *Tree) Stat(path string) (st Stat, ok bool) {
	n := t.find(path)
	if n == nil {
		return Stat{}, false
	}
	return Stat{Exists: n.kind != absent, Object: n.kind == object, Value: n.val, Version: n.version, ModRev: n.modRev}, true
}

// deleted is the value set by a delete.
type deleted struct{}

// bump counts rev once on n (the root's version counts every change).
func (n *node) bump(rev uint64, by Stamp) bool {
	if n.modRev == rev {
		return false
	}
	n.version++
	n.modRev, n.modTime, n.modAgent = rev, 0, by.Agent
	if !by.Time.IsZero() {
		n.modTime = by.Time.UnixNano()
	}
	return true
}

// bump bumps n, the node of path, and notes the path as touched.
func (t *Tree) bump(n *node, rev uint64, path string) {
	if n.bump(rev, t.stamp) && t.tracking {
		t.touched = append(t.touched, path)
	}
}

// set replaces the subtree at n (the node of path) with v, bumping every
// node that existed under n before and every node v creates.
func (t *Tree) set(n *node, path string, rev uint64, v any) {
	t.bump(n, rev, path)
	obj, isObj := v.(map[string]any)
	for k, kid := range n.kids {
		if _, keep := obj[k]; !keep && kid.kind != absent {
			t.set(kid, path+"."+k, rev, deleted{})
		}
	}
	switch {
	case isObj:
		n.kind, n.val = object, nil
		for k, x := range obj {
			kid := n.kids[k]
			if kid == nil {
				if n.kids == nil {
					n.kids = make(map[string]*node, len(obj))
				}
				kid = &node{}
				n.kids[k] = kid
			}
			t.set(kid, path+"."+k, rev, x)
		}
	case v == deleted{}:
		n.kind, n.val = absent, nil
	default:
		n.kind, n.val = leaf, v
	}
}

// Hash returns the SHA-256 of the whole tree — every path with its kind,
// value, version and mod_rev, in sorted order — and the rev. Two trees with
// the same hash answer every Lookup alike.
func (t *Tree) Hash() [32]byte {
	h := sha256.New()
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], t.rev)
	h.Write(buf[:])
	t.root.hash(h, "")
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

func (n *node) hash(h hash.Hash, path string) {
	var buf [17]byte
	buf[0] = byte(n.kind)
	binary.BigEndian.PutUint64(buf[1:], n.version)
	binary.BigEndian.PutUint64(buf[9:], n.modRev)
	h.Write([]byte(path))
	h.Write(buf[:])
	if n.kind == leaf {
		b, _ := json.Marshal(n.val)
		h.Write(b)
	}
	h.Write([]byte{0})
	for _, k := range slices.Sorted(maps.Keys(n.kids)) {
		p := k
		if path != "" {
			p = path + "." + k
		}
		n.kids[k].hash(h, p)
	}
}

// Paths returns every path the tree knows (existing or deleted) with its
// entry, in sorted order: the form tests and `coagent replay --json` compare.
func (t *Tree) Paths() map[string]Entry {
	out := map[string]Entry{}
	t.each(func(path string, n *node) {
		if path != "" {
			e := Entry{Exists: n.kind != absent, Version: n.version, ModRev: n.modRev}
			if n.kind == leaf {
				e.Value = n.val
			}
			out[path] = e
		}
	})
	return out
}

// each calls fn with every node of the tree and its path, the root ("")
// and deleted paths included, in no particular order.
func (t *Tree) each(fn func(path string, n *node)) {
	var walk func(n *node, path string)
	walk = func(n *node, path string) {
		fn(path, n)
		for k, kid := range n.kids {
			p := k
			if path != "" {
				p = path + "." + k
			}
			walk(kid, p)
		}
	}
	walk(&t.root, "")
}

// FormatValue renders a state value for a human sentence, shortened.
func FormatValue(v any) string {
	if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}

// decodeValue decodes one JSON value as encoding/json would into an any,
// with a fast path for the scalars most writes carry.
func decodeValue(raw json.RawMessage) (any, error) {
	b := bytes.Trim(raw, " \t\r\n") // JSON whitespace only
	if len(b) > 0 {
		switch c := b[0]; {
		case string(b) == "null":
			return nil, nil
		case string(b) == "true":
			return true, nil
		case string(b) == "false":
			return false, nil
		case c == '"' && len(b) >= 2 && b[len(b)-1] == '"' && plainString(b[1:len(b)-1]):
			return string(b[1 : len(b)-1]), nil
		case c == '-' || c >= '0' && c <= '9':
			if intents.JSONNumber(b) {
				if f, err := strconv.ParseFloat(string(b), 64); err == nil {
					return f, nil
				}
			}
		}
	}
	var v any
	err := json.Unmarshal(raw, &v)
	return v, err
}

// plainString reports whether a JSON string body needs no unescaping.
func plainString(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c == '"' || c < 0x20 || c >= 0x80 {
			return false
		}
	}
	return true
}
