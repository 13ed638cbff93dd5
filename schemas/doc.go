// Package schemas holds the JSON Schema (draft 2020-12) files of CoAgent's
// wire contract, the documents a client in another language validates
// against: intent.json (what agents send), decision.json (what the
// coordinator answers), escalation.json (an arbiter's case),
// resolution.json (an arbiter's answer), event.json (an entry of the event
// log and of its feed on NATS, which refers to the others by $id) and
// rules.json (the board rules file given to `coagent serve --rules` and to
// the rules.set API: who may write and read where, state machines, value
// schemas, invariants and quotas). The binary embeds them and prints them
// byte for byte (`coagent schema intent.json`), so the files in this
// directory are the published contract; docs/wire.md points at them.
//
// Names lists the files, Get returns one and FS serves them all; each
// schema's $id is BaseURL and its name, and they refer to each other by it,
// so a validator must be given all of them. Each schema's title is the
// name of the Go type that carries the document, in package intents or,
// for rules.json, coordinator/rules; the tests keep the two in agreement
// and list, in testdata, the rules only the Go validation can enforce.
// The package is a leaf: it imports nothing from this module.
//
//	for _, name := range schemas.Names() {
//		data, err := schemas.Get(name) // "intent.json", …
//		// add data to a validator under schemas.BaseURL + name
//	}
package schemas
