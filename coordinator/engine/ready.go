package engine

import (
	"time"

	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
)

// Ready is everything one call that decides — Submit, Refuse, Tick,
// Resolve, SetRules — hands its caller, who makes Events durable and only
// then acts on the rest: answers Own, sends the arbiters their cases,
// serves reads under Rules, and calls Tick again at Next. The caller
// learns nothing by reading the events' types, nor by asking the engine
// afterwards.
type Ready struct {
	// Events are the slice the call was given with the call's events
	// appended, each folded into the engine already.
	Events []*intents.Event
	// ID is the id of the intent Submit or Refuse was given, "" when it
	// has none that is usable; Own is its decision, nil for the other
	// calls. A Submit's events may hold other decisions too: of timers
	// that fired first, of a transaction it preempted, of waiters it
	// freed.
	ID  string
	Own *intents.Decision
	// Effects are what the call did for the arbiters beside its events.
	Effects Effects
	// Records are the call's decisions that become their intent ids'
	// recorded decisions, in order, a later one of an id replacing an
	// earlier: what the event log keeps to answer a duplicate the engine
	// no longer remembers. The engine alone says which (see claim); the
	// slice is valid until the next call.
	Records []*intents.Decision
	// Changes are the call's changes, for the change feed; Notices its
	// events addressed to one agent; Live every event but a change, to be
	// sent as it happens. Touched are the state paths its changes bumped,
	// possibly repeated: the entries the log's materialized state must
	// write again. The four are valid until the next call.
	Changes, Notices, Live []*intents.Event
	Touched                []string
	// RulesChanged says the call put board rules in force: Rules (nil:
	// none).
	RulesChanged bool
	Rules        *rules.Set
	// Next is when the earliest timer is due after the call (HasNext
	// false: none).
	Next    time.Time
	HasNext bool
}

// Add appends more to fx, as a caller gathers the effects of many calls.
func (fx *Effects) Add(more Effects) {
	fx.Cases = append(fx.Cases, more.Cases...)
	fx.Dead = append(fx.Dead, more.Dead...)
	fx.Settled = append(fx.Settled, more.Settled...)
	fx.Reclaimed = append(fx.Reclaimed, more.Reclaimed...)
	fx.DeadTasks = append(fx.DeadTasks, more.DeadTasks...)
}
