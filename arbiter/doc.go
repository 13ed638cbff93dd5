// Package arbiter holds the built-in rule arbiters of SPEC §5: policies that
// turn an escalation case (an intents.Escalation: the intents in conflict,
// the current values and versions of the paths involved, the transaction in
// flight and a deadline) into the resolution sent back (an
// intents.Resolution): Priority, First and Reject, found by name with
// ByName. Like the engine it is pure — no IO, no clock: the SDK's
// agents.RunArbiter and `coagent arbiter` carry cases and resolutions over
// NATS, and the coordinator checks and applies what they send.
package arbiter
