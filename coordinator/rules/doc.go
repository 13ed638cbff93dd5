// Package rules is the governance of the shared state in one place (board
// rules): a rules file says, per path pattern, which agents or roles may
// write or read there, which transitions a value may make (a state
// machine), which JSON Schema a written value must satisfy, what kind of
// record it is, and which conflict policy applies when an intent names
// none; invariants are expressions over the state that every commit
// touching their paths must leave true; quotas bound what one agent or role
// may send. The file comes from `coagent serve --rules` or the rules.set
// API, and the engine puts it in force with a rules event (Engine.SetRules).
// Like the engine it is pure: a Set is a function of the file's bytes, so a
// replay that meets the same rules event decides the same.
//
// File is the rules file as written (schemas/rules.json): its Rules, each
// a path pattern (see Pattern) with what governs the paths it matches, its Invariants, Quotas
// and Limits. Compile checks a file and returns a Set, immutable, or an
// *Error naming the field. The engine asks the Set at each decision —
// CheckIntent (the limits), Authorize (writers and readers), Invariants,
// CheckChange (state machines, schemas and record kinds, on the state
// before and after the change), OnConflict, MayPreempt, QuotaOf — and
// turns a Violation into the intent's rejection, or, when two facts
// contradict each other, into a case for the arbiter. The
// coordinator's reads ask it what a Viewer may see (MayRead, Redact).
//
//	set, err := rules.Compile(file, compiler)
//	if detail, ok := set.Authorize("writer-1", reads, writes); !ok {
//		// rejected unauthorized, with detail
//	}
//	if v := set.CheckChange("writer-1", writes, before, after, false); v != nil {
//		// rejected with v.Reason and v.Detail, or escalated if v.Contradiction
//	}
package rules
