// Package agents is the Go SDK for agents and arbiters. A Client publishes
// an agent's intents on coagent.intents.<agent>, matches the decisions that
// come back on coagent.decisions.<agent> by intent id, and gives them to
// the caller as results or typed errors (errors.Is(err, ErrConflict)); it
// keeps transactions alive by renewing their leases, retries
// read-modify-writes with backoff (Update), and follows changes from a
// revision without gaps (Watch). RunArbiter serves the arbiter queue. The
// package speaks only the wire contract of SPEC §6 (the types of package
// intents and the JSON Schemas of package schemas), never the
// coordinator's internals, so an agent in any language can do what it
// does.
package agents
