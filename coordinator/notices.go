package coordinator

import (
	"fmt"
	"strings"

	"github.com/coagent/coagent/coordinator/notify"
	"github.com/coagent/coagent/intents"
)

// Notifier is what Options.Notify is told through: notify.Webhook, or a
// test's.
type Notifier interface {
	// Post queues n and returns at once; false when it was dropped.
	Post(n notify.Notice) bool
	// Stats counts what became of the notices, for the metrics.
	Stats() notify.Stats
}

// notifyGroup tells Options.Notify what in g, a durable group, needs a
// person. Cases are shown as the arbiters see them, and a dead task's
// error only where anyone may read it: a webhook is read outside the
// board's rules.
func (s *Service) notifyGroup(g *Group) {
	n := s.opts.Notify
	if n == nil {
		return
	}
	for _, cs := range g.Cases {
		if len(cs.Votes) > 0 {
			continue // offered again to a panel: told when it opened
		}
		what := "waits for an arbiter"
		if a := cs.Approval; a != nil {
			what = fmt.Sprintf("waits for %d approval(s) of %s (coagent case approve %s)", a.Quorum, strings.Join(a.By, ", "), cs.ID)
		}
		n.Post(notify.Notice{ID: "case:" + cs.ID, Kind: notify.KindCase, Time: s.opts.Now(), Subject: cs.ID,
			Summary: caseSummary(what+" until "+cs.Deadline.Format("15:04:05Z07:00"), cs), Detail: s.arbiters().escalation(cs)})
	}
	for _, cs := range g.Dead {
		n.Post(notify.Notice{ID: "dead:" + cs.ID, Kind: notify.KindDeadLetter, Time: s.opts.Now(), Subject: cs.ID,
			Summary: caseSummary("passed its deadline unresolved: a dead letter (coagent dlq)", cs), Detail: s.arbiters().escalation(cs)})
	}
	for _, d := range g.DeadTasks {
		if len(d.Error) > 0 {
			// What the board rules keep from anyone stays in the dead
			// letter, which only the coordinator's user reads.
			if _, hidden := s.anyone().value(d.Task+".error", nil); len(hidden) > 0 {
				cp := *d
				cp.Error = nil
				d = &cp
			}
		}
		n.Post(notify.Notice{ID: fmt.Sprintf("task:%s@%d", d.Task, d.Rev), Kind: notify.KindDeadTask, Time: d.Time, Subject: d.Task,
			Summary: fmt.Sprintf("task %s was tried %d times, past its max_retries of %d: a dead letter (coagent dlq retry %s)", d.Task, d.Tries, d.MaxRetries, d.Task),
			Detail:  d})
	}
	for _, r := range g.Reclaimed {
		kind, summary := notify.KindReclaim, fmt.Sprintf("task %s came back: the lease of %s's claim ended", r.Task, r.Owner)
		if len(r.Reconcile) > 0 {
			kind = notify.KindReconcile
			summary = fmt.Sprintf("task %s waits to be reconciled: the lease of %s's claim ended with effects pending (%s)", r.Task, r.Owner, strings.Join(r.Reconcile, ", "))
		}
		n.Post(notify.Notice{ID: string(kind) + ":" + r.Lease, Kind: kind, Time: s.opts.Now(), Subject: r.Task, Summary: summary, Detail: r})
	}
	for _, ev := range g.Notices {
		if ev.Notice == nil || ev.Notice.Kind != intents.NoticeRevoked {
			continue
		}
		n.Post(notify.Notice{ID: "override:" + ev.Intent + ":" + ev.Notice.Txn, Kind: notify.KindOverride, Time: ev.Time, Subject: ev.Notice.Txn,
			Summary: ev.Notice.Detail, Detail: ev})
	}
}

// caseSummary says in one line what a case is about and what became of
// it.
func caseSummary(what string, cs *intents.Escalation) string {
	agent, kind := "?", "intent"
	if in := cs.Escalated(); in != nil {
		agent, kind = in.Agent, string(in.Kind)
	}
	var on []string
	for _, c := range cs.Conflicts {
		if c.WithAgent == "" {
			on = append(on, fmt.Sprintf("%s %s", c.Kind, c.Path))
			continue
		}
		on = append(on, fmt.Sprintf("%s %s with %s", c.Kind, c.Path, c.WithAgent))
	}
	return fmt.Sprintf("case %s: %s's %s (%s) %s", cs.ID, agent, kind, strings.Join(on, "; "), what)
}
