// Package loadgen is the load generator behind `coagent bench`: a number
// of agents, each on its own NATS connection, send intents over the wire as
// fast as their decisions come back, and measure throughput and latency.
// The agents speak the wire themselves, not through the SDK (package
// agents), so that what is measured is the coordinator and the server; and
// the package is internal because nothing but `coagent bench` runs it.
//
// An agent reaches the coordinator by one of the two paths of SPEC §6
// (Path): request/reply on coagent.api.submit.<agent>, the reply being the
// decision, or store-and-forward on coagent.intents.<agent> with the
// decision read on coagent.decisions.<agent>. On either path a lost answer
// is recovered by sending the same intent (same id) again, and a decision
// is counted once per intent id, however many times it arrives.
//
// What the agents do is the Workload: uncontended applies, read and
// compare-and-set on hot keys, increments on hot keys, or transactions.
// Every run ends with the lost-update check: each key the agents wrote is
// read back, and its version (how many commits changed it) — and, where the
// workload makes it one, its value — must equal the updates the agents saw
// applied to it. A lost update or one applied twice fails the check.
//
// Beside the coordinator the same agents, on the same connections, measure
// two baselines: JetStream synchronous publish-and-ack to a file stream, and
// core NATS request/reply to a responder that does nothing. The first is
// what a team would use instead of a coordinator; the second is the most a
// round trip through the server can do. On a JetStream cluster the first
// stream has Config.Replicas replicas (3 beside a coordinator whose streams
// are R3), and the agents, given every node's URL, connect across the nodes
// (Result.Servers says where).
//
// Run takes a Config (every field documents its default; Validate reports
// every bad one) and returns a Result: the throughput and Latency of the
// coordinator and of both baselines, the Ratio between them, the outcomes,
// retries and sends again, and the lost-update check's Mismatches.
//
//	res, err := loadgen.Run(ctx, loadgen.Config{URL: nats.DefaultURL,
//		Workload: loadgen.WorkloadRMW, Agents: 50, Keys: 16, Duration: 5 * time.Second})
//	if err == nil && (res.Lost != 0 || len(res.Mismatches) > 0) {
//		// an update was lost or applied twice
//	}
package loadgen
