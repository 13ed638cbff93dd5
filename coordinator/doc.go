// Package coordinator puts the decision engine on the wire and on disk: it
// takes intents from NATS, has the pure engine decide them, makes every
// decision durable in the event log, and only then tells anyone.
//
// # One intent, end to end
//
// An agent sends an intent by request/reply on coagent.api.submit.<agent>
// (api.go) or stores it on the COAGENT_INTENTS stream (streams.go). Either
// way it enters one bounded intake; a full intake answers unavailable at
// once, and the agent sends the same intent again.
//
// The loop (loop.go) is the only goroutine that touches the Core. It
// drains the intake in arrival order and hands each raw intent to
// Core.Decide, which decodes it, has the engine decide and fold it, and
// contains a panic as that intent's rejection. What arrives while the log
// is busy is decided into the same batch, and one Core.Commit enqueues the
// whole batch in the log as one Group (group.go): the events, the state
// they leave, and what is to be done once they are durable — each
// decision with its route (a reply, the decisions stream), the changes for
// the feed, the notices, the arbiter cases and dead letters, the next
// timer.
//
// The output stage (output.go) waits for each group to be durable, then
// does what the group says and derives nothing: it answers the waiting
// submits (replies.go), stores the decisions of stream intents on
// COAGENT_DECISIONS, publishes changes on COAGENT_EVENTS and the other
// events live on core NATS, queues arbiter cases, and acknowledges the
// batch's stream messages with one AckAll once their decisions are
// stored. A coordinator killed at any instant has told nobody anything
// the log does not hold; the intents it had not acknowledged come again
// and are answered from their recorded decisions.
//
//	svc, err := coordinator.Start(ctx, nc, dir, coordinator.Options{})
//	defer svc.Shutdown(ctx) // decides what arrived, then closes the log
//
// # Reads
//
// The API's reads (state.get, log.query, txn.list, decision.get,
// conflicts.top, feed.follow) are answered as the board rules let the
// requesting agent see (view.go); without authentication, as to anyone.
//
// # Without NATS
//
// Core pairs the engine with the log for callers that bring their own
// transport. Rebuilding state from the log alone — replay.Rebuild, which
// OpenCore folds with, replay.Run and replay.Verify for `coagent replay`
// and `coagent verify` on a stopped coordinator's data directory — is
// package coordinator/replay, which does not import NATS, so the offline
// tools link no transport.
//
//	core, err := coordinator.OpenCore(dir, coordinator.CoreOptions{})
//	d := core.Decide(time.Now(), engine.Input{Agent: "writer-1", Raw: rawIntent}, coordinator.ViaAPI)
//	g, err := core.Commit() // one synced write for all decided since
//	err = g.Wait(ctx)       // durable: now tell the agent d.Own
//
// # In a cluster
//
// Package coordinator/cluster runs a coordinator as one member of a
// cluster, building on this package, never the reverse. A member that
// takes over starts its Service with StartActive, handing it the Core it
// followed the replicated log with and a Replicator, through which the
// Core stores each group in the log of record before its own log writes
// it; as a standby it folds the log through Core.Follow and answers reads
// through a Standby.
//
// A data directory written under wire contract v1 is read as it is; the
// JetStream streams a v1 coordinator made are migrated at start, before
// any intake, by package coordinator/migrate.
package coordinator
