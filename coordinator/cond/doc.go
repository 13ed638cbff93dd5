// Package cond compiles, evaluates and meters the pre- and postconditions
// of intents (SPEC §2): expr-lang expressions over the shared state. A
// Compiler turns an expression's text into a Condition, cached by text,
// with the state paths it reads, which join the intent's read set; a
// missing path reads as nil at any depth, and `old` (postconditions only)
// is the state before the writes. An Evaluator runs conditions against a
// Reader — the engine's state tree, or its view after a planned change —
// on behalf of an intent, with the decision's time as now(). Every step
// whose work grows with what it reads is charged before it runs, against a
// budget shared by one intent's conditions and counted in units, never
// timed, so the same intent against the same state gets the same decision
// live and on replay; over it, Eval returns a *BudgetError. expr's
// builtins are an allow-list: all disabled, each one with a cost class
// enabled again, so a condition that calls any other does not compile. The
// package lives with the coordinator, apart from the wire types of
// intents, so agents that only send conditions never link the expression
// engine.
//
//	c := cond.NewCompiler(cond.Options{})
//	pre, err := c.Compile("pre[0]", `state.tasks.t1.owner == nil`, false)
//	ev := c.NewEvaluator() // one per goroutine
//	ev.Begin(now)          // once per intent: a full budget, and now()
//	ok, err := ev.Eval(pre, tree, nil, in)
package cond
