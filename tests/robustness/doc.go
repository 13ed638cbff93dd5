// Package robustness checks CoAgent's answers against one serial order
// while its processes die: agents drive a real coordinator process over a
// real NATS server with reads, compare-and-sets and increments, a fault
// chosen by a seed strikes (the coordinator SIGKILLed and restarted, with
// or without losing what its log had not fsynced, as a power cut), every
// operation is recorded with its invocation and return on one monotonic
// clock, the outcomes no reply told are asked of decision.get once the
// fault has healed, and the history is checked for linearizability with
// porcupine, path by path. The model of a path is its value and version
// (SPEC §1): a read sees both, a compare-and-set applies only at the
// version it names and adds one to it, an increment always applies. The
// model of a task under a leased claim is its owner and fences: a claim
// takes a task with no owner under a fence above every one it showed
// before, a renewal or release applies only for the owner under its
// claim's fence, and a reclaim, which no client makes, is inferred where
// the history shows one.
package robustness
