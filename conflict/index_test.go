package conflict

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/datadriven"
)

// TestIndexScript runs testdata/index through datadriven: the rules of
// SPEC §4 as cases. -rewrite writes back the output the code gives now, for
// review in a diff.
//
//	add ID AGENT [r=PATH]... [w=PATH:OP]...   → number in flight
//	remove ID                                 → number in flight
//	check [self=ID] [r=PATH]... [w=PATH:OP]... → conflicts and merges, in the order returned
//	writers [self=ID] PREFIX [limit=N]        → WritersUnder
//	trie                                      → the trie, children sorted
func TestIndexScript(t *testing.T) {
	ix := New()
	datadriven.RunTest(t, "testdata/index", func(t *testing.T, d *datadriven.TestData) string {
		defer checkInvariants(t, ix)
		switch d.Cmd {
		case "add":
			tx := &Txn{ID: d.CmdArgs[0].Key, Agent: d.CmdArgs[1].Key}
			_, tx.Reads, tx.Writes = parseIO(t, d, d.CmdArgs[2:])
			ix.Add(tx)
			return fmt.Sprintf("inflight=%d", ix.Len())
		case "remove":
			ix.Remove(ix.Get(d.CmdArgs[0].Key))
			return fmt.Sprintf("inflight=%d", ix.Len())
		case "check":
			self, reads, writes := parseIO(t, d, d.CmdArgs)
			// A non-empty dst must survive untouched in front.
			prior := intents.Conflict{Path: "prior", Kind: intents.ConflictStale}
			cs, ms := ix.Check(self, reads, writes, []intents.Conflict{prior})
			if len(cs) == 0 || cs[0] != prior {
				t.Errorf("%s: dst prefix lost: %v", d.FullCmd(), cs)
			} else {
				cs = cs[1:]
			}
			return formatCheck(cs, ms)
		case "writers":
			self, limit, prefix := "", -1, ""
			d.MaybeScanArgs(t, "self", &self)
			d.MaybeScanArgs(t, "limit", &limit)
			for _, a := range d.CmdArgs {
				if len(a.Vals) == 0 {
					prefix = a.Key
				}
			}
			ids := ix.WritersUnder(self, prefix, limit)
			if len(ids) == 0 {
				return "none"
			}
			return strings.Join(ids, " ")
		case "trie":
			return dumpTrie(ix)
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

// parseIO reads self=ID, r=PATH and w=PATH:OP arguments.
func parseIO(t *testing.T, d *datadriven.TestData, args []datadriven.CmdArg) (self string, reads []string, writes []intents.Write) {
	t.Helper()
	for _, a := range args {
		switch a.Key {
		case "self":
			self = a.SingleVal(t)
		case "r":
			reads = append(reads, a.SingleVal(t))
		case "w":
			p, op, ok := strings.Cut(a.SingleVal(t), ":")
			if !ok {
				d.Fatalf(t, "write %q has no :op", a)
			}
			writes = append(writes, intents.Write{Path: p, Op: intents.Op(op)})
		default:
			d.Fatalf(t, "unknown argument %q", a)
		}
	}
	return self, reads, writes
}

func formatCheck(cs []intents.Conflict, ms []string) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "%s %s %s %s\n", c.Kind, c.Path, c.WithTxn, c.WithAgent)
	}
	if len(ms) > 0 {
		fmt.Fprintf(&b, "merge %s\n", strings.Join(ms, " "))
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// dumpTrie prints one node a line, indented by depth, with its subtree counts
// and its own entries.
func dumpTrie(ix *Index) string {
	var b strings.Builder
	var dump func(n *node, depth int)
	dump = func(n *node, depth int) {
		kids := children(n)
		slices.SortFunc(kids, func(a, b *node) int { return strings.Compare(a.seg, b.seg) })
		for _, k := range kids {
			fmt.Fprintf(&b, "%s%s r=%d w=%d", strings.Repeat("  ", depth), k.seg, k.reads, k.writes)
			var es []string
			for _, e := range k.entries {
				if e.write {
					es = append(es, e.txn.ID+":"+string(e.op()))
				} else {
					es = append(es, e.txn.ID+":read")
				}
			}
			slices.Sort(es)
			if len(es) > 0 {
				fmt.Fprintf(&b, " [%s]", strings.Join(es, " "))
			}
			b.WriteString("\n")
			dump(k, depth+1)
		}
	}
	dump(&ix.root, 0)
	if b.Len() == 0 {
		return "(empty)"
	}
	return b.String()
}

func children(n *node) []*node {
	var kids []*node
	n.eachChild(func(c *node) { kids = append(kids, c) })
	return kids
}

// checkInvariants verifies the trie against the transactions in flight: every
// entry of every transaction is at its path exactly once, the counts add up,
// and no node is empty.
func checkInvariants(t testing.TB, ix *Index) {
	t.Helper()
	want := 0
	for _, tx := range ix.txns {
		want += len(tx.Reads) + len(tx.Writes)
	}
	if ix.root.entries != nil {
		t.Errorf("root has entries")
	}
	var walk func(n *node, path string) (reads, writes int32)
	walk = func(n *node, path string) (reads, writes int32) {
		if n.kidMap != nil && n.kids != nil {
			t.Errorf("%q: both kids and kidMap", path)
		}
		if len(n.kids) > maxKids {
			t.Errorf("%q: %d kids in the slice", path, len(n.kids))
		}
		if n.kidMap != nil && len(n.kidMap) <= maxKids/2 {
			t.Errorf("%q: only %d kids in the map", path, len(n.kidMap))
		}
		for _, e := range n.entries {
			if ix.txns[e.txn.ID] != e.txn {
				t.Errorf("%q: entry of %s, which is not in flight", path, e.txn.ID)
			}
			if e.path() != path {
				t.Errorf("%q: entry for path %q", path, e.path())
			}
			if e.write {
				writes++
			} else {
				reads++
			}
		}
		for k, c := range n.kidMap {
			if k != c.seg {
				t.Errorf("%q: child %q under key %q", path, c.seg, k)
			}
		}
		for _, c := range children(n) {
			p := c.seg
			if n != &ix.root {
				p = path + "." + c.seg
			}
			r, w := walk(c, p)
			if r+w == 0 {
				t.Errorf("%q: empty node kept", p)
			}
			reads += r
			writes += w
		}
		if reads != n.reads || writes != n.writes {
			t.Errorf("%q: counts r=%d w=%d, entries r=%d w=%d", path, n.reads, n.writes, reads, writes)
		}
		return reads, writes
	}
	if r, w := walk(&ix.root, ""); int(r+w) != want {
		t.Errorf("trie has %d entries, the transactions in flight %d", r+w, want)
	}
}

// bruteCheck is Check as SPEC §4 states it: every pair of paths, compared
// with intents.Overlaps.
func bruteCheck(txns map[string]*Txn, self string, reads []string, writes []intents.Write) ([]intents.Conflict, []string) {
	type key struct {
		path, txn string
		kind      intents.ConflictKind
	}
	found := map[key]intents.Conflict{}
	merged := map[string]bool{}
	deeper := func(a, b string) string {
		if len(b) > len(a) {
			return b
		}
		return a
	}
	add := func(path string, kind intents.ConflictKind, t *Txn) {
		found[key{path, t.ID, kind}] = intents.Conflict{Path: path, Kind: kind, WithTxn: t.ID, WithAgent: t.Agent}
	}
	for _, t := range txns {
		if t.ID == self {
			continue
		}
		for _, w := range writes {
			for _, v := range t.Writes {
				switch {
				case !intents.Overlaps(w.Path, v.Path):
				case w.Path == v.Path && w.Op == v.Op && w.Op.Commutative():
					merged[t.ID] = true
				default:
					add(deeper(w.Path, v.Path), intents.ConflictWriteWrite, t)
				}
			}
			for _, r := range t.Reads {
				if intents.Overlaps(w.Path, r) {
					add(deeper(w.Path, r), intents.ConflictReadWrite, t)
				}
			}
		}
		for _, r := range reads {
			for _, v := range t.Writes {
				if intents.Overlaps(r, v.Path) {
					add(deeper(r, v.Path), intents.ConflictWriteRead, t)
				}
			}
		}
	}
	var cs []intents.Conflict
	conflicting := map[string]bool{}
	for _, c := range found {
		cs = append(cs, c)
		conflicting[c.WithTxn] = true
	}
	slices.SortFunc(cs, func(a, b intents.Conflict) int {
		return strings.Compare(a.WithTxn+"\x00"+a.Path+"\x00"+string(a.Kind), b.WithTxn+"\x00"+b.Path+"\x00"+string(b.Kind))
	})
	var ms []string
	for id := range merged {
		if !conflicting[id] {
			ms = append(ms, id)
		}
	}
	slices.Sort(ms)
	return cs, ms
}

func bruteWriters(txns map[string]*Txn, self, prefix string, limit int) []string {
	var ids []string
	for _, t := range txns {
		if t.ID != self && slices.ContainsFunc(t.Writes, func(w intents.Write) bool { return intents.Overlaps(w.Path, prefix) }) {
			ids = append(ids, t.ID)
		}
	}
	slices.Sort(ids)
	if limit >= 0 && len(ids) > limit {
		ids = ids[:limit]
	}
	return ids
}

// model drives an Index and a plain map of the same transactions side by
// side, so the index can be compared with bruteCheck after every step.
type model struct {
	t    testing.TB
	ix   *Index
	txns map[string]*Txn
}

func newModel(t testing.TB) *model { return &model{t: t, ix: New(), txns: map[string]*Txn{}} }

func (m *model) add(tx *Txn) {
	m.ix.Add(tx)
	m.txns[tx.ID] = tx
	m.verify()
}

// remove removes the transaction with that ID; with stranger it passes a
// different pointer with the same ID, which must change nothing.
func (m *model) remove(id string, stranger bool) {
	tx := m.txns[id]
	if stranger || tx == nil {
		m.ix.Remove(&Txn{ID: id, Reads: []string{"a"}, Writes: []intents.Write{{Path: "a", Op: intents.OpSet}}})
	} else {
		m.ix.Remove(tx)
		delete(m.txns, id)
	}
	m.verify()
}

func (m *model) check(self string, reads []string, writes []intents.Write) {
	m.t.Helper()
	gotC, gotM := m.ix.Check(self, reads, writes, nil)
	wantC, wantM := bruteCheck(m.txns, self, reads, writes)
	if !slices.Equal(gotC, wantC) || !slices.Equal(gotM, wantM) {
		m.t.Fatalf("Check(self=%q, reads=%q, writes=%v)\n in flight: %s\ngot:\n%s\nwant:\n%s",
			self, reads, writes, m.describe(), formatCheck(gotC, gotM), formatCheck(wantC, wantM))
	}
}

func (m *model) writers(self, prefix string, limit int) {
	m.t.Helper()
	got := m.ix.WritersUnder(self, prefix, limit)
	want := bruteWriters(m.txns, self, prefix, limit)
	if !slices.Equal(got, want) {
		m.t.Fatalf("WritersUnder(%q, %q, %d) = %q, want %q\n in flight: %s", self, prefix, limit, got, want, m.describe())
	}
}

func (m *model) verify() {
	m.t.Helper()
	if m.ix.Len() != len(m.txns) {
		m.t.Fatalf("Len() = %d, want %d", m.ix.Len(), len(m.txns))
	}
	for id, tx := range m.txns {
		if m.ix.Get(id) != tx {
			m.t.Fatalf("Get(%q) is not the transaction added", id)
		}
	}
	checkInvariants(m.t, m.ix)
}

// drain removes everything and checks the trie is pruned back to its root.
func (m *model) drain() {
	m.t.Helper()
	for _, id := range slices.Sorted(maps.Keys(m.txns)) {
		m.remove(id, false)
	}
	if kids := children(&m.ix.root); len(kids) != 0 || m.ix.root.reads != 0 || m.ix.root.writes != 0 {
		m.t.Fatalf("after removing everything the trie is:\n%s", dumpTrie(m.ix))
	}
}

func (m *model) describe() string {
	var s []string
	for _, id := range slices.Sorted(maps.Keys(m.txns)) {
		tx := m.txns[id]
		s = append(s, fmt.Sprintf("%s/%s r=%q w=%v", tx.ID, tx.Agent, tx.Reads, tx.Writes))
	}
	return strings.Join(s, "; ")
}

// The universe of the random tests: few enough paths that overlaps are
// common, with a sibling sharing a prefix (a.b, a.bc) so that string
// prefixes which are not path prefixes get tried.
var (
	testPaths  = []string{"a", "a.b", "a.b.c", "a.bc", "a.b.d", "b", "b.a", "a.bc.d", "a.b.c.e"}
	testOps    = intents.Ops
	testAgents = []string{"A", "B", "C"}
	testIDs    = []string{"t0", "t1", "t2", "t3", "t4", "t5"}
)

// TestCheckMatchesBruteForce runs random Add/Remove/Check sequences and
// compares every answer with bruteCheck.
func TestCheckMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	paths := func() []string {
		var ps []string
		for range rng.IntN(4) {
			ps = append(ps, pick(testPaths))
		}
		return ps
	}
	writes := func() []intents.Write {
		var ws []intents.Write
		for range rng.IntN(4) {
			ws = append(ws, intents.Write{Path: pick(testPaths), Op: testOps[rng.IntN(len(testOps))]})
		}
		return ws
	}
	for round := range 100 {
		m := newModel(t)
		for range 500 {
			switch rng.IntN(6) {
			case 0, 1:
				m.add(&Txn{ID: pick(testIDs), Agent: pick(testAgents), Reads: paths(), Writes: writes()})
			case 2:
				m.remove(pick(testIDs), rng.IntN(5) == 0)
			case 3:
				self := ""
				if rng.IntN(2) == 0 {
					self = pick(testIDs)
				}
				m.writers(self, pick(testPaths), rng.IntN(4)-1)
			default:
				self := ""
				if rng.IntN(2) == 0 {
					self = pick(testIDs)
				}
				m.check(self, paths(), writes())
			}
		}
		if t.Failed() {
			t.Fatalf("round %d failed", round)
		}
		m.drain()
	}
}

// TestManyChildren crosses the slice/map threshold of a node both ways.
func TestManyChildren(t *testing.T) {
	m := newModel(t)
	for i := range 3 * maxKids {
		p := fmt.Sprintf("board.doc%d", i)
		m.add(&Txn{ID: fmt.Sprint("w", i), Agent: "A", Writes: []intents.Write{{Path: p + ".f", Op: intents.OpSet}}})
		m.add(&Txn{ID: fmt.Sprint("r", i), Agent: "B", Reads: []string{p}})
		m.check("", []string{"board"}, nil)
		m.check("", nil, []intents.Write{{Path: "board.doc0.f", Op: intents.OpIncr}})
	}
	if m.ix.root.kids[0].kidMap == nil {
		t.Fatal("a node with many children has no map")
	}
	for i := range 3 * maxKids {
		m.remove(fmt.Sprint("w", 3*maxKids-1-i), false)
		m.check("", []string{"board"}, []intents.Write{{Path: "board.doc1", Op: intents.OpSet}})
		m.writers("", "board", 5)
	}
	m.drain()
}

// TestCheckAllocs keeps the common case, a check that finds nothing, free of
// allocations once dst has room.
func TestCheckAllocs(t *testing.T) {
	ix := fill(1000)
	reads, writes := probe(-1)
	dst := make([]intents.Conflict, 0, 8)
	allocs := testing.AllocsPerRun(100, func() {
		dst, _ = ix.Check("", reads, writes, dst[:0])
	})
	if allocs != 0 {
		t.Errorf("a disjoint check makes %v allocations", allocs)
	}
}

// FuzzIndex decodes its input into Add/Remove/Check/WritersUnder steps over
// a tiny universe of paths and compares every answer with brute force.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 1, 1, 2, 0, 3, 1, 0, 0, 3, 1, 2, 0})
	f.Fuzz(runFuzzIndex)
}

// runFuzzIndex is the body of FuzzIndex.
func runFuzzIndex(t *testing.T, data []byte) {
	if len(data) > 2048 {
		return
	}
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	paths := func() []string {
		var ps []string
		for range next() % 4 {
			ps = append(ps, testPaths[next()%len(testPaths)])
		}
		return ps
	}
	writes := func() []intents.Write {
		var ws []intents.Write
		for range next() % 4 {
			p := testPaths[next()%len(testPaths)]
			ws = append(ws, intents.Write{Path: p, Op: testOps[next()%len(testOps)]})
		}
		return ws
	}
	self := func() string {
		if i := next() % (len(testIDs) + 1); i < len(testIDs) {
			return testIDs[i]
		}
		return ""
	}
	m := newModel(t)
	for len(data) > 0 {
		switch next() % 5 {
		case 0, 1:
			id, agent := testIDs[next()%len(testIDs)], testAgents[next()%len(testAgents)]
			m.add(&Txn{ID: id, Agent: agent, Reads: paths(), Writes: writes()})
		case 2:
			m.remove(testIDs[next()%len(testIDs)], next()%4 == 0)
		case 3:
			m.check(self(), paths(), writes())
		case 4:
			m.writers(self(), testPaths[next()%len(testPaths)], next()%4-1)
		}
	}
	m.drain()
}
