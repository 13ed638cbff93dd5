// Package conflict is the decision engine's view of what is in flight, for
// the conflict rules of SPEC §4: which transactions a new intent collides
// with, which it merges with, who waits on whom, and where conflicts happen
// most. It is pure and deterministic (no IO, no clock, results in a defined
// order), so replaying the event log through it reaches the same decisions
// the live coordinator made. Package engine keeps an Index and a Waits; the
// coordinator keeps the Hotspots.
//
// Index holds the read and write paths of every transaction in flight (a
// Txn) in a trie over path segments, so Check costs the depth of a new
// intent's paths plus the matches it finds, however many transactions are
// in flight; it reports write-write, read-write and write-read conflicts
// and the transactions the intent auto-merges with (incr/incr or
// append/append on the same path). Waits keeps the intents parked with
// on_conflict=wait: a FIFO queue per transaction they wait on, so that a
// transaction's end (Release) wakes its waiters in arrival order, and the
// agent-level wait-for graph, so that a wait which would close a cycle
// between agents (Cycle) is refused as a deadlock; WaitsState is its form
// in an engine snapshot. Hotspots counts conflicts per board, document and
// pair of agents, for the conflicts.top API.
//
//	ix := conflict.New()
//	t := &conflict.Txn{ID: txn, Agent: "writer-1", Reads: reads, Writes: writes}
//	ix.Add(t)                                              // a propose is granted
//	conflicts, merges := ix.Check("", reads2, writes2, nil) // a new intent arrives
//	ix.Remove(t)                                           // committed, aborted or expired
package conflict
