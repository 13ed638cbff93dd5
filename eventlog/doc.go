// Package eventlog is the durable, append-only log of every event the engine
// emits (SPEC §7), kept in Pebble: each event as a versioned binary record,
// and beside the events the materialized state, the idempotency records and
// indexes by agent, type, transaction and path. The state is a fold of the
// log, so replaying it to any sequence or time rebuilds the state the
// coordinator had then. It is the coordinator's durable point: nothing is
// answered or published before the log holds it. (The COAGENT_EVENTS
// stream on NATS is not the log: it holds only the changes, for watchers;
// the whole history is read from the log, through the log.query API.)
//
// Appends are group-committed: batches are queued in order and one
// committer writes everything queued since its last sync in one synced
// write, so a crash loses only whole batches at the end. The index trails
// the log by at most Options.IndexEvery events, and queries read the
// events after it, so they answer for every durable event. The
// materialized state trails it the same way; a crash leaves it stale
// (StateSeq), and whoever folds the log puts it back (RewriteState).
//
// A Log (Open, with Options whose every field documents its default) takes
// a Batch — a run of events continuing the sequence and the state Entries
// they leave — with Enqueue, which returns a Pending to Wait on until the
// batch is durable (Append does both). It answers from what it holds:
// Query a page of the audit trail, Event one event, Scan and Fold the
// events in order for replays, Decision the recorded decision of an intent
// id, Entry and Entries the materialized state. SaveSnapshot and Snapshot
// keep the engine's snapshots, from which Compact lets the events before
// them go. AppendEvent and DecodeEvent are the record format (see
// docs/eventlog.md).
//
// A store that is damaged, or a disk that is full, is an error, never a
// panic or a hang: Open, every read and Check return a *CorruptError that
// names the damaged file (and the events or keys it holds, where known)
// or a *DiskFullError that names the directory and its free space, and
// the log stops acknowledging appends once it has met either. Only a
// failed write of the WAL itself ends the process (see Log).
//
//	log, err := eventlog.Open(dir, nil)
//	p, err := log.Enqueue(&eventlog.Batch{Events: evs, State: entries})
//	err = p.Wait(ctx) // durable
//	evs, next, err := log.Query(eventlog.Query{Agent: "writer-1", Limit: 50})
//	err = log.Scan(from, until, func(ev *intents.Event) error { ... })
package eventlog
