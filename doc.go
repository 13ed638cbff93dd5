// Package coagent is the root of the CoAgent module: a coordinator for
// teams of agents that share state. Agents send intents (what they read,
// what they will write, the conditions around it) over NATS, mainly by
// request/reply on coagent.api.submit.<agent>; the coordinator decides each
// against the state and the transactions in flight, makes the decision
// durable in an event log, and only then answers it and publishes the
// changes. This package holds no code; its tests (deps_test.go) enforce the
// dependency rules between the others.
//
// The packages, from the wire inwards:
//
//   - intents: the wire contract in Go (intents, decisions, events,
//     subjects, conditions); schemas: its JSON Schemas;
//   - agents: the Go SDK for agents and arbiters; agents/team: the
//     reference team behind `coagent demo`;
//   - coordinator: the service on NATS and the Core that pairs the engine
//     with the log; coordinator/engine: the pure decision engine, with
//     conflict (what is in flight), coordinator/state (the versioned state
//     tree) and coordinator/rules (the board rules);
//   - arbiter: what an escalation is answered with, for the arbiters and
//     the engine alike;
//   - eventlog: the durable log on Pebble;
//   - cmd/coagent: the command line, the only place that reads flags and
//     signals and wires the rest together; internal/: its helpers (natsauth, loadgen) and
//     the tests' (natstest, coordtest);
//   - examples/: the programs README.md and docs/ quote, built and tested.
//
// The pure core (intents, conflict, arbiter and coordinator's engine, state
// and rules) does no IO and reads no clock or randomness; the SDK (agents
// and below) never reaches the coordinator, the log or internal/;
// internal/loadgen speaks the wire without the SDK; schemas imports
// nothing of the module.
//
// One intent, from an agent in Go (examples/go/quickstart is the whole
// program):
//
//	c, err := agents.Connect(ctx, nc, "writer-1")
//	d, err := c.Apply(ctx, intents.Apply("claim").
//		Set("report.sections.intro.owner", c.Name()).
//		Pre("state.report.sections.intro.owner == nil"))
package coagent
