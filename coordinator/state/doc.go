// Package state is the shared JSON tree of SPEC §1, with a version (how
// many commits changed a path or anything under it) and a mod_rev (the
// revision of the last one) on every path that was ever written. It is a
// pure data structure: the decision engine plans changes against it with
// Plan, and both the live engine and a replay of the event log change it
// only through Apply, so the state is by construction a fold of the
// committed changes.
//
// A Tree (New) is the state. Plan turns an intent's writes into the
// changes Apply folds (intents.Applied, with each path's version before
// and after), or refuses a write that does not fit the value it meets
// with a *TypeError or a *RangeError; After gives the View of the tree
// with a planned change applied, which postconditions read. Get and
// Version make a Tree (and a View) the cond.Reader conditions read;
// Lookup gives a path's Entry (value, version, mod_rev), and Stat the same
// without building objects. With Track on, Touched lists the paths the
// Applies since its last call changed, for the event log's materialized
// state. Export and Import turn a tree into Nodes and back, for the
// engine's snapshots, and Hash fingerprints it.
//
//	t := state.New()
//	plan, err := t.Plan(in.Writes) // checks, changes nothing
//	err = t.Apply(rev, plan)       // rev: the seq of the change event
//	e := t.Lookup("report.title")  // e.Value, e.Version, e.ModRev
package state
