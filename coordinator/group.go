package coordinator

import (
	"context"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
)

// Via says how an intent came to the coordinator, and so where its
// decisions go (SPEC §6): the answer to a request is the reply; the
// decision of an intent that came through the intents stream is stored on
// the decisions stream, for an agent that published and moved on.
type Via uint8

const (
	// ViaStream is an intent from COAGENT_INTENTS.
	ViaStream Via = iota
	// ViaAPI is an intent from a submit request.
	ViaAPI
)

// Routed is one decision of a group and where it goes.
type Routed struct {
	Decision *intents.Decision
	// Via is how the decision's intent came, when the Core knows: an
	// intent decided in this process. Of one that was parked before a
	// restart, it does not (Known is false), and its decision is stored,
	// so that whoever sent it finds it.
	Via   Via
	Known bool
	// At is when it was decided: its event's time.
	At time.Time
}

// Store reports whether the decision goes to the decisions stream: its
// intent came through the intents stream, or nobody knows how. A decision
// of an API submit goes to its request (and to a later one for the same
// intent); the service stores it too if no request is waiting for it
// any more.
func (r Routed) Store() bool { return !r.Known || r.Via == ViaStream }

// Group is one durable group, as the Core hands it to the service: the
// batch of events one Commit enqueued in the log (durable once Wait
// returns) and everything to be done once it is. The service persists,
// publishes and acknowledges it and derives nothing from it: the group
// says where each decision goes, which events are changes for the feed,
// which are notices, which arbiter cases it opened, which it settled, and
// which of those went unresolved, as dead letters. The batch is the unit a
// replicated log would append as one message.
type Group struct {
	// Batch is what the log stores: the events, in sequence order, with
	// the materialized state they leave.
	Batch *eventlog.Batch
	// Decisions are the batch's decisions, in order, each with its route.
	Decisions []Routed
	// Changes go to the change feed (COAGENT_EVENTS); Notices to their
	// agents' notices subjects; Live, every event but a change, out live
	// on coagent.events.<type>.
	Changes, Notices, Live []*intents.Event
	// Rev is the state's revision once the group is durable: the last
	// event that changed the state, a change or a board leaving or coming
	// (docs/sharding.md), in this group or before it.
	Rev uint64
	// Cases are the arbiter cases the batch opened, for the arbiters'
	// queue; Dead the cases whose deadline passed unresolved, for the
	// dead-letter stream.
	Cases, Dead []*intents.Escalation
	// Settled are the ids of the cases the batch settled (resolved, by an
	// arbiter or the fallback, or ended by their intent's final decision):
	// their messages leave the arbiters' queue, so that an arbiter does not
	// receive a case nobody can resolve any more.
	Settled []string
	// Reclaimed are the task claims whose lease ended unrenewed in the
	// batch: their tasks went back.
	Reclaimed []engine.Reclaimed
	// DeadTasks are the tasks tried past their rule's max_retries in the
	// batch: each goes to the dead-letter stream.
	DeadTasks []*intents.DeadTask
	// Rules, when RulesChanged, is the board rules the batch put in force
	// (nil: none): reads are answered under them once it is durable.
	RulesChanged bool
	Rules        *rules.Set
	// Next is when the engine's next timer is due (HasNext false: none).
	Next    time.Time
	HasNext bool

	pending *eventlog.Pending
}

// Wait returns once the group is durable in the log, or with the log's
// error.
func (g *Group) Wait(ctx context.Context) error { return g.pending.Wait(ctx) }

// Last is the sequence number of the group's last event.
func (g *Group) Last() uint64 { return g.pending.Last() }

// route notes where the decisions among evs go: own, the decision of the
// intent evs were decided for (nil: they decided none, as Tick's), goes
// by via, and every other decision (a transaction it preempted, a waiter
// freed, a timer that fired) where its intent came, as far as the Core
// knows. It remembers how each intent still waiting for its final
// decision came; a duplicate's does not change that.
func (c *Core) route(evs []*intents.Event, own *intents.Decision, via Via) {
	for _, ev := range evs {
		d := ev.Decision
		if d == nil {
			continue
		}
		var r Routed
		if d == own {
			r = Routed{Decision: d, Via: via, Known: true, At: ev.Time}
		} else {
			r.Decision, r.At = d, ev.Time
			r.Via, r.Known = c.via[d.Intent]
		}
		if d.Intent != "" && r.Known && !d.Duplicate {
			if d.Outcome.Final() {
				delete(c.via, d.Intent)
			} else {
				c.via[d.Intent] = r.Via
			}
		}
		c.routes = append(c.routes, r)
	}
}
