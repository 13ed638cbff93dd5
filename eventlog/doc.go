// Package eventlog is the durable, append-only log of every event the engine
// emits (SPEC §7), kept in Pebble: one synced batch per group of decisions,
// with the materialized state, the idempotency records and the indexes by
// agent, path, transaction and type beside the events. The state is a fold
// of the log, so replaying it to any sequence or time rebuilds the state the
// coordinator had then.
package eventlog
