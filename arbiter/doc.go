// Package arbiter settles the conflicts the engine cannot merge (SPEC §5):
// the escalation case an arbiter receives — the intents in conflict, the
// current values and versions of the paths involved, the transaction in
// flight and a deadline — the resolution it sends back, and the built-in rule
// arbiters (priority, first come, reject all). Like the engine it is pure:
// the coordinator moves cases and resolutions over NATS.
package arbiter
