// Package agents is the Go SDK for agents and arbiters: the NATS side of
// CoAgent's wire contract (SPEC §6), spoken with the types of package
// intents. It never reaches into the coordinator or its log, so an agent in
// any language can do what it does.
//
// # Agents
//
// Connect makes a Client for one agent on a NATS connection the caller
// owns. Each call sends an intent (built with package intents' Builder) and
// returns its decision, or a typed error for a rejection
// (errors.Is(err, ErrConflict), ErrPreconditionFailed, …; a *RejectedError
// carries the decision):
//
//   - Apply decides one write at once; Update is a read-modify-write that
//     tries again with backoff after a conflict or a stale read, and
//     UpdateJSON its typed form;
//   - Propose opens a transaction (a Txn) whose lease the client renews in
//     the background until Commit or Abort; Lost says when it was preempted
//     or its lease ran out;
//   - Claim takes a task for the agent (a Claim): under a task rule with a
//     lease the client renews it in the background, its Apply and Release
//     carry the claim's fence, and Lost says when the coordinator
//     reclaimed the task;
//   - Read returns the current values and versions of paths, and Watch
//     follows the changes of a subtree from a revision without gaps;
//   - Submit sends an intent built by hand;
//   - Publish and Decision are the store-and-forward path: the intent is
//     stored on JetStream (coagent.intents.<agent>) and its decision
//     collected later, by the same id.
//
// Every other call goes by request/reply on coagent.api.submit.<agent>: the
// client sends the same intent again (same id) when a reply is lost, and
// waits through interim decisions (queued, escalated) for the final one.
//
// In a deployment of several shards (docs/sharding.md) the client sends
// each intent, read and watch to the shard that owns its boards, as the
// default shard's log says where its boards went, and the commit, abort
// and renew of a transaction or claim to the shard that granted it; an
// intent refused as another shard's is sent again where the shards say.
// Read of two shards' boards gives each one's revision (State.Revs).
//
//	c, err := agents.Connect(ctx, nc, "writer-1", agents.WithResend(5*time.Second))
//	d, err := c.Apply(ctx, intents.Apply("claim").
//		Set("report.sections.intro.owner", c.Name()).
//		Pre("state.report.sections.intro.owner == nil"))
//	if errors.Is(err, agents.ErrPreconditionFailed) {
//		// someone else holds the intro
//	}
//
// # Arbiters
//
// RunArbiter serves the arbiter queue (SPEC §5) until its context ends: it
// pulls one case at a time from the consumer all arbiters share, calls a
// Decide, checks the resolution against the case with arbiter.Check, sends
// it to the coordinator and acknowledges the case; a case it cannot settle
// is handed back and comes again, to it or another arbiter. What decides is
// the caller's: a rule of package arbiter (arbiter.Priority, …), or a
// language model behind ModelArbiter, which asks a Model with
// arbiter.Prompt and reads its answer with arbiter.ParseAnswer.
// ScriptedModel is a deterministic Model for tests.
//
//	decide := func(_ context.Context, c *intents.Escalation) (*intents.Resolution, error) {
//		return arbiter.Priority("judge", c), nil
//	}
//	err := agents.RunArbiter(ctx, nc, "judge", decide, agents.WithAckWait(time.Minute))
//
// # Dead letters
//
// A case no arbiter resolved by its deadline is decided by the
// coordinator's fallback and kept on the dead-letter stream. OpenDeadLetters
// reads them for the operator (under --auth, an agent with the role
// admin): List, Retry, which sends the escalated intent again under a new
// id and removes the letter, and Decision, which waits a while for the new
// intent's decision.
//
//	dl, err := agents.OpenDeadLetters(ctx, nc)
//	letters, err := dl.List(ctx)
//	again, err := dl.Retry(ctx, letters[0])
//	d, err := dl.Decision(ctx, again.ID, 5*time.Second)
//
// # Options
//
// A Client takes Options (WithResend, WithRetries, WithBackoff,
// WithDecisionHook) and an arbiter ArbiterOptions (WithAckWait,
// WithRetryDelay, WithResolveTimeout); WithPrefix and WithLogger are
// SharedOptions that both take. An option given to the wrong one does not
// compile. Every option's documentation states its default.
package agents
