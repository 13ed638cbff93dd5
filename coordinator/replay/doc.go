// Package replay rebuilds the coordinator's state from the event log
// alone, for the tools that run on a stopped coordinator's data directory
// and for the Core that opens one. Rebuild folds the log from its latest
// snapshot that restores (how a Core opens, and how it recovers from a
// contained panic); Run stops the fold after an event or at a time
// (`coagent replay`, `coagent compact`); Verify folds the whole log and
// checks the materialized state the log keeps against it, path by path
// (`coagent verify`); Hash names a state by the hash the live coordinator
// and every replay agree on. It folds through the engine's own Apply, so
// a replay is the state the coordinator had, and it never imports NATS:
// the offline tools work, and link, without a transport (deps_test.go at
// the module root checks).
package replay
