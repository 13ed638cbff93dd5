package eventlog

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/coagent/coagent/intents"
)

// The key space. Every key starts with one byte naming its family; terms in
// index keys end with 0x00, which no path, agent, type or txn id contains, so
// a term's keys sort together and in sequence order.
//
//	e<seq:8>                 an encoded event
//	s<path>                  the materialized entry of a path (kind, version, mod_rev, leaf value)
//	d<intent id>             the idempotency record: the id's decision
//	n<seq:8>                 a snapshot taken after event seq
//	m<name>                  metadata: "first" (the first event kept), "indexed" (the seq the index is complete to),
//	                         "intents" (the seq the intent index is complete to)
//	xa<agent>\0<seq:8>       index by agent
//	xt<type>\0<seq:8>        index by event type
//	xx<txn>\0<seq:8>         index by transaction
//	xp<prefix>\0<seq:8>      index by subtree: every proper prefix of every path an event concerns
//	xq<path>\0<seq:8>        index by exact path
//	xr<trace>\0<seq:8>       index by trace id (intents.Event.Trace)
//	xi<intent>\0<seq:8>      index by intent id (intents.Event.Intent)
//
// A path query for P reads xp P (events under P), xq P (events at P) and
// xq of each ancestor of P. Logs written before xp held the path itself
// too; the union is the same. Leaving the path itself to xq saves a key
// per path per index batch, the two holding the same events for a leaf.
//
// An index key holds a posting list: the events of its term in one index
// batch, seq (the key's) first. Its value is the gaps to the others, each
// a uvarint from the one before; an event alone has an empty value.
//
// The index trails the log. The committer gathers the terms of the groups
// it writes and writes their posting lists, with "indexed", in the batch of
// the group that brings them to Options.IndexEvery events (or on their own
// when the log is idle, or at Close), so an index batch never precedes the
// events it names and a crash loses only a suffix of the index; Open
// indexes the events after "indexed" again. A query reads the index to
// "indexed" and the events after it. One key per term and index batch,
// rather than per event or per commit group, is what lets group commit
// scale: the random-place inserts of index keys were most of the
// committer's memtable work (see BenchmarkAppendSynced in docs/performance.md).
// Logs written before "indexed" existed were indexed with every group:
// Open finds no mark and records that they are complete.
//
// The intent index came after the others, and unlike a trace, which no
// event had before its index, every log holds events with an intent: the
// index of a log written before it lacks them. So it has a mark of its
// own, "intents", which every index batch sets with "indexed"; Open indexes
// by intent the events from the mark (or the first event, with no mark)
// to "indexed", in batches of intentBatch events each with the mark, before
// it indexes the events after "indexed". That also covers a log a build
// from before the intent index appended to, which moves "indexed" alone.
// (Such a build's compaction leaves the intent keys of the events it drops,
// which queries pass over, as they start at the first event kept.)
const (
	famEvent    = 'e'
	famState    = 's'
	famDecision = 'd'
	famSnapshot = 'n'
	famMeta     = 'm'
	famIndex    = 'x'

	idxAgent   = 'a'
	idxType    = 't'
	idxTxn     = 'x'
	idxSubtree = 'p'
	idxExact   = 'q'
	idxTrace   = 'r'
	idxIntent  = 'i'
)

var (
	metaFirst   = []byte{famMeta, 'f', 'i', 'r', 's', 't'}
	metaIndexed = []byte{famMeta, 'i', 'n', 'd', 'e', 'x', 'e', 'd'}
	metaIntents = []byte{famMeta, 'i', 'n', 't', 'e', 'n', 't', 's'}
	metaState   = []byte{famMeta, 's', 't', 'a', 't', 'e'}
)

func eventKey(seq uint64) []byte { return appendEventKey(make([]byte, 0, 9), seq) }

func appendEventKey(dst []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, famEvent), seq)
}

func snapshotKey(seq uint64) []byte {
	k := eventKey(seq)
	k[0] = famSnapshot
	return k
}

func stateKey(path string) []byte { return appendKey(nil, famState, path) }

func decisionKey(id string) []byte { return appendKey(nil, famDecision, id) }

// appendKey appends the key of family fam named name.
func appendKey(dst []byte, fam byte, name string) []byte {
	return append(append(dst, fam), name...)
}

// indexKey is x<kind><term>\0<seq>.
func indexKey(dst []byte, kind byte, term string, seq uint64) []byte {
	dst = append(dst, famIndex, kind)
	dst = append(dst, term...)
	dst = append(dst, 0)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// indexPrefix is the prefix of every key of one term.
func indexPrefix(kind byte, term string) []byte {
	k := append([]byte{famIndex, kind}, term...)
	return append(k, 0)
}

// seqOf reads the sequence number at the end of an event, snapshot or
// index key.
func seqOf(key []byte) uint64 {
	if len(key) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(key[len(key)-8:])
}

// pathsOf returns the state paths an event concerns, for the path index:
// what a change wrote, what a grant may write, what an intent (received,
// parked or escalated) reads and writes, what a resolution's replacement
// reads and writes. The others (decisions, notices, renewals, releases)
// concern none: follow their intent or transaction. Nor does a change of
// the rules, though its patterns name paths: it is found by its type.
func pathsOf(ev *intents.Event) []string { return appendPaths(nil, ev) }

// appendPaths appends pathsOf(ev) to out.
func appendPaths(out []string, ev *intents.Event) []string {
	add := func(p string) {
		if p != "" && intents.CheckPath(p) == nil && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	addIntent := func(in *intents.Intent) {
		if in == nil {
			return
		}
		for _, w := range in.Writes {
			add(w.Path)
		}
		for _, r := range in.Reads {
			add(r.Path)
		}
	}
	switch {
	case ev.Change != nil:
		for _, w := range ev.Change.Writes {
			add(w.Path)
		}
	case ev.Grant != nil:
		addIntent(ev.Grant.Propose)
	case ev.Wait != nil:
		addIntent(ev.Wait.Intent)
	case ev.Received != nil:
		addIntent(ev.Received.Intent)
	case ev.Resolution != nil:
		addIntent(ev.Resolution.Replacement)
	}
	return out
}

// ancestors calls fn with every proper prefix of path, shortest first.
func ancestors(path string, fn func(string)) {
	for i := 0; i < len(path); i++ {
		if path[i] == '.' {
			fn(path[:i])
		}
	}
}

// indexTerm names one index term: its kind (idxAgent...) and the term.
type indexTerm struct {
	kind byte
	term string
}

// indexTerms calls fn with every index term of ev: a prefix two of its
// paths share comes twice.
func indexTerms(ev *intents.Event, fn func(indexTerm)) {
	idx := func(kind byte, term string) {
		if term != "" {
			fn(indexTerm{kind, term})
		}
	}
	idx(idxAgent, ev.Agent)
	idx(idxType, string(ev.Type))
	idx(idxTxn, ev.Txn)
	idx(idxTrace, ev.Trace)
	idx(idxIntent, ev.Intent)
	var buf [8]string
	for _, p := range appendPaths(buf[:0], ev) {
		ancestors(p, func(pre string) { idx(idxSubtree, pre) })
		idx(idxExact, p)
	}
}

// appendGaps appends the value of an index key whose posting list is seqs
// (ascending; the key holds seqs[0]).
func appendGaps(dst []byte, seqs []uint64) []byte {
	for i := 1; i < len(seqs); i++ {
		dst = binary.AppendUvarint(dst, seqs[i]-seqs[i-1])
	}
	return dst
}

// readPostings appends the posting list of an index key and its value to
// dst.
func readPostings(dst []uint64, key, value []byte) ([]uint64, error) {
	seq := seqOf(key)
	dst = append(dst, seq)
	for len(value) > 0 {
		gap, n := binary.Uvarint(value)
		if n <= 0 || gap == 0 {
			return dst, fmt.Errorf("%w: index key %q: bad posting list", ErrCorrupt, key)
		}
		seq += gap
		dst = append(dst, seq)
		value = value[n:]
	}
	return dst, nil
}
