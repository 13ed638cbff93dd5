// Package engine is CoAgent's decision engine: the pure, deterministic core
// that decides every intent against the current state and the transactions
// in flight (SPEC §2–5). It does no IO and reads no clock: each call is
// given the time, and returns the events that record what it decided. The
// engine changes its own state only by folding those same events (Apply),
// so the event log is the whole truth: replaying it into a new engine
// rebuilds the state, the transactions in flight with their leases and
// fences, the parked intents and the recorded decisions exactly. Package
// coordinator's Core owns one engine and logs what it returns; nobody is
// told a decision before the log holds it.
//
// An Engine (New, with a Config whose every field documents its default)
// is driven by these calls, each appending its events to a slice the
// caller gives and handing back one Ready: Submit decides an intent as it
// arrived (an Input: raw or already decoded, with its trace header),
// Refuse records one the caller could not decide; Resolve settles an
// escalated intent with an arbiter's resolution; SetRules puts a rules
// file of package rules in force; Tick fires the timers due — leases,
// waits, arbiter deadlines. The Ready holds all the caller acts on once
// the events are durable: the submitted intent's own decision, the
// arbiter cases opened and settled and the dead letters, the rules put in
// force, and when to Tick next. State, Txns, Decision and Case answer
// reads. Snapshot and Restore save and rebuild the whole state, so a
// restart folds only the events after the snapshot.
//
// An Engine is not safe for concurrent use; one goroutine owns it.
//
//	e, err := engine.New(engine.Config{}) // zero Config: deterministic ids
//	r := e.Submit(now, engine.Input{Agent: "writer-1", Raw: raw}, nil)
//	// make r.Events durable, then answer r.Own
//	if r.HasNext {
//		// call e.Tick(r.Next, nil) then
//	}
package engine
