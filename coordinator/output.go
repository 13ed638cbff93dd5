package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/bugs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// output is one durable group on its way from the loop to the output
// stage, with what came in for it.
type output struct {
	g *Group
	// msgs are the stream messages decided in it: acknowledged, all at
	// once, when the decisions it stores are.
	msgs []jetstream.Msg
	// submits are the API submits decided in it: answered once it is
	// durable.
	submits []*submit
	// intents counts the inputs decided into it, bytes their bytes.
	intents int
	bytes   int
	// done are closed once it is durable and published (or it failed).
	done []chan struct{}
	// committed is when the loop committed it, to tell a slow group;
	// durableAfter how long after that it was durable.
	committed    time.Time
	durableAfter time.Duration
	// arrivals are when its inputs reached the service, for the decision
	// latency.
	arrivals []arrival
}

// slowGroups logs groups whose commit took longer than Options.SlowGroup
// to be durable, at most one line a second; output-owned.
type slowGroups struct {
	last   time.Time // when the last line was logged
	missed int       // slow groups since then, not logged
}

// note logs o if it was slow, unless a line was logged within the second.
func (s *Service) noteSlow(sg *slowGroups, o *output) {
	took := o.durableAfter
	if o.committed.IsZero() || took < s.opts.SlowGroup {
		return
	}
	if now := time.Now(); now.Sub(sg.last) >= time.Second {
		s.log.Info("slow group: its commit took long to be durable", "took", took.Round(time.Microsecond),
			"events", len(o.g.Batch.Events), "intents", o.intents, "threshold", s.opts.SlowGroup,
			"slow_unlogged_since_last", sg.missed)
		sg.last, sg.missed = now, 0
		return
	}
	sg.missed++
}

// close closes o's done channels.
func (o *output) close() {
	for _, d := range o.done {
		close(d)
	}
	o.done = nil
}

// output waits for each group to be durable, in order, and then does what
// it says: answers its submits (a request waits on nothing but the log),
// publishes its events live, its changes on the feed, its stored
// decisions, its cases and dead letters, and hands its stream messages to
// the acknowledger. Nothing is told to anyone before it is in the log. The
// loop decides the next batch meanwhile, and the log syncs whatever has
// been enqueued since its last sync in one write.
func (s *Service) output() {
	acked := make(chan struct{})
	go s.acknowledge(acked)
	defer func() {
		close(s.acks)
		close(s.cases.ops)
		close(s.feeder.in)
		<-acked
		<-s.cases.done
		<-s.feeder.done
		s.reads.fail() // none is left unless the log failed
		close(s.stopped)
	}()
	var slow slowGroups
	for o := range s.groups {
		if !s.broken.Load() && !s.planted().EarlyReplies {
			if err := o.g.Wait(context.Background()); err != nil {
				s.log.Error("event log sync failed; stopping", "err", err)
				s.fail(err)
			}
			o.durableAfter = time.Since(o.committed)
			s.noteSlow(&slow, o)
		}
		if s.broken.Load() {
			s.reads.fail()
		} else {
			s.reads.release(o.g.Last(), lastChange(o.g))
		}
		// The loop may commit the next group now.
		s.durable.Add(1)
		select {
		case s.durableKick <- struct{}{}:
		default:
		}
		if s.broken.Load() {
			s.unavailable(o) // never answer, publish or acknowledge what is not durable
			continue
		}
		g := o.g
		if g.RulesChanged {
			s.rules.Store(g.Rules)
		}
		// Counted before anyone is told, so that whoever has a decision
		// finds it counted.
		s.metrics.group(o, time.Now())
		if s.leased != nil && !s.leased() {
			s.untold(o)
			continue
		}
		s.replies.add(o.submits)
		var stored []storedDecision
		for _, r := range g.Decisions {
			taken := s.replies.wake(r.Decision)
			// A decision of an API submit is its reply; stored, besides,
			// when no request waits for it any more, so that its agent
			// finds it later.
			if r.Store() || !taken && r.Decision.Outcome.Final() {
				stored = append(stored, s.storeDecision(r.Decision))
			}
		}
		s.replies.flush()
		s.publishLive(g)
		s.xbegun(g)
		s.feeder.add(g.Changes)
		s.publishCases(g)
		s.notifyGroup(g)
		for _, r := range g.Reclaimed {
			if len(r.Reconcile) > 0 {
				s.log.Warn("task left to reconcile: its owner's lease ended with effects pending", "task", r.Task, "owner", r.Owner,
					"lease", r.Lease, "fence", r.Fence, "pending", r.Reconcile)
				continue
			}
			s.log.Info("task reclaimed: its owner's lease ended", "task", r.Task, "owner", r.Owner, "lease", r.Lease, "fence", r.Fence)
		}
		o.close()
		if len(o.msgs) > 0 || len(stored) > 0 {
			s.acks <- pendingAck{stored: stored, msgs: o.msgs}
		}
	}
}

// untold finishes a group that became durable after this member's lease
// lapsed, telling no one its decisions. Another member may have taken the
// key and read the replicated log's end before the group landed, and be
// answering reads without it: a client told of a write there would then
// read past it. The group is in the log, so its decisions are not lost: a
// submit is answered unavailable and sent again gets its recorded
// decision, and a stream intent, not acknowledged, comes again and gets it
// too, from whichever member then leads. Its changes and cases are
// published: watchers and arbiters learn of them once, as of any group.
func (s *Service) untold(o *output) {
	for _, sub := range o.submits {
		sub.answer(nil)
	}
	s.feeder.add(o.g.Changes)
	s.publishCases(o.g)
	s.notifyGroup(o.g)
	o.close()
}

// publishCases sends g's new cases to the arbiters' queue and its dead
// ones to the dead-letter stream, and notes those it settled.
func (s *Service) publishCases(g *Group) {
	for _, cs := range g.Cases {
		if cs.Approval != nil {
			continue // for its approvers (notices, case.vote), not the arbiters
		}
		s.cases.published(cs.ID, s.publishCase(s.subj.Escalations(), cs))
	}
	for _, cs := range g.Dead {
		s.publishCase(s.subj.DeadLetters(), cs)
	}
	for _, id := range g.Settled {
		s.cases.settled(id)
	}
	for _, d := range g.DeadTasks {
		s.publishDeadTask(d)
	}
}

// publishDeadTask sends d to the dead-letter stream, named by the header
// HeaderDeadTask; its message id is the task and the change that buried
// it, so a letter sent again within the duplicate window is kept once.
func (s *Service) publishDeadTask(d *intents.DeadTask) {
	s.log.Warn("task is a dead letter: tried past its rule's max_retries", "task", d.Task, "tries", d.Tries,
		"max_retries", d.MaxRetries, "owner", d.Owner, "why", d.Why, "status", d.Status)
	data, err := json.Marshal(d)
	if err != nil {
		s.log.Error("encode dead task", "task", d.Task, "err", err)
		return
	}
	m := nats.NewMsg(s.subj.DeadLetters())
	m.Header.Set(intents.HeaderDeadTask, d.Task)
	m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("task:%s@%d", d.Task, d.Rev))
	m.Data = data
	s.publishAsync(m)
}

// planted is the bugs Options.Bugs plants: none unless set.
func (s *Service) planted() bugs.Set {
	if s.opts.Bugs == nil {
		return bugs.Set{}
	}
	return *s.opts.Bugs
}

// lastChange is the revision g leaves: its last change, or a board event
// (Group.Rev) that changed the state since.
func lastChange(g *Group) uint64 {
	rev := g.Rev
	if n := len(g.Changes); n > 0 {
		rev = max(rev, g.Changes[n-1].Seq)
	}
	return rev
}

// publishLive sends g's live events on coagent.events.<type> (core NATS:
// their history is log.query), and each notice to its agent. An event
// type nobody listens to (Options.Interest) is not encoded nor sent: the
// server would only drop it.
func (s *Service) publishLive(g *Group) {
	// The types asked about, once a group: a group holds a few types, so a
	// scan of these costs less than a map made for each group.
	type asked struct {
		typ      intents.EventType
		listened bool
	}
	var seen [8]asked
	known := seen[:0]
	listened := func(t intents.EventType) bool {
		for _, a := range known {
			if a.typ == t {
				return a.listened
			}
		}
		l := s.opts.Interest(s.subj.Events(t))
		if len(known) < cap(known) {
			known = append(known, asked{t, l})
		}
		return l
	}
	for _, ev := range g.Live {
		if s.opts.Interest != nil && !listened(ev.Type) {
			continue
		}
		s.publishEvent(s.subj.Events(ev.Type), ev)
	}
	for _, ev := range g.Notices {
		if intents.ValidSegment(ev.Agent) {
			s.publishEvent(s.subj.Notices(ev.Agent), ev)
		}
	}
}

// publishEvent sends ev on subject, on core NATS.
func (s *Service) publishEvent(subject string, ev *intents.Event) {
	data, err := intents.AppendEventJSON(nil, ev)
	if err != nil {
		s.log.Error("encode event", "seq", ev.Seq, "err", err)
		return
	}
	if err := s.pub.Publish(subject, data); err != nil {
		s.log.Warn("publish event", "subject", subject, "seq", ev.Seq, "err", err)
	}
}

// storedDecision is a decision sent to the decisions stream and
// JetStream's answer to come.
type storedDecision struct {
	d   *intents.Decision
	ack jetstream.PubAckFuture
}

// storeDecision sends d to its agent's subject of the decisions stream,
// with its intent in the header Coagent-Intent.
func (s *Service) storeDecision(d *intents.Decision) storedDecision {
	sd := storedDecision{d: d}
	if d.Agent == "" || !intents.ValidSegment(d.Agent) {
		return sd // answered to no one (SPEC §6: an intent on a subject that names no agent)
	}
	data, err := intents.AppendDecisionJSON(nil, d)
	if err != nil {
		s.log.Error("encode decision", "intent", d.Intent, "err", err)
		return sd
	}
	m := nats.NewMsg(s.subj.Decisions(d.Agent))
	m.Header.Set(intents.HeaderIntent, d.Intent)
	m.Data = data
	sd.ack = s.publishAsync(m)
	return sd
}

// pendingAck is a group's stream messages, to acknowledge once JetStream
// has stored the group's decisions.
type pendingAck struct {
	stored []storedDecision
	msgs   []jetstream.Msg
}

// acknowledge acknowledges the stream messages of each group, in order,
// once the decisions it stored are stored, with one acknowledgement of
// its last message (the consumer acknowledges all up to it, AckAll). A
// decision JetStream did not store is sent again until it is: a group is
// never acknowledged before its decisions are stored, and, since one
// acknowledgement covers every message before it, neither is any later
// one.
func (s *Service) acknowledge(done chan struct{}) {
	defer close(done)
	for a := range s.acks {
		for pause := 100 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
			failed := waitStored(a.stored)
			if len(failed) == 0 {
				break
			}
			if s.broken.Load() {
				break
			}
			s.log.Warn("decisions not stored; sending them again", "decisions", len(failed), "err", failed[0].err)
			time.Sleep(pause)
			a.stored = a.stored[:0]
			for _, f := range failed {
				a.stored = append(a.stored, s.storeDecision(f.d))
			}
		}
		if len(a.msgs) == 0 || s.broken.Load() {
			continue
		}
		if err := a.msgs[len(a.msgs)-1].Ack(); err != nil {
			s.log.Warn("ack failed; the intents will come again and get their recorded decisions", "err", err)
		}
	}
}

// failedStore is a decision JetStream did not store, and why.
type failedStore struct {
	d   *intents.Decision
	err error
}

// waitStored waits for JetStream's answer to each stored decision and
// returns those it did not store.
func waitStored(sds []storedDecision) []failedStore {
	var failed []failedStore
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for _, sd := range sds {
		if sd.ack == nil {
			if sd.d.Agent != "" && intents.ValidSegment(sd.d.Agent) {
				failed = append(failed, failedStore{sd.d, errors.New("not sent")})
			}
			continue
		}
		select {
		case <-sd.ack.Ok():
		case err := <-sd.ack.Err():
			failed = append(failed, failedStore{sd.d, err})
		case <-timeout.C:
			failed = append(failed, failedStore{sd.d, errors.New("no acknowledgement from JetStream in 10s")})
		}
	}
	return failed
}

// publishCase sends an arbiter case to the work queue, or a dead one to the
// dead-letter stream. The escalation id is the message id, so a case sent
// again (after a restart) within the duplicate window is not queued twice.
//
// A case on the arbiters' queue shows them what role:arbiter may read; the
// dead-letter stream, which only the coordinator's own user may read (and
// `coagent dlq retry` sends again from), keeps the case whole. It returns
// the publish's PubAck future, nil if it was not sent.
func (s *Service) publishCase(subject string, cs *intents.Escalation) jetstream.PubAckFuture {
	if subject == s.subj.Escalations() {
		cs = s.arbiters().escalation(cs)
	}
	data, err := json.Marshal(cs)
	if err != nil {
		s.log.Error("encode case", "escalation", cs.ID, "err", err)
		return nil
	}
	m := nats.NewMsg(subject)
	id := cs.ID
	if n := len(cs.Votes); n > 0 && subject == s.subj.Escalations() {
		// Offered again after a panel's vote: a message of its own, which
		// the stream's duplicate window would drop under the case's id.
		id = fmt.Sprintf("%s#%d", cs.ID, n)
	}
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Data = data
	return s.publishAsync(m)
}

func (s *Service) publishAsync(m *nats.Msg) jetstream.PubAckFuture {
	f, err := s.js.PublishMsgAsync(m)
	if err != nil {
		s.log.Warn("publish", "subject", m.Subject, "err", err)
		return nil
	}
	return f
}
