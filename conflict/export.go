package conflict

import (
	"fmt"
	"slices"
	"strings"
)

// WaitsState is everything a Waits holds, in a form that encodes to JSON and
// back: each parked intent with what it waits on, and each transaction's
// queue in order. The wait-for graph is not in it: it follows from the
// holders.
type WaitsState struct {
	Queues []WaitQueue  `json:"queues"` // sorted by txn
	Parked []ParkedWait `json:"parked"` // sorted by id
}

// WaitQueue is the intents waiting on one transaction, oldest first.
type WaitQueue struct {
	Txn string   `json:"txn"`
	IDs []string `json:"ids"`
}

// ParkedWait is one parked intent: its agent and the transactions it still
// waits on, in the order Park was given them.
type ParkedWait struct {
	ID      string   `json:"id"`
	Agent   string   `json:"agent"`
	Holders []Holder `json:"holders"`
}

// Export returns the state of w, sorted, sharing nothing with it.
func (w *Waits) Export() WaitsState {
	s := WaitsState{Queues: make([]WaitQueue, 0, len(w.queues)), Parked: make([]ParkedWait, 0, len(w.parked))}
	for txn, ids := range w.queues {
		s.Queues = append(s.Queues, WaitQueue{Txn: txn, IDs: slices.Clone(ids)})
	}
	for id, p := range w.parked {
		s.Parked = append(s.Parked, ParkedWait{ID: id, Agent: p.agent, Holders: slices.Clone(p.holders)})
	}
	slices.SortFunc(s.Queues, func(a, b WaitQueue) int { return strings.Compare(a.Txn, b.Txn) })
	slices.SortFunc(s.Parked, func(a, b ParkedWait) int { return strings.Compare(a.ID, b.ID) })
	return s
}

// ImportWaits rebuilds the Waits that Export described, recomputing the
// wait-for graph. It shares nothing with s. It returns an error for a state
// no sequence of Park, Release and Remove makes: an id or txn that is empty
// or listed twice, a parked intent without an agent or listing a txn twice,
// and queues that do not hold each parked intent exactly once behind each
// transaction it waits on, and nothing else.
func ImportWaits(s WaitsState) (*Waits, error) {
	w := NewWaits()
	for _, p := range s.Parked {
		if p.ID == "" || p.Agent == "" {
			return nil, fmt.Errorf("conflict: import waits: parked intent %q of agent %q: empty id or agent", p.ID, p.Agent)
		}
		if _, dup := w.parked[p.ID]; dup {
			return nil, fmt.Errorf("conflict: import waits: intent %s parked twice", p.ID)
		}
		for i, h := range p.Holders {
			if h.Txn == "" || h.Agent == "" {
				return nil, fmt.Errorf("conflict: import waits: intent %s waits on txn %q of agent %q: empty txn or agent", p.ID, h.Txn, h.Agent)
			}
			if slices.ContainsFunc(p.Holders[:i], func(o Holder) bool { return o.Txn == h.Txn }) {
				return nil, fmt.Errorf("conflict: import waits: intent %s waits on txn %s twice", p.ID, h.Txn)
			}
			w.addEdge(p.Agent, h.Agent)
		}
		w.parked[p.ID] = parked{agent: p.Agent, holders: slices.Clone(p.Holders)}
	}
	entries := 0
	for _, q := range s.Queues {
		if q.Txn == "" || len(q.IDs) == 0 {
			return nil, fmt.Errorf("conflict: import waits: queue of txn %q: empty txn or queue", q.Txn)
		}
		if _, dup := w.queues[q.Txn]; dup {
			return nil, fmt.Errorf("conflict: import waits: txn %s has two queues", q.Txn)
		}
		seen := make(map[string]bool, len(q.IDs))
		for _, id := range q.IDs {
			p, ok := w.parked[id]
			if !ok || !slices.ContainsFunc(p.holders, func(h Holder) bool { return h.Txn == q.Txn }) {
				return nil, fmt.Errorf("conflict: import waits: intent %s is in the queue of txn %s but does not wait on it", id, q.Txn)
			}
			if seen[id] {
				return nil, fmt.Errorf("conflict: import waits: intent %s is in the queue of txn %s twice", id, q.Txn)
			}
			seen[id] = true
		}
		w.queues[q.Txn] = slices.Clone(q.IDs)
		entries += len(q.IDs)
	}
	// Every queue entry is a distinct (intent, txn) wait, so there are as
	// many as waits exactly when no wait is missing from its queue.
	waits := 0
	for _, p := range w.parked {
		waits += len(p.holders)
	}
	if entries != waits {
		for _, p := range s.Parked {
			for _, h := range p.Holders {
				if !slices.Contains(w.queues[h.Txn], p.ID) {
					return nil, fmt.Errorf("conflict: import waits: intent %s waits on txn %s but is not in its queue", p.ID, h.Txn)
				}
			}
		}
	}
	return w, nil
}
