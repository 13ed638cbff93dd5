package coordinator

import (
	"container/heap"
	"strings"
	"sync"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go/micro"
)

// replies holds the API submits whose decisions are durable but not final:
// each waits for a final decision of its intent until its deadline, and
// then is answered with the latest interim one. A later submit of the same
// intent (a resend after a lost reply, or an agent asking again for the
// final decision) waits beside the first. It is safe for concurrent use:
// the output stage adds and wakes, its own goroutine answers at deadlines.
type replies struct {
	now func() time.Time

	mu struct {
		sync.Mutex
		byID   map[string][]*submit
		due    dueHeap
		closed bool
	}
	kick chan struct{}
	done chan struct{}
}

func newReplies(now func() time.Time) *replies {
	r := &replies{now: now, kick: make(chan struct{}, 1), done: make(chan struct{})}
	r.mu.byID = map[string][]*submit{}
	return r
}

// add takes the submits of a durable group: each waits for decisions of
// its intent from now on. One whose intent has no usable id is answered at
// once with its own decision, which nothing else can match.
func (r *replies) add(subs []*submit) {
	if len(subs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sub := range subs {
		if sub.id == "" {
			sub.answer(sub.own)
			continue
		}
		// Its own decision is durable with the group: what it is answered
		// with at its deadline unless a later one comes, even if the
		// deadline has passed before the group's decisions are handed out.
		sub.last = sub.own
		r.mu.byID[sub.id] = append(r.mu.byID[sub.id], sub)
		heap.Push(&r.mu.due, sub)
	}
	r.wakeup()
}

// wake hands a durable decision to the submits waiting for its intent: a
// final one answers them, an interim one is what they will be answered
// with at their deadline. It reports whether any was waiting.
func (r *replies) wake(d *intents.Decision) bool {
	if d.Intent == "" {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	subs := r.mu.byID[d.Intent]
	if len(subs) == 0 {
		return false
	}
	if !d.Outcome.Final() {
		for _, sub := range subs {
			sub.last = d
		}
		return true
	}
	for _, sub := range subs {
		sub.answer(d)
	}
	delete(r.mu.byID, d.Intent)
	return true
}

// flush answers, with their latest decision, the submits whose deadline
// has passed: after a group, so that a submit that waits for nothing
// (Coagent-Wait-Ms: 0) is answered with its interim decision at once.
func (r *replies) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dueLocked(r.now())
}

// dueLocked answers every waiting submit due by now and returns when the
// next one is (zero: none).
func (r *replies) dueLocked(now time.Time) time.Time {
	for r.mu.due.Len() > 0 {
		sub := r.mu.due[0]
		if sub.answered {
			heap.Pop(&r.mu.due)
			continue
		}
		if sub.deadline.After(now) {
			return sub.deadline
		}
		heap.Pop(&r.mu.due)
		sub.answer(sub.last)
		r.forgetLocked(sub)
	}
	return time.Time{}
}

// forgetLocked takes an answered submit out of the waiters of its intent.
func (r *replies) forgetLocked(sub *submit) {
	subs := r.mu.byID[sub.id]
	for i, o := range subs {
		if o == sub {
			subs = append(subs[:i:i], subs[i+1:]...)
			break
		}
	}
	if len(subs) == 0 {
		delete(r.mu.byID, sub.id)
	} else {
		r.mu.byID[sub.id] = subs
	}
}

// answer answers the request with d (nil: unavailable), once, and
// returns its token. It is called by one goroutine at a time: the loop or
// the output stage before the submit is handed to replies, replies (under
// its lock) after.
func (sub *submit) answer(d *intents.Decision) {
	if sub.answered {
		return
	}
	sub.answered = true
	// The token goes back before the reply: a client that sends its next
	// submit as soon as it has this answer must find the slot free.
	if sub.release != nil {
		sub.release()
	}
	switch data, err := intents.AppendDecisionJSON(nil, d); {
	case d == nil:
		replyErrorLater(sub.req, codeUnavailable, "%v", errUnavailable)
	case err != nil:
		replyErrorLater(sub.req, codeInternal, "the decision does not encode as JSON: %v", err)
	case sub.lane != "":
		_ = sub.req.Respond(data, micro.WithHeaders(micro.Headers{intents.HeaderTask: {claimedTask(sub.lane, d)}}))
	default:
		_ = sub.req.Respond(data)
	}
}

// nothing answers a claim of its lane's next task that found nothing
// claimable, once, saying why, and returns its token.
func (sub *submit) nothing(why string) {
	if sub.answered {
		return
	}
	sub.answered = true
	if sub.release != nil {
		sub.release()
	}
	replyErrorLater(sub.req, intents.CodeNothingClaimable, "%s", why)
}

// claimedTask is the task of lane a claim's decision d is about: the one
// whose owner its versions name (a resend's recorded decision says it as
// the first did); "" when none does.
func claimedTask(lane string, d *intents.Decision) string {
	for p := range d.Versions {
		if task, ok := strings.CutSuffix(p, ".owner"); ok && strings.HasPrefix(task, lane+".") && !strings.Contains(task[len(lane)+1:], ".") {
			return task
		}
	}
	return ""
}

func (r *replies) wakeup() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run answers the submits whose deadline passes, until close.
func (r *replies) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		next, closed := r.dueLocked(r.now()), r.mu.closed
		r.mu.Unlock()
		if closed {
			close(r.done)
			return
		}
		d := time.Hour
		if !next.IsZero() {
			d = max(time.Until(next), time.Millisecond)
		}
		timer.Reset(d)
		select {
		case <-r.kick:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// close answers every submit still waiting with its latest decision, and
// stops run.
func (r *replies) close() {
	r.mu.Lock()
	for r.mu.due.Len() > 0 {
		sub := heap.Pop(&r.mu.due).(*submit)
		sub.answer(sub.last)
	}
	r.mu.byID = map[string][]*submit{}
	r.mu.closed = true
	r.mu.Unlock()
	r.wakeup()
	<-r.done
}

// dueHeap orders waiting submits by deadline.
type dueHeap []*submit

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*submit)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
