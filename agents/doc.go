// Package agents is the Go SDK for agents and arbiters. A Client sends an
// agent's intents to the coordinator by request/reply on
// coagent.api.submit.<agent> and gives their decisions to the caller as
// results or typed errors (errors.Is(err, ErrConflict)); it sends an intent
// again, with the same id, when a reply is lost, and waits through interim
// decisions; it keeps transactions alive by renewing their leases, retries
// read-modify-writes with backoff (Update), and follows changes from a
// revision without gaps (Watch). Publish and Decision are the
// store-and-forward path: the intent is stored on JetStream
// (coagent.intents.<agent>) and its decision collected later. RunArbiter
// serves the arbiter queue. The package speaks only the wire contract of
// SPEC §6 (the types of package intents and the JSON Schemas of package
// schemas), never the coordinator's internals, so an agent in any language
// can do what it does.
package agents
