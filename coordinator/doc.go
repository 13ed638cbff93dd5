// Package coordinator puts the decision engine on the wire and on disk.
//
// Core pairs the pure engine with the event log: every decision is in the
// log before anyone may act on it, and a coordinator killed at any instant
// reopens with the same state, transactions, leases and parked intents.
//
//	core, err := coordinator.OpenCore(dir, coordinator.CoreOptions{})
//	evs := core.Decide(time.Now(), "writer-1", rawIntent) // as many as arrived
//	pending, err := core.Commit()                          // one synced write for all
//	err = pending.Wait(ctx)                                // durable: now tell the agents
//
// Rebuild, ReplayUntil and Verify rebuild state from the log alone, for
// `coagent replay` and `coagent verify` on a stopped server's data
// directory.
//
// Service runs a Core on NATS JetStream (SPEC §6): it consumes
// coagent.intents.<agent>, decides batches in stream order on one goroutine,
// and once each batch is durable publishes the decisions, notices, events
// and arbiter cases, then acknowledges the intents; it serves the API as the
// micro service "coagent".
//
//	svc, err := coordinator.Start(ctx, nc, dir, coordinator.Options{})
//	defer svc.Shutdown(ctx) // finishes the batch in hand, then closes the log
package coordinator
