package coordinator

import (
	"slices"
	"sync"

	"github.com/coagent/coagent/intents"
)

// A read is telling (SPEC §6: nothing is told before its event is
// durable), but the engine the loop reads is ahead of the disk: it has
// folded the group being gathered and up to maxInflight groups the log has
// not made durable yet. A read that showed one of their effects, and a
// crash that lost it, would have shown a state no serial order explains,
// and revisions the recovered log then gives to other events. So a read is
// answered at once, at the durable revision, when nothing it covers is in
// flight (the usual case, and the cheap one: no wait for the disk), and
// otherwise held until the event that made it differ is durable.

// unsynced is what the loop has decided that may not be durable yet, as a
// read on the loop sees it.
type unsynced struct {
	// flying are the events of the groups committed and not known to be
	// durable, and decided those decided since the last commit, which
	// only the Core holds yet: each with a change or a decision (the
	// others change nothing a read shows).
	flying, decided []*intents.Event
	// seq and rev are the durable sequence number and revision.
	seq, rev uint64
}

// paths returns the sequence number of the last event in flight that
// changed a path overlapping one of paths ("" is the whole tree), 0 if
// none did.
func (u *unsynced) paths(paths []string) uint64 {
	return u.last(func(ev *intents.Event) bool {
		if ev.Change == nil {
			return false
		}
		for _, w := range ev.Change.Writes {
			for _, p := range paths {
				if p == "" || intents.Overlaps(w.Path, p) {
					return true
				}
			}
		}
		return false
	})
}

// intent returns the sequence number of the last decision in flight for
// the intent id, 0 if none.
func (u *unsynced) intent(id string) uint64 {
	return u.last(func(ev *intents.Event) bool { return ev.Decision != nil && ev.Decision.Intent == id })
}

// any returns the sequence number of the last event in flight, 0 if none.
func (u *unsynced) any() uint64 { return u.last(func(*intents.Event) bool { return true }) }

func (u *unsynced) last(match func(*intents.Event) bool) uint64 {
	for _, evs := range [][]*intents.Event{u.decided, u.flying} {
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Seq > u.seq && match(evs[i]) {
				return evs[i].Seq
			}
		}
	}
	return 0
}

// telling reports whether ev is one a read can show.
func telling(ev *intents.Event) bool { return ev.Change != nil || ev.Decision != nil }

// heldReads are the reads waiting for an event they show to be durable,
// and how far the log is durable. The loop holds reads; the output stage
// releases them as groups become durable, or answers them unavailable when
// the log failed.
type heldReads struct {
	mu     sync.Mutex
	seq    uint64 // the last durable event
	rev    uint64 // the last durable change
	failed bool
	held   []heldRead
}

type heldRead struct {
	until  uint64 // the event that must be durable first
	answer func(ok bool)
}

// maxHeldReads bounds the reads held at once; one more is answered
// unavailable (ask again), so that a flood of reads during a slow sync
// holds a bounded amount of memory.
const maxHeldReads = 10000

// durable returns the last durable event and change.
func (h *heldReads) durable() (seq, rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq, h.rev
}

// hold keeps answer until event until is durable. It reports false, and
// keeps nothing, when it is durable already (or the log failed, or too
// many reads are held: then ok is false): the caller answers at once.
func (h *heldReads) hold(until uint64, answer func(ok bool)) (held, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.failed || len(h.held) >= maxHeldReads:
		return false, false
	case until <= h.seq:
		return false, true
	}
	h.held = append(h.held, heldRead{until: until, answer: answer})
	return true, true
}

// release notes that the log is durable up to event seq, its last change
// at rev (0: the group changed nothing), and answers the reads that waited
// for it.
func (h *heldReads) release(seq, rev uint64) {
	h.mu.Lock()
	h.seq = max(h.seq, seq)
	h.rev = max(h.rev, rev)
	var ready []heldRead
	h.held = slices.DeleteFunc(h.held, func(r heldRead) bool {
		if r.until <= h.seq {
			ready = append(ready, r)
			return true
		}
		return false
	})
	h.mu.Unlock()
	for _, r := range ready {
		r.answer(true)
	}
}

// fail answers every held read unavailable, and every read from now on:
// what they waited for may never be durable.
func (h *heldReads) fail() {
	h.mu.Lock()
	h.failed = true
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, r := range held {
		r.answer(false)
	}
}

// inFlight returns what a read on the loop must not show before it is
// durable. Loop-owned.
func (s *Service) inFlight() *unsynced {
	seq, rev := s.reads.durable()
	s.trimFlying(seq)
	return &unsynced{flying: s.flying, decided: s.core.Uncommitted(), seq: seq, rev: rev}
}

// trimFlying forgets the events in flight up to seq, which are durable.
// Loop-owned.
func (s *Service) trimFlying(seq uint64) {
	i := 0
	for i < len(s.flying) && s.flying[i].Seq <= seq {
		i++
	}
	if i > 0 {
		s.flying = append(s.flying[:0], s.flying[i:]...)
	}
}

// fly notes the telling events of a group just committed. Loop-owned.
func (s *Service) fly(g *Group) {
	seq, _ := s.reads.durable()
	s.trimFlying(seq)
	for _, ev := range g.Batch.Events {
		if telling(ev) {
			s.flying = append(s.flying, ev)
		}
	}
}
