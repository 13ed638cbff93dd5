package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// input is one thing for the loop to decide: a message of the intents
// stream, or an API submit.
type input struct {
	msg jetstream.Msg
	sub *submit
	// at is when it reached the service (the wall clock, for the
	// decision latency).
	at time.Time
}

// submit is an API submit on its way: decided in the batch it joins,
// answered by the output stage once the batch is durable, and, if its
// decision is interim, when a final one comes or its wait ends.
type submit struct {
	req   micro.Request
	agent string // the subject's agent token; "" for the anonymous submit
	// lane, when set (intents.HeaderClaimNext), makes the submit a claim
	// of the lane's next claimable task.
	lane string
	// txn is the transaction a commit, abort or renew names, read only
	// where shards route (Service.forward): one this shard does not know
	// is sent round the shards.
	txn string
	// deadline is when the request stops waiting for a final decision and
	// takes the latest interim one.
	deadline time.Time
	// Set by the loop: the submitted intent's id ("" when it has none
	// that is usable) and its decision.
	id  string
	own *intents.Decision
	// Set by replies: the latest decision for id, and whether the request
	// has been answered.
	last     *intents.Decision
	answered bool
	// release returns the submit's token once it is answered.
	release func()
}

// The loop hands each batch it decided to the log at once while fewer than
// maxInflight groups are on their way to the disk; past that, what arrives
// is decided into one group that waits for the first to be durable, so
// groups grow with the load and the log's sync time.
//
// On a local log the bound is high: a group held in the loop is
// committed only once a group is durable, which is when the log starts its
// next fsync, so the group misses that fsync and waits for the one after;
// committed at once, it joins the next fsync with whatever else is queued
// behind the one under way (the log's committer writes the queue as one
// batch). The bound stays below the output stage's queue, so that
// when the disk stalls the loop gathers one group, as before, and goes on
// serving reads and timers instead of blocking on the queue. Alternated
// six times with a bound of two, `coagent bench --agents 16,64 --duration
// 3s`: 12.7k–15.7k against 11.9k–13.7k updates/s at 16 agents, where an
// intent waited for a held group; no difference at 64 (21.3k–23.4k
// against 21.2k–22.4k), where the CPU is the bound; the same CPU an
// intent. A replicated log stores each group as one message of the
// replicated stream, whose cost is per message: there the bound stays two
// (unbounded, examples/cluster/bench.sh ran 11–13% slower, alternated
// twice).
const (
	maxInflightLocal      = outputQueue / 2
	maxInflightReplicated = 2
	// outputQueue is how many committed groups wait for the output stage.
	outputQueue = 64
)

// loop owns the Core: it decides what has arrived in batches, fires
// timers and runs the API calls that need the engine, and commits what it
// decided as one group whenever fewer than s.maxInflight groups are on
// their way to the disk, until its context ends; then it decides what is
// left in the intake, commits it and stops.
func (s *Service) loop(ctx context.Context) {
	defer func() {
		close(s.groups)
		close(s.looped)
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	batch := make([]input, 0, s.opts.MaxBatch)
	s.acc = &output{}
	for {
		if len(s.woken) > 0 {
			// Claims of a lane's next task that a change to the lane woke.
			woken := s.woken
			s.woken = nil
			s.decide(woken)
			s.flushIfReady()
			continue
		}
		s.arm(timer)
		select {
		case <-ctx.Done():
			s.dropLaneWaiters()
			if s.broken.Load() {
				s.unavailable(s.acc)
				s.refuseIntake()
				return // what was fetched comes again to the next process
			}
			// Whatever arrived is decided before stopping: the consumer
			// was drained and the API stopped first, so nothing more comes.
			for {
				select {
				case in := <-s.intake:
					s.decide(s.fill(append(batch[:0], in)))
					continue
				default:
				}
				break
			}
			s.flush()
			return
		case in := <-s.intake:
			s.decide(s.fill(append(batch[:0], in)))
			s.flushIfReady()
		case <-s.durableKick:
			s.flushIfReady()
		case call := <-s.calls:
			call()
		case <-timer.C:
			s.core.Tick(s.opts.Now())
			s.expireLaneWaiters(s.opts.Now())
			s.flushIfReady()
		}
	}
}

// fill adds whatever else has already arrived, up to MaxBatch.
func (s *Service) fill(batch []input) []input {
	for len(batch) < s.opts.MaxBatch {
		select {
		case in := <-s.intake:
			batch = append(batch, in)
		default:
			return batch
		}
	}
	return batch
}

// flushIfReady commits the group gathered so far if fewer than
// s.maxInflight groups are on their way to the disk, or if it has grown to
// MaxBatch.
func (s *Service) flushIfReady() {
	inflight := s.committed - s.durable.Load()
	if inflight < s.maxInflight || s.acc.intents >= s.opts.MaxBatch {
		s.flush()
	}
}

func (s *Service) arm(t *time.Timer) {
	d := time.Hour
	if at, ok := s.core.NextDeadline(); ok {
		d = max(at.Sub(s.opts.Now()), 0)
	}
	for _, ws := range s.lanes {
		for _, w := range ws {
			d = min(d, max(w.deadline.Sub(s.opts.Now()), 0))
		}
	}
	t.Reset(d)
}

// decide decides a batch in arrival order into the group being gathered:
// its stream messages to be acknowledged once their decisions are stored,
// its submits to be answered once it is durable.
func (s *Service) decide(batch []input) {
	now := s.opts.Now()
	api := 0
	for _, in := range batch {
		o := s.acc
		o.intents++
		if in.msg != nil {
			// A subject with more than one token after intents names no
			// agent: the engine records the intent as invalid and answers
			// no one. An empty agent would mean "identity already
			// checked", so a subject with no token at all (NATS allows
			// none) is passed on as "?".
			agent, ok := s.subj.IntentAgent(in.msg.Subject())
			if !ok && agent == "" {
				agent = "?"
			}
			s.core.Decide(now, engine.Input{Agent: agent, Raw: in.msg.Data(), Traceparent: traceparent(in.msg.Headers())}, ViaStream)
			o.msgs = append(o.msgs, in.msg)
			o.arrivals = append(o.arrivals, arrival{at: in.at, via: ViaStream, decided: time.Now()})
			o.bytes += len(in.msg.Data())
		} else {
			input := engine.Input{Agent: in.sub.agent, Raw: in.sub.req.Data(),
				Traceparent: traceparent(nats.Header(in.sub.req.Headers()))}
			if in.sub.lane != "" && !s.claimNext(&input, in, now) {
				o.intents--
				continue
			}
			if in.sub.txn != "" && in.sub.lane == "" && s.forwardTxn(in.sub) {
				// Another shard's transaction: its owner answers.
				in.sub.release()
				o.intents--
				continue
			}
			d := s.core.Decide(now, input, ViaAPI)
			in.sub.id, in.sub.own = d.ID, d.Own
			o.submits = append(o.submits, in.sub)
			o.arrivals = append(o.arrivals, arrival{at: in.at, via: ViaAPI, decided: time.Now()})
			o.bytes += len(in.sub.req.Data())
			api++
		}
		if o.bytes >= maxGroupBytes {
			s.flush()
		}
	}
	s.metrics.receivedBatch(api, len(batch)-api)
	s.core.Tick(now)
}

// claimNext makes input, an apply sent to claim the next task of sub's
// lane, the claim of the lane's next claimable task, chosen now, on the
// loop, so that two agents asking at once get two tasks. It reports false
// when it answered sub itself: the lane has nothing claimable, and
// nothing is decided. An intent already decided is left as it is: the
// engine answers it from its record. One that is not JSON is too: the
// engine refuses it, saying why.
func (s *Service) claimNext(input *engine.Input, arrival input, now time.Time) bool {
	sub := arrival.sub
	var in intents.Intent
	if json.Unmarshal(input.Raw, &in) != nil {
		return true
	}
	if _, done := s.core.Engine().Decision(in.ID); done {
		return true
	}
	task, ok := s.core.Engine().NextTask(sub.lane)
	if !ok && in.OnConflict == intents.OnConflictWait {
		// It waits, as an intent waits on a transaction: until a change
		// to its lane may have made a task claimable, or its wait_ms (the
		// engine's default wait) or its request's wait ends.
		wait := time.Duration(max(in.Wait(), 0)) * time.Millisecond
		if mw := s.opts.Core.Engine.MaxWait; mw > 0 {
			wait = min(wait, mw)
		}
		deadline := now.Add(wait)
		if !sub.deadline.IsZero() && sub.deadline.Before(deadline) {
			deadline = sub.deadline
		}
		if s.lanes == nil {
			s.lanes = map[string][]laneWaiter{}
		}
		s.lanes[sub.lane] = append(s.lanes[sub.lane], laneWaiter{in: arrival, deadline: deadline})
		return false
	}
	if !ok {
		sub.nothing(s.whyNothing(sub.lane))
		return false
	}
	if in.Agent == "" {
		in.Agent = sub.agent
	}
	input.Raw, input.Intent = nil, engine.ClaimNext(&in, task)
	return true
}

// whyNothing says why lane has no task to claim.
func (s *Service) whyNothing(lane string) string {
	if held, wip, full := s.core.Engine().LaneFull(lane); full {
		return fmt.Sprintf("lane %s: %d of its tasks claimed, its rule's wip limit of %d; a claim may wait for a slot (on_conflict wait)", lane, held, wip)
	}
	return fmt.Sprintf("lane %s: no task is claimable (none without an owner in the pool status, with no effect pending)", lane)
}

// laneWaiter is a claim of a lane's next task waiting for one.
type laneWaiter struct {
	in       input
	deadline time.Time
}

// wakeLanes wakes the claims waiting on the lanes g's changes wrote in
// (a task added, released or reclaimed), in the order they came, to be
// decided again at the top of the loop.
func (s *Service) wakeLanes(g *Group) {
	if len(s.lanes) == 0 {
		return
	}
	for _, ev := range g.Changes {
		for _, w := range ev.Change.Writes {
			for lane, ws := range s.lanes {
				if intents.Overlaps(w.Path, lane) {
					for _, lw := range ws {
						s.woken = append(s.woken, lw.in)
					}
					delete(s.lanes, lane)
				}
			}
		}
	}
}

// expireLaneWaiters answers the claims whose wait for a task ended by now
// that nothing is claimable.
func (s *Service) expireLaneWaiters(now time.Time) {
	for lane, ws := range s.lanes {
		kept := ws[:0]
		for _, w := range ws {
			if now.Before(w.deadline) {
				kept = append(kept, w)
				continue
			}
			w.in.sub.nothing(s.whyNothing(lane))
		}
		if len(kept) == 0 {
			delete(s.lanes, lane)
		} else {
			s.lanes[lane] = kept
		}
	}
}

// dropLaneWaiters answers every waiting claim unavailable: the service is
// stopping, and the agent sends it again to whichever coordinator runs.
func (s *Service) dropLaneWaiters() {
	for _, ws := range s.lanes {
		for _, w := range ws {
			w.in.sub.answer(nil)
		}
	}
	s.lanes = nil
}

// maxGroupBytes bounds the intents' bytes in one group: past it the group
// is committed at once, whatever is in flight. A cluster's group is one
// message of the replicated log, which the stream and the server take up
// to MaxWireMessage; an intent's events take about twice its bytes (the
// intent, its change), and an intent is at most intents.MaxIntentSize, so
// a group stays under a third of that.
const maxGroupBytes = 1 << 20

// flush commits what was decided since the last commit as one group and
// hands it, with what came in for it, to the output stage. A failure to
// log is fatal for the service: nothing is acknowledged, JetStream
// delivers again, a submit is answered unavailable, and a restarted
// coordinator decides from what the log holds.
func (s *Service) flush() {
	o := s.acc
	s.acc = &output{}
	if s.broken.Load() {
		s.unavailable(o)
		return
	}
	g, err := s.core.Commit()
	if err != nil {
		s.log.Error("event log write failed; stopping", "err", err)
		s.fail(err)
		s.unavailable(o)
		return
	}
	if g == nil {
		o.close()
		return
	}
	for _, r := range g.Decisions {
		s.hot.Observe(r.At, r.Decision)
	}
	s.fly(g)
	s.wakeLanes(g)
	o.g = g
	o.committed = time.Now() // the wall clock, not Options.Now: this measures the disk
	s.committed++
	s.groups <- o
}

// flushWith commits what was decided so far, now, with done to be closed
// once it is durable and published: for the API calls that wait for their
// change (a resolution, a rules file).
func (s *Service) flushWith(done chan struct{}) {
	s.acc.done = append(s.acc.done, done)
	s.flush()
}

// refuseIntake answers unavailable every submit left in the intake of a
// service that stopped for good.
func (s *Service) refuseIntake() {
	for {
		select {
		case in := <-s.intake:
			if in.sub != nil {
				in.sub.answer(nil)
			}
		default:
			return
		}
	}
}

// unavailable answers o's submits unavailable and releases its waiters.
func (s *Service) unavailable(o *output) {
	for _, sub := range o.submits {
		sub.answer(nil)
	}
	o.close()
}

// traceparent returns the values of a message's traceparent header
// (intents.HeaderTraceparent), nil when it has none. NATS headers keep
// their case, and W3C's is named in HTTP's, where case does not count, so
// any spelling is taken: a gateway or a client library may have
// capitalized it.
func traceparent(h nats.Header) []string {
	if v, ok := h[intents.HeaderTraceparent]; ok {
		return v
	}
	var out []string
	for k, v := range h {
		if strings.EqualFold(k, intents.HeaderTraceparent) {
			out = append(out, v...)
		}
	}
	slices.Sort(out) // the map's order is not the message's
	return out
}
