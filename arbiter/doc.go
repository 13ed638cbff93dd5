// Package arbiter is the arbiter's logic (SPEC §5): what an escalation case
// is answered with, and what answer fits it. A case (an intents.Escalation)
// holds the escalated intent (Escalation.Escalated), the proposes of the
// transactions in flight it conflicts with (Escalation.Proposes, the
// holder's first), the current values and versions of the paths involved,
// and a deadline; its answer is an intents.Resolution naming the winners,
// the losers or a replacement, with a rationale.
//
// Like the engine it is pure — no IO, no clock: the SDK's agents.RunArbiter
// and `coagent arbiter` carry cases and resolutions over NATS, and the
// coordinator applies what they send. Both sides judge a resolution by the
// same rule:
//
//   - Check reports every way a resolution does not fit its case, as a
//     *ResolutionError (errors.Is ErrBadResolution). The coordinator's
//     engine refuses what it finds; an arbiter checks its answer with it
//     before sending. IDs lists the intents a resolution may name, and
//     EscalatedWins says whether a resolution lets the escalated intent
//     win.
//   - Policy is a rule arbiter: Priority, First and Reject, found by name
//     with ByName (the names `coagent arbiter --policy` and the
//     coordinator's fallback take).
//   - Prompt renders a case for a language model, and ParseAnswer reads
//     the model's answer back into a resolution, refusing one that does not
//     fit with an *AnswerError (errors.Is ErrModelOutput);
//     agents.ModelArbiter joins the two around a model. PromptIntents reads
//     a prompt's intents back, for scripted models in tests.
//   - Retry builds the intent that retries a dead letter (a case no arbiter
//     resolved by its deadline), as `coagent dlq retry` sends it.
//
// A rule arbiter, and the check its answer passes:
//
//	res := arbiter.Priority("judge", c) // the higher priority wins
//	if err := arbiter.Check(c, res); err != nil {
//		// a bug in the rule: the coordinator would refuse res
//	}
//
// A model arbiter's round, the model's call left to the caller:
//
//	out, err := model.Complete(ctx, arbiter.Prompt(c))
//	res, err := arbiter.ParseAnswer(c, out) // Arbiter left to sign
package arbiter
