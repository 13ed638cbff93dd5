package state

import (
	"fmt"
	"slices"
	"strings"
)

// ExportBoard lists the nodes at and under board, deleted ones included,
// sorted by path: what a shard hands over when the board moves (Cut) and
// what the shard taking it installs (Graft). None when the board was never
// written.
func (t *Tree) ExportBoard(board string) []Node {
	n := t.root.kids[board]
	if n == nil {
		return nil
	}
	var out []Node
	var walk func(n *node, path string)
	walk = func(n *node, path string) {
		e := Node{Path: path, Kind: kindNames[n.kind], Version: n.version, ModRev: n.modRev, ModTime: n.modTime, ModAgent: n.modAgent}
		if n.kind == leaf {
			e.Value, e.Number = encodeLeaf(n.val)
		}
		out = append(out, e)
		for k, kid := range n.kids {
			walk(kid, path+"."+k)
		}
	}
	walk(n, board)
	slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Cut deletes board at rev, as a delete of it would: every path under it
// that exists is bumped and left absent, so that its versions keep
// counting if the board comes back. by stamps the change.
func (t *Tree) Cut(rev uint64, by Stamp, board string) error {
	if rev <= t.rev {
		return fmt.Errorf("state: cut at rev %d is not after rev %d", rev, t.rev)
	}
	n := t.root.kids[board]
	if n == nil || n.kind == absent {
		t.rev = rev
		return nil
	}
	t.rev, t.stamp = rev, by
	t.root.bump(rev, by)
	t.set(n, board, rev, deleted{})
	return nil
}

// Graft installs board's nodes, as another tree's ExportBoard listed them,
// in place of whatever this tree keeps of board, at rev. Values and
// versions are kept, so an agent's compare-and-set against a version it
// read before the board moved still holds; every version is raised by the
// same amount when needed so that none is at or below what this tree's
// own node of that path had, since a version must never be seen twice at
// one path. Every node's mod_rev becomes rev: the change that brought it
// here. The nodes are checked as Import checks a whole tree, and nothing
// changes when they fail.
func (t *Tree) Graft(rev uint64, by Stamp, board string, nodes []Node) error {
	if rev <= t.rev {
		return fmt.Errorf("state: graft at rev %d is not after rev %d", rev, t.rev)
	}
	if len(nodes) == 0 {
		t.rev = rev
		return nil
	}
	own := make([]Node, 0, len(nodes)+1)
	own = append(own, Node{Path: "", Kind: NodeObject, Version: 1 << 62, ModRev: rev})
	var shift uint64
	for _, e := range nodes {
		if e.Path != board && !strings.HasPrefix(e.Path, board+".") {
			return fmt.Errorf("state: graft of board %s: node %q is not on it", board, e.Path)
		}
		if n := t.find(e.Path); n != nil && n.version >= e.Version+shift {
			shift = n.version - e.Version + 1
		}
		e.ModRev = rev
		own = append(own, e)
	}
	// Import checks that the nodes make a tree; the root stands in for
	// this tree's.
	sub, err := Import(rev, own)
	if err != nil {
		return fmt.Errorf("state: graft of board %s: %w", board, err)
	}
	n := sub.root.kids[board]
	if n == nil {
		return fmt.Errorf("state: graft of board %s: no node of the board itself", board)
	}
	var top uint64
	var walk func(n *node, path string)
	walk = func(n *node, path string) {
		n.version += shift
		top = max(top, n.version)
		if t.tracking {
			t.touched = append(t.touched, path)
		}
		for k, kid := range n.kids {
			walk(kid, path+"."+k)
		}
	}
	walk(n, board)
	// What this tree keeps of the board and the nodes lack (deleted paths,
	// since a board is only ever taken by a shard that does not own it)
	// stays, so that the tree still answers for every path it ever
	// answered for.
	if old := t.root.kids[board]; old != nil {
		keep(old, n)
	}
	t.rev, t.stamp = rev, by
	t.root.bump(rev, by)
	// The root counts every change below it, so it is never behind a
	// node under it.
	t.root.version = max(t.root.version, top)
	if t.root.kids == nil {
		t.root.kids = make(map[string]*node)
	}
	t.root.kids[board] = n
	return nil
}

// keep puts under to every node under from that to lacks, with what is
// under it.
func keep(from, to *node) {
	for k, kid := range from.kids {
		if got := to.kids[k]; got != nil {
			keep(kid, got)
			continue
		}
		if to.kids == nil {
			to.kids = make(map[string]*node)
		}
		to.kids[k] = kid
	}
}
