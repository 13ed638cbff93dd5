// Package intents is the wire contract of SPEC §2–§6 in Go: the intent, the
// decision, the event and the escalation with their JSON names, the strict
// decoder that turns bytes into a validated intent or a *ValidationError
// naming the field and value, the path rules (segments, overlap, boards),
// the expr-lang conditions with their nil-safe reading of the state, the
// subject names, and a builder that makes intents readable in Go. It
// imports nothing of the coordinator, so an agent and the coordinator agree
// on the protocol by sharing this package and nothing else.
package intents
