package state

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/coagent/coagent/intents"
)

// Node is one path of a tree as Export lists it and Import takes it back:
// everything the tree keeps about the path, deleted ones included, so that a
// tree rebuilt from its nodes answers every Lookup and every future Apply
// alike (and has the same Hash).
type Node struct {
	// Path is the node's path; "" is the root, which is always an object.
	Path string `json:"path"`
	// Kind is "object" (its members are the nodes below it), "leaf" (a
	// JSON scalar or array, in Value) or "absent" (deleted: it keeps its
	// version so that a path written again never shows an old version).
	Kind string `json:"kind"`
	// Value is a leaf's value, as JSON. Only leaves have one.
	Value json.RawMessage `json:"value,omitempty"`
	// Number is a leaf's value when it is a number JSON cannot hold: "+Inf",
	// "-Inf" or "NaN", which incr can reach by overflowing. Value is then
	// empty.
	Number  string `json:"number,omitempty"`
	Version uint64 `json:"version"`
	ModRev  uint64 `json:"mod_rev"`
	// ModTime is the time of the change at ModRev in Unix nanoseconds, 0
	// when unknown (Tree.ModTime).
	ModTime int64 `json:"mod_time,omitempty"`
	// ModAgent is the agent of the change at ModRev, "" when unknown
	// (Tree.ModAgent).
	ModAgent string `json:"mod_agent,omitempty"`
}

// The kinds of Node.
const (
	NodeObject = "object"
	NodeLeaf   = "leaf"
	NodeAbsent = "absent"
)

var kindNames = [...]string{absent: NodeAbsent, leaf: NodeLeaf, object: NodeObject}

// Export lists every node of the tree, the root and the deleted paths
// included, sorted by path (so a parent always comes before its children).
// With Rev it is all Import needs to rebuild the tree. The values are fresh
// copies: the caller may keep and change them.
func (t *Tree) Export() []Node {
	var out []Node
	t.each(func(path string, n *node) {
		e := Node{Path: path, Kind: kindNames[n.kind], Version: n.version, ModRev: n.modRev, ModTime: n.modTime, ModAgent: n.modAgent}
		if n.kind == leaf {
			e.Value, e.Number = encodeLeaf(n.val)
		}
		out = append(out, e)
	})
	slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// encodeLeaf encodes a leaf's value. Values came from JSON, so only a number
// grown out of range by incr has no JSON form.
func encodeLeaf(v any) (json.RawMessage, string) {
	if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
		return nil, strconv.FormatFloat(f, 'g', -1, 64)
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Every value in the tree was decoded from JSON (or summed from
		// such numbers, handled above), so it encodes.
		panic(fmt.Sprintf("state: leaf value %T does not encode: %v", v, err))
	}
	return b, ""
}

// Import rebuilds a tree at rev from the nodes Export listed, in any order.
// It checks that they make a tree the engine could have built, and returns
// an error (never a panic) for the first problem: a path that is not legal
// or is listed twice, a node without its parent, a missing or non-object
// root, an unknown kind, a leaf without a value (or with an object for one),
// a value on a node that is not a leaf, a node that exists under one that
// does not or under a leaf, a version or mod_rev above its parent's, or a
// mod_rev after rev.
func Import(rev uint64, nodes []Node) (*Tree, error) {
	t := &Tree{rev: rev}
	byPath := make(map[string]*node, len(nodes))
	for i := range nodes {
		e := &nodes[i]
		n, err := importNode(rev, e)
		if err != nil {
			return nil, fmt.Errorf("state: import: node %q: %w", e.Path, err)
		}
		if _, dup := byPath[e.Path]; dup {
			return nil, fmt.Errorf("state: import: node %q listed twice", e.Path)
		}
		if e.Path == "" {
			if n.kind != object {
				return nil, fmt.Errorf("state: import: the root is %s, not an object", e.Kind)
			}
			t.root = *n
			n = &t.root
		}
		byPath[e.Path] = n
	}
	if _, ok := byPath[""]; !ok {
		return nil, fmt.Errorf("state: import: no root node")
	}
	for i := range nodes {
		path := nodes[i].Path
		if path == "" {
			continue
		}
		parentPath, seg := "", path
		if j := strings.LastIndexByte(path, '.'); j >= 0 {
			parentPath, seg = path[:j], path[j+1:]
		}
		parent, n := byPath[parentPath], byPath[path]
		switch {
		case parent == nil:
			return nil, fmt.Errorf("state: import: node %q has no parent node %q", path, parentPath)
		case n.kind != absent && parent.kind != object:
			return nil, fmt.Errorf("state: import: node %q is %s under %s %q", path, kindNames[n.kind], kindNames[parent.kind], parentPath)
		case n.version > parent.version || n.modRev > parent.modRev:
			// Every change that bumps a path bumps its ancestors too.
			return nil, fmt.Errorf("state: import: node %q (version %d, mod_rev %d) is newer than its parent %q (version %d, mod_rev %d)",
				path, n.version, n.modRev, parentPath, parent.version, parent.modRev)
		}
		if parent.kids == nil {
			parent.kids = make(map[string]*node)
		}
		parent.kids[seg] = n
	}
	return t, nil
}

// importNode checks one node on its own and builds it, without kids.
func importNode(rev uint64, e *Node) (*node, error) {
	if e.Path != "" {
		if err := intents.CheckPath(e.Path); err != nil {
			return nil, err
		}
		if e.Version == 0 || e.ModRev == 0 {
			return nil, fmt.Errorf("version %d and mod_rev %d: a path is written before it exists", e.Version, e.ModRev)
		}
	}
	if e.ModRev > rev {
		return nil, fmt.Errorf("mod_rev %d is after the tree's rev %d", e.ModRev, rev)
	}
	n := &node{version: e.Version, modRev: e.ModRev, modTime: e.ModTime, modAgent: e.ModAgent}
	switch e.Kind {
	case NodeObject:
		n.kind = object
	case NodeAbsent:
		n.kind = absent
	case NodeLeaf:
		n.kind = leaf
	default:
		return nil, fmt.Errorf("kind %q: want %s, %s or %s", e.Kind, NodeObject, NodeLeaf, NodeAbsent)
	}
	if n.kind != leaf {
		if len(e.Value) > 0 || e.Number != "" {
			return nil, fmt.Errorf("%s node with a value", e.Kind)
		}
		return n, nil
	}
	switch {
	case e.Number != "" && len(e.Value) > 0:
		return nil, fmt.Errorf("leaf with both a value and a number")
	case e.Number != "":
		f, err := strconv.ParseFloat(e.Number, 64)
		if err != nil || !math.IsInf(f, 0) && !math.IsNaN(f) {
			return nil, fmt.Errorf("number %q: want +Inf, -Inf or NaN (a finite number is a value)", e.Number)
		}
		n.val = f
	case len(e.Value) == 0:
		return nil, fmt.Errorf("leaf without a value")
	default:
		v, err := decodeValue(e.Value)
		if err != nil {
			return nil, fmt.Errorf("value: %w", err)
		}
		if _, ok := v.(map[string]any); ok {
			return nil, fmt.Errorf("leaf whose value is an object (objects are object nodes)")
		}
		n.val = v
	}
	return n, nil
}
