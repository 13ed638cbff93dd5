// Package coagent is the root of the CoAgent module: a coordinator for teams
// of agents that share state. Agents publish intents (what they read, what
// they will write, the conditions around it); the coordinator decides each
// against the state and the transactions in flight and records everything in
// an event log. The packages: intents (wire types and conditions), conflict
// (the in-flight index), coordinator/engine (the pure decision engine),
// coordinator/state (the versioned state tree), schemas (the JSON Schemas of
// the wire contract), and cmd/coagent (the command line). This package holds
// no code; its tests enforce the dependency rules between the others.
package coagent
