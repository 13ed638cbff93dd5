package engine

import (
	"container/heap"
	"time"
)

type timerKind uint8

const (
	timerLeaseWarn timerKind = iota
	timerLeaseEnd
	timerDeadline // a parked intent's wait or arbiter deadline
	timerClaimWarn
	timerClaimEnd // a task claim's lease (id: the task's path)
)

// timer is a pending deadline. Timers are never removed when what they guard
// changes (a renewal, a decision); they are checked when due and dropped if
// stale, which keeps renewals O(log n). What a timer guards remembers the
// number n of its current timer, so a stale one stays stale even if a
// renewal moves the lease back to its instant: whether a timer fires never
// depends on when the heap was looked at.
type timer struct {
	at   time.Time
	kind timerKind
	id   string // txn or intent id
	n    uint64 // insertion order, so equal times fire deterministically
}

type timers struct {
	h []timer
	n uint64
}

func (t *timers) Len() int { return len(t.h) }
func (t *timers) Less(i, j int) bool {
	return t.h[i].at.Before(t.h[j].at) || t.h[i].at.Equal(t.h[j].at) && t.h[i].n < t.h[j].n
}
func (t *timers) Swap(i, j int) { t.h[i], t.h[j] = t.h[j], t.h[i] }
func (t *timers) Push(x any)    { t.h = append(t.h, x.(timer)) }
func (t *timers) Pop() any {
	x := t.h[len(t.h)-1]
	t.h = t.h[:len(t.h)-1]
	return x
}

// add sets a timer and returns its number.
func (t *timers) add(at time.Time, kind timerKind, id string) uint64 {
	t.n++
	heap.Push(t, timer{at: at, kind: kind, id: id, n: t.n})
	return t.n
}

func (t *timers) peek() timer { return t.h[0] }
func (t *timers) pop() timer  { return heap.Pop(t).(timer) }

// live reports whether a timer still guards something.
func (e *Engine) live(tm timer) bool {
	switch tm.kind {
	case timerLeaseWarn:
		t := e.txns[tm.id]
		return t != nil && !t.warned && tm.n == t.warnN
	case timerLeaseEnd:
		t := e.txns[tm.id]
		return t != nil && tm.n == t.endN
	case timerDeadline:
		p := e.parked[tm.id]
		return p != nil && tm.n == p.deadlineN
	case timerClaimWarn:
		c := e.claims[tm.id]
		return c != nil && !c.warned && tm.n == c.warnN
	case timerClaimEnd:
		c := e.claims[tm.id]
		return c != nil && tm.n == c.endN
	}
	return false
}

// warnAt is when the agent holding t is told its lease is about to end.
func (e *Engine) warnAt(t *txn) time.Time {
	lead := min(e.cfg.LeaseWarning, time.Duration(t.leaseMS)*time.Millisecond/2)
	return t.expires.Add(-lead)
}

// advance fires every live timer due by e.now, in time order.
func (e *Engine) advance() {
	for e.timers.Len() > 0 && !e.timers.peek().at.After(e.now) {
		tm := e.timers.pop()
		if !e.live(tm) {
			continue
		}
		// What a timer ends belongs to the story of the intent that began
		// it: the transaction's propose, the parked intent.
		var prev string
		switch tm.kind {
		case timerDeadline:
			prev = e.traced(e.parked[tm.id].trace)
		case timerClaimWarn, timerClaimEnd:
			prev = e.traced(e.claims[tm.id].trace)
		default:
			prev = e.traced(e.txns[tm.id].trace)
		}
		switch tm.kind {
		case timerLeaseWarn:
			e.leaseWarning(e.txns[tm.id])
		case timerLeaseEnd:
			e.expire(e.txns[tm.id])
		case timerDeadline:
			e.deadline(tm.id, e.parked[tm.id])
		case timerClaimWarn:
			e.claimWarning(e.claims[tm.id])
		case timerClaimEnd:
			e.reclaim(e.claims[tm.id])
		}
		e.trace = prev
	}
}
