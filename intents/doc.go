// Package intents is the wire contract of SPEC §2–§6 in Go: what agents
// send, what the coordinator answers, what the event log records and what
// arbiters are asked, with their JSON names; the rules an intent must keep;
// the conditions it carries; and the subjects everything travels on. It
// imports nothing of the coordinator, so an agent and the coordinator agree
// on the protocol by sharing this package and nothing else.
//
// The documents: an Intent (its Kind — apply, propose, commit, abort,
// renew —, Reads, Writes with their Op, pre- and postconditions and
// OnConflict policy) is answered with a Decision (an Outcome, and for a
// rejection a Reason, the error code of SPEC §3, with a Detail). The log
// records Events of each EventType (the intent Received, a Change, a
// Grant, a Release, a Wait, a Notice, a Resolution, the Rules). An arbiter
// is sent an Escalation and answers with a Resolution.
//
// Decode reads an intent as strictly as schemas/intent.json does, and a
// bad field is a *ValidationError naming the field and its value;
// DecodeResolution reads a resolution the same way. Paths follow the rules
// of CheckPath, Overlaps and Within, and Board and Document name their
// place on the board. Conditions are text here, checked only for their
// number, length and encoding: the coordinator compiles and evaluates them
// (coordinator/cond), so an agent that sends them links no expression
// engine. Subjects spells every subject and stream under a prefix, and the
// API… constants the API's endpoints: the main path is request/reply on
// coagent.api.submit.<agent> (Subjects.Submit), the store-and-forward one
// the stream on coagent.intents.<agent>. A Builder (Apply, Propose) makes
// intents readable in Go.
//
//	in, err := intents.Apply("claim").
//		Set("report.sections.intro.owner", "writer-1").
//		Pre("state.report.sections.intro.owner == nil").
//		Build() // the first problem, as a *ValidationError
//	subject := intents.Subjects{}.Submit("writer-1") // coagent.api.submit.writer-1
package intents
