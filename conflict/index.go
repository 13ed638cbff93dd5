package conflict

import (
	"cmp"
	"slices"
	"strings"

	"github.com/coagent/coagent/intents"
)

// Txn is one transaction in flight as the index sees it. The index keeps the
// pointer; callers must not change Reads/Writes while it is added.
type Txn struct {
	ID     string
	Agent  string
	Reads  []string        // paths read (declared reads + paths its conditions touch); may contain duplicates/overlaps
	Writes []intents.Write // only Path and Op are used
}

// Index is the set of transactions in flight, indexed by the paths they read
// and write. It is not safe for concurrent use; Check, WritersUnder, Get and
// Len do not modify it, so they may run concurrently with each other while no
// Add or Remove does.
type Index struct {
	root node
	txns map[string]*Txn
}

// New returns an empty index.
func New() *Index {
	return &Index{txns: make(map[string]*Txn)}
}

// maxKids is how many children a node keeps in a slice before it switches to
// a map. Most nodes are documents with a handful of fields, for which a small
// slice is several times smaller than a map and as fast to search; a board
// with thousands of documents needs the map.
const maxKids = 8

// node is the trie node of one path: the root is the empty path and each
// child adds one segment.
type node struct {
	// seg is a substring of the path of the first transaction that created
	// the node. Sharing it saves an allocation per node; the price is that
	// the path string outlives that transaction while the node lives.
	seg string
	// Children are in kids while there are at most maxKids of them and in
	// kidMap (with kids nil) after.
	kids   []*node
	kidMap map[string]*node
	// entries are the reads and writes at exactly this path.
	entries []entry
	// reads and writes count the entries of this node and all below it. A
	// node exists only while their sum is positive, which keeps the trie the
	// size of what is in flight; writes alone lets a read skip subtrees that
	// hold only reads.
	reads, writes int32
}

// entry is one read or write of a transaction at its node's exact path. It
// points into the transaction's own Reads or Writes rather than copying the
// path and op, so an entry is 16 bytes.
type entry struct {
	txn   *Txn
	i     int32 // index into txn.Writes if write, else into txn.Reads
	write bool
}

func (e entry) path() string {
	if e.write {
		return e.txn.Writes[e.i].Path
	}
	return e.txn.Reads[e.i]
}

func (e entry) op() intents.Op {
	if e.write {
		return e.txn.Writes[e.i].Op
	}
	return ""
}

func (n *node) child(seg string) *node {
	if n.kidMap != nil {
		return n.kidMap[seg]
	}
	for _, k := range n.kids {
		if k.seg == seg {
			return k
		}
	}
	return nil
}

func (n *node) addChild(seg string) *node {
	c := &node{seg: seg}
	switch {
	case n.kidMap != nil:
		n.kidMap[seg] = c
	case len(n.kids) < maxKids:
		n.kids = append(n.kids, c)
	default:
		n.kidMap = make(map[string]*node, 2*maxKids)
		for _, k := range n.kids {
			n.kidMap[k.seg] = k
		}
		n.kids = nil
		n.kidMap[seg] = c
	}
	return c
}

func (n *node) removeChild(c *node) {
	if n.kidMap != nil {
		delete(n.kidMap, c.seg)
		// Going back to a slice only well below maxKids keeps a node that
		// hovers around the threshold from converting on every change.
		if len(n.kidMap) <= maxKids/2 {
			kids := make([]*node, 0, len(n.kidMap))
			for _, k := range n.kidMap {
				kids = append(kids, k)
			}
			n.kids, n.kidMap = kids, nil
		}
		return
	}
	if i := slices.Index(n.kids, c); i >= 0 {
		n.kids = slices.Delete(n.kids, i, i+1)
	}
	if len(n.kids) == 0 {
		n.kids = nil
	}
}

// eachChild calls f for every child. The order is unspecified, so callers
// must not let it reach their results.
func (n *node) eachChild(f func(*node)) {
	if n.kidMap != nil {
		for _, k := range n.kidMap {
			f(k)
		}
		return
	}
	for _, k := range n.kids {
		f(k)
	}
}

func (n *node) count(e entry, d int32) {
	if e.write {
		n.writes += d
	} else {
		n.reads += d
	}
}

// Add registers every read and write path of t. Adding the same pointer
// again does nothing; adding a different transaction with the ID of one in
// flight replaces that one.
func (ix *Index) Add(t *Txn) {
	if old := ix.txns[t.ID]; old != nil {
		if old == t {
			return
		}
		ix.Remove(old)
	}
	ix.txns[t.ID] = t
	for i, p := range t.Reads {
		ix.link(p, entry{txn: t, i: int32(i)})
	}
	for i, w := range t.Writes {
		ix.link(w.Path, entry{txn: t, i: int32(i), write: true})
	}
}

func (ix *Index) link(path string, e entry) {
	n := &ix.root
	n.count(e, 1)
	for rest, more := path, true; more; {
		var seg string
		seg, rest, more = strings.Cut(rest, ".")
		c := n.child(seg)
		if c == nil {
			c = n.addChild(seg)
		}
		n = c
		n.count(e, 1)
	}
	n.entries = append(n.entries, e)
}

// Remove unregisters t, which must be the pointer given to Add; it does
// nothing if t is not in flight.
func (ix *Index) Remove(t *Txn) {
	if t == nil || ix.txns[t.ID] != t {
		return
	}
	delete(ix.txns, t.ID)
	// unlink drops all of t's entries at a path the first time it meets the
	// path, so the paths t lists twice (or both reads and writes) find
	// nothing left the second time.
	for _, p := range t.Reads {
		ix.unlink(t, p)
	}
	for _, w := range t.Writes {
		ix.unlink(t, w.Path)
	}
}

func (ix *Index) unlink(t *Txn, path string) {
	// Paths are at most intents.MaxDepth deep; deeper ones, which the index
	// does not refuse, only cost the stack a heap allocation.
	var buf [intents.MaxDepth + 1]*node
	stack := append(buf[:0], &ix.root)
	n := &ix.root
	for rest, more := path, true; more; {
		var seg string
		seg, rest, more = strings.Cut(rest, ".")
		if n = n.child(seg); n == nil {
			return
		}
		stack = append(stack, n)
	}
	var dr, dw int32
	n.entries = slices.DeleteFunc(n.entries, func(e entry) bool {
		if e.txn != t {
			return false
		}
		if e.write {
			dw++
		} else {
			dr++
		}
		return true
	})
	if dr+dw == 0 {
		return
	}
	switch {
	case len(n.entries) == 0:
		n.entries = nil
	case cap(n.entries) > 16 && len(n.entries) < cap(n.entries)/4:
		// A hot path that once had many transactions should not keep
		// their room for ever.
		n.entries = slices.Clone(n.entries)
	}
	for _, s := range stack {
		s.reads -= dr
		s.writes -= dw
	}
	for i := len(stack) - 1; i > 0 && stack[i].reads+stack[i].writes == 0; i-- {
		stack[i-1].removeChild(stack[i])
	}
}

// Len returns the number of transactions in flight.
func (ix *Index) Len() int { return len(ix.txns) }

// Get returns the transaction in flight with the given ID, or nil.
func (ix *Index) Get(id string) *Txn { return ix.txns[id] }

// where says where an entry's path lies relative to the path looked up.
type where uint8

const (
	above where = iota // a strict prefix of it
	at                 // the same path
	below              // under it
)

// overlapping calls f for every entry whose path overlaps p (SPEC §1: one is
// a segment-wise prefix of the other). With writesOnly it skips reads and the
// subtrees that hold none of the writes. The order of calls is unspecified.
func (ix *Index) overlapping(p string, writesOnly bool, f func(e entry, w where)) {
	n := &ix.root
	for rest, more := p, true; more; {
		var seg string
		seg, rest, more = strings.Cut(rest, ".")
		if n = n.child(seg); n == nil || (writesOnly && n.writes == 0) {
			return
		}
		w := above
		if !more {
			w = at
		}
		for _, e := range n.entries {
			if e.write || !writesOnly {
				f(e, w)
			}
		}
	}
	n.eachChild(func(c *node) { c.under(writesOnly, f) })
}

func (n *node) under(writesOnly bool, f func(e entry, w where)) {
	if writesOnly && n.writes == 0 {
		return
	}
	for _, e := range n.entries {
		if e.write || !writesOnly {
			f(e, below)
		}
	}
	n.eachChild(func(c *node) { c.under(writesOnly, f) })
}

// Check appends to dst the conflicts that a new intent reading `reads` and writing `writes`
// has with the transactions in flight, skipping the transaction whose ID is self (may be ""),
// and returns them together with the IDs of the transactions it auto-merges with
// (same exact path, both ops commutative and equal: incr/incr or append/append).
//
// Each conflict's Path is the deeper of the two overlapping paths: the region
// both touch. The conflicts appended are distinct in (Path, Kind, WithTxn)
// and sorted by (WithTxn, Path, Kind); dst itself is left as it was. The
// merges are sorted and distinct, and a transaction that also conflicts is
// only in the conflicts, since it cannot be merged with.
func (ix *Index) Check(self string, reads []string, writes []intents.Write, dst []intents.Conflict) (conflicts []intents.Conflict, merges []string) {
	start := len(dst)
	add := func(path string, kind intents.ConflictKind, t *Txn) {
		dst = append(dst, intents.Conflict{Path: path, Kind: kind, WithTxn: t.ID, WithAgent: t.Agent})
	}
	for _, w := range writes {
		ix.overlapping(w.Path, false, func(e entry, rel where) {
			if e.txn.ID == self {
				return
			}
			kind := intents.ConflictReadWrite
			if e.write {
				if rel == at && e.op() == w.Op && w.Op.Commutative() {
					merges = append(merges, e.txn.ID)
					return
				}
				kind = intents.ConflictWriteWrite
			}
			path := w.Path
			if rel == below {
				path = e.path()
			}
			add(path, kind, e.txn)
		})
	}
	for _, r := range reads {
		ix.overlapping(r, true, func(e entry, rel where) {
			if e.txn.ID == self {
				return
			}
			path := r
			if rel == below {
				path = e.path()
			}
			add(path, intents.ConflictWriteRead, e.txn)
		})
	}

	found := dst[start:]
	slices.SortFunc(found, compareConflicts)
	found = slices.Compact(found)
	dst = dst[:start+len(found)]

	slices.Sort(merges)
	merges = slices.Compact(merges)
	merges = slices.DeleteFunc(merges, func(id string) bool {
		_, ok := slices.BinarySearchFunc(found, id, func(c intents.Conflict, id string) int {
			return cmp.Compare(c.WithTxn, id)
		})
		return ok
	})
	if len(merges) == 0 {
		merges = nil
	}
	return dst, merges
}

func compareConflicts(a, b intents.Conflict) int {
	if c := cmp.Compare(a.WithTxn, b.WithTxn); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Path, b.Path); c != 0 {
		return c
	}
	return cmp.Compare(a.Kind, b.Kind)
}

// WritersUnder returns the IDs of the transactions (other than self) that write a path
// overlapping prefix (at, above or under it), sorted, at most limit of them.
// A negative limit means no limit. The IDs kept are the first in sort order,
// so the answer does not depend on the order transactions were added.
func (ix *Index) WritersUnder(self, prefix string, limit int) []string {
	if limit == 0 {
		return nil
	}
	var ids []string
	ix.overlapping(prefix, true, func(e entry, _ where) {
		if e.txn.ID != self {
			ids = append(ids, e.txn.ID)
		}
	})
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit:limit]
	}
	if len(ids) == 0 {
		return nil
	}
	return ids
}
