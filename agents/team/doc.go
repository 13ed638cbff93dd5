// Package team is the reference team of SPEC §9, written as example agents
// on the SDK (package agents) and behind `coagent demo`: a researcher, an
// editor, N writers and an arbiter writing one report through a running
// coordinator, each on its own NATS connection, each speaking nothing but
// the wire contract.
//
// Each role thinks with a Model (agents.Model: a prompt in, a completion
// out). Scripted gives deterministic ones, functions of a seed and the
// prompt, so a run needs no network model, and the same seed writes the
// same report with the same counts of each decision; the races are real,
// so which writer wins each and the order the steps interleave in (the
// revisions, the ids, the timings) are not fixed by it. A real model plugs
// in through Config.Models.
//
// What the scenario shows, in order:
//
//   - The researcher applies one material per section (materials.<m> =
//     {title, status "approved", summary}) and the outline of the report.
//   - The writers race to claim sections: each applies
//     report.sections.<s>.owner on the condition that it is still nil. The
//     first two go for the same section; one wins, the other is rejected
//     with precondition_failed and claims the section left.
//   - Each writer writes its section in a transaction: a propose that reads
//     the material it cites and writes report.sections.<s>.text, then a
//     commit with the model's text. All are open at once, so the grants and
//     commits name each other in merged_with: disjoint edits of one
//     document merge.
//   - Meanwhile the editor demotes the material one writer cites, while that
//     writer's transaction reads it: the apply (on_conflict wait) is queued,
//     the writer is told on its notices that the editor waits on it and
//     finishes, and the editor's intent is decided again and applied.
//   - Two writers rewrite the intro: one holds a transaction on
//     report.intro, the other's apply escalates; the arbiter (an
//     agents.ModelArbiter) keeps one, and each writer is told its final
//     decision — committed or preempted, applied or arbiter_rejected.
//
// Run plays it against a running coordinator, as Config says (the NATS
// server, the seed, how many writers, the Models, an OnEvent to follow
// along), and returns a Result: the report, every decision the members
// were told (Result.Told, a Stats) and how long each took. The order of the
// steps is fixed by the agents waiting for each other in-process (who holds
// what is announced on channels, never guessed with sleeps); the races
// themselves are real.
//
//	res, err := team.Run(ctx, team.Config{URL: nats.DefaultURL, Seed: 7,
//		OnEvent: func(ev team.Event) { fmt.Println(ev.Agent, ev.Kind, ev.Text) }})
//	fmt.Print(res.Report) // the same for every run with seed 7
package team
