package conflict

import "slices"

// Holder is a transaction an intent waits on.
type Holder struct{ Txn, Agent string }

// Waits holds the intents parked with on_conflict=wait (SPEC §4): for each
// transaction, the intents waiting for it to end in the order they were
// parked, and the wait-for graph between agents that those waits form. It is
// not safe for concurrent use.
type Waits struct {
	queues map[string][]string // txn → ids of the intents waiting on it, oldest first
	parked map[string]parked   // id → what it waits on
	// graph[a][b] is how many (intent, transaction) waits make agent a wait
	// on agent b. Counting lets one wait end without dropping an edge that
	// another wait still makes.
	graph map[string]map[string]int
}

type parked struct {
	agent   string
	holders []Holder // distinct by Txn
}

// NewWaits returns an empty set of waits.
func NewWaits() *Waits {
	return &Waits{
		queues: make(map[string][]string),
		parked: make(map[string]parked),
		graph:  make(map[string]map[string]int),
	}
}

// Cycle reports whether making agent wait on transactions held by the given holders would
// close a cycle in the agent-level wait-for graph (an agent waiting on itself counts as a cycle).
//
// It is a search from the holders' agents for agent, so it costs at most the
// number of edges in the graph, and the answer does not depend on the order
// the search takes.
func (w *Waits) Cycle(agent string, holders []Holder) bool {
	seen := make(map[string]bool, len(holders))
	var todo []string
	for _, h := range holders {
		if h.Agent == agent {
			return true
		}
		if !seen[h.Agent] {
			seen[h.Agent] = true
			todo = append(todo, h.Agent)
		}
	}
	for len(todo) > 0 {
		a := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for b := range w.graph[a] {
			if b == agent {
				return true
			}
			if !seen[b] {
				seen[b] = true
				todo = append(todo, b)
			}
		}
	}
	return false
}

// Park records that intent id of agent waits on each holder's transaction:
// FIFO per txn, and edges agent→holder.Agent in the wait-for graph (counted,
// since several intents may make the same edge).
//
// Parking an id already parked sets its holders to exactly these: it keeps
// its place in the queue of every transaction it still waits on (a waiter
// re-parked after one blocker ended does not lose its turn behind the others)
// and joins the back of the queues of new ones. A holder listed more than
// once counts once. With no holders only Remove ends the wait.
func (w *Waits) Park(id, agent string, holders []Holder) {
	prev, again := w.parked[id]
	if again && prev.agent != agent {
		w.Remove(id)
		again = false
	}
	p := parked{agent: agent, holders: make([]Holder, 0, len(holders))}
	for _, h := range holders {
		if slices.ContainsFunc(p.holders, func(o Holder) bool { return o.Txn == h.Txn }) {
			continue
		}
		p.holders = append(p.holders, h)
		if again && slices.Contains(prev.holders, h) {
			continue // keeps its place and its edge
		}
		w.queues[h.Txn] = append(w.queues[h.Txn], id)
		w.addEdge(agent, h.Agent)
	}
	for _, h := range prev.holders {
		if again && !slices.Contains(p.holders, h) {
			w.leave(id, agent, h)
		}
	}
	w.parked[id] = p
}

func (w *Waits) addEdge(from, to string) {
	out := w.graph[from]
	if out == nil {
		out = make(map[string]int)
		w.graph[from] = out
	}
	out[to]++
}

// leave takes id out of h's queue and drops the edge that wait made.
func (w *Waits) leave(id, agent string, h Holder) {
	if q, ok := w.queues[h.Txn]; ok {
		if i := slices.Index(q, id); i >= 0 {
			q = slices.Delete(q, i, i+1)
		}
		if len(q) == 0 {
			delete(w.queues, h.Txn)
		} else {
			w.queues[h.Txn] = q
		}
	}
	out := w.graph[agent]
	if out[h.Agent]--; out[h.Agent] <= 0 {
		delete(out, h.Agent)
	}
	if len(out) == 0 {
		delete(w.graph, agent)
	}
}

// Release ends txn: it returns the ids waiting on it in the order they were
// parked and takes them out of its queue. They stay parked behind any other
// transactions they wait on, in their places there: the caller decides each
// again, then either Parks it (with its remaining or new holders) or Removes
// it.
func (w *Waits) Release(txn string) []string {
	ids := w.queues[txn]
	delete(w.queues, txn)
	for _, id := range ids {
		p := w.parked[id]
		i := slices.IndexFunc(p.holders, func(h Holder) bool { return h.Txn == txn })
		if i < 0 {
			continue
		}
		h := p.holders[i]
		p.holders = slices.Delete(p.holders, i, i+1)
		w.parked[id] = p
		w.leave(id, p.agent, h)
	}
	return ids
}

// Remove drops one parked intent (timed out, or decided some other way); no-op if absent.
func (w *Waits) Remove(id string) {
	p, ok := w.parked[id]
	if !ok {
		return
	}
	delete(w.parked, id)
	for _, h := range p.holders {
		w.leave(id, p.agent, h)
	}
}

// Parked reports whether intent id is waiting.
func (w *Waits) Parked(id string) bool {
	_, ok := w.parked[id]
	return ok
}

// Len returns the number of parked intents.
func (w *Waits) Len() int { return len(w.parked) }
