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
// version it names and adds one to it, an increment always applies.
package robustness
