// Package agents is the Go SDK for agents and arbiters: it publishes intents
// on coagent.intents.<agent>, follows their decisions on
// coagent.decisions.<agent>, and retries with fresh versions when told to.
// It speaks only the wire contract of SPEC §6 (the types of package intents
// and the JSON Schemas of package schemas), never the coordinator's
// internals, so an agent in any language can do what it does.
package agents
