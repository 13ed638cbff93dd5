package engine

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
)

// A claim is the lease on a task whose rule has one (rules.Rule.Lease):
// the task's owner holds it from the change that made it the owner until
// it releases the task, hands it over, or lets the lease end — then the
// task is reclaimed. Claims are folded from changes, like everything the
// engine holds, so a replay of the log rebuilds them: the change that sets
// a leased task's owner starts one (its fence the next one issued), the
// change that removes or replaces the owner ends it.
type claim struct {
	path  string // the task record
	owner string
	// id names the lease, for renew: the intent whose change claimed the
	// task.
	id        string
	fence     uint64
	lease     time.Duration
	reclaimTo string
	expires   time.Time
	warned    bool
	trace     string
	// warnN and endN number its current timers (see timer).
	warnN, endN uint64
}

// ClaimInfo is one task claim under a lease, as Claims lists it.
type ClaimInfo struct {
	Task, Agent, Lease string
	Fence              uint64
	Expires            time.Time
}

// Claims lists the task claims under leases, by task path.
func (e *Engine) Claims() []ClaimInfo {
	out := make([]ClaimInfo, 0, len(e.claims))
	for _, c := range e.claims {
		out = append(out, ClaimInfo{Task: c.path, Agent: c.owner, Lease: c.id, Fence: c.fence, Expires: c.expires})
	}
	slices.SortFunc(out, func(a, b ClaimInfo) int { return strings.Compare(a.Task, b.Task) })
	return out
}

// ownerOf is the owner of the task record at path in st, "" for none.
func ownerOf(st interface{ Get(string) (any, bool) }, path string) string {
	v, _ := st.Get(path + ".owner")
	s, _ := v.(string)
	return s
}

// foldClaims ends the claims whose task ev, a change just folded into the
// tree, took from its owner, and starts one for each leased task it gave
// an owner who holds none.
func (e *Engine) foldClaims(ev *intents.Event) {
	if len(e.claims) == 0 && !e.rules.HasLeases() {
		return
	}
	paths := make([]string, len(ev.Change.Writes))
	for i, w := range ev.Change.Writes {
		paths[i] = w.Path
	}
	if len(e.claims) > 0 {
		var hit []string
		for _, w := range paths {
			// The claims of the tasks w is in, or is.
			for p := w; ; {
				if e.claims[p] != nil {
					hit = append(hit, p)
				}
				i := strings.LastIndexByte(p, '.')
				if i < 0 {
					break
				}
				p = p[:i]
			}
			// Those of the tasks under w, which it replaced or removed.
			if e.claimAbove[w] > 0 {
				for p := range e.claims {
					if strings.HasPrefix(p, w+".") {
						hit = append(hit, p)
					}
				}
			}
		}
		slices.Sort(hit)
		for _, p := range slices.Compact(hit) {
			if c := e.claims[p]; ownerOf(e.tree, p) != c.owner {
				cause := intents.CauseReleased
				if ev.Intent == "" && ev.Txn == c.id {
					cause = intents.CauseExpired // reclaimed
				}
				e.endClaim(c, cause)
				e.unclaimed = append(e.unclaimed, c)
			}
		}
	}
	for _, l := range e.rules.Leases(paths, e.tree, e.tree) {
		owner := ownerOf(e.tree, l.Path)
		if owner == "" || e.claims[l.Path] != nil {
			continue
		}
		e.startClaim(l, owner, ev)
	}
}

// startClaim gives owner the lease of l's task, from ev's time.
func (e *Engine) startClaim(l rules.TaskLease, owner string, ev *intents.Event) {
	id := ev.Intent
	if id == "" || e.claimIDs[id] != "" {
		// A change no intent made, or an intent that claimed two tasks
		// (a commit or a resolution may): the lease takes the task's
		// path after the intent's id, to stay unique.
		id = ev.Intent + ":" + l.Path
	}
	e.fence++
	c := &claim{path: l.Path, owner: owner, id: id, fence: e.fence, lease: l.For, reclaimTo: l.ReclaimTo,
		expires: ev.Time.Add(l.For), trace: ev.Trace}
	e.claims[c.path] = c
	e.claimIDs[c.id] = c.path
	e.noteAbove(c.path, 1)
	c.warnN = e.timers.add(e.claimWarnAt(c), timerClaimWarn, c.path)
	c.endN = e.timers.add(c.expires, timerClaimEnd, c.path)
	e.claimed = append(e.claimed, c)
}

// endClaim ends c, for cause.
func (e *Engine) endClaim(c *claim, cause intents.ReleaseCause) {
	delete(e.claims, c.path)
	delete(e.claimIDs, c.id)
	e.noteAbove(c.path, -1)
	e.ended.put(c.id, cause)
}

// noteAbove counts path's claim, by d, on every path above it: a write
// there reaches the task.
func (e *Engine) noteAbove(path string, d int) {
	for i := strings.LastIndexByte(path, '.'); i > 0; i = strings.LastIndexByte(path[:i], '.') {
		p := path[:i]
		if e.claimAbove[p] += d; e.claimAbove[p] <= 0 {
			delete(e.claimAbove, p)
		}
	}
}

// claimWarnAt is when c's owner is told its lease is about to end, as a
// transaction's holder is.
func (e *Engine) claimWarnAt(c *claim) time.Time {
	return c.expires.Add(-min(e.cfg.LeaseWarning, c.lease/2))
}

// checkClaims refuses an apply that would write a leased task against its
// claim, with what after, the state it would leave, shows: the owner must
// carry its claim's fence; a fence no live claim has is fenced (its lease
// ended, or the task was released); an apply claims one task at most.
// Commits are not checked: their transaction's grant fences them.
func (e *Engine) checkClaims(in *intents.Intent, paths []string, after cond.Reader) *rules.Violation {
	if in.Kind != intents.KindApply {
		return nil
	}
	var leases []rules.TaskLease
	if len(e.claims) > 0 || e.rules.HasLeases() {
		leases = e.rules.Leases(paths, e.tree, after)
	}
	if in.Fence != 0 && len(leases) == 0 {
		return &rules.Violation{Reason: intents.ReasonInvalid, Detail: fmt.Sprintf(
			"intent field fence = %d: the apply writes no task with a lease", in.Fence)}
	}
	var claimed string
	// The fence, if any, is a live claim's of the agent's (unless the
	// planted bug claim-fence takes any).
	fenced := in.Fence == 0 || e.cfg.Bugs.ClaimFence
	for _, l := range leases {
		c := e.claims[l.Path]
		if c != nil && c.owner == in.Agent {
			if in.Fence != c.fence && !e.cfg.Bugs.ClaimFence {
				return &rules.Violation{Reason: intents.ReasonFenced, Detail: fmt.Sprintf(
					"%s is claimed by %s under fence %d (lease %s); the intent carries fence %d", l.Path, c.owner, c.fence, c.id, in.Fence)}
			}
			fenced = true
		}
		if now := ownerOf(after, l.Path); now != "" && now != ownerOf(e.tree, l.Path) {
			if v, _ := after.Get(l.Path); ownerOf(e.tree, l.Path) == "" {
				if was, _ := e.tree.Get(l.Path + ".status"); l.DeadTo != "" && was == l.DeadTo {
					return &rules.Violation{Reason: intents.ReasonIllegalTransition, Detail: fmt.Sprintf(
						"%s is a dead letter (status %s): it was tried past its rule's max_retries of %d; an operator retries it (coagent dlq retry) before anyone claims it",
						l.Path, l.DeadTo, l.MaxRetries)}
				}
				if pending := rules.PendingEffects(v); len(pending) > 0 {
					return &rules.Violation{Reason: intents.ReasonIllegalTransition, Detail: fmt.Sprintf(
						"%s has effects whose outcome nobody knows: %s, pending when its last claim ended; declare each confirmed, failed or compensated before claiming it",
						l.Path, strings.Join(pending, ", "))}
				}
			}
			if claimed != "" {
				return &rules.Violation{Reason: intents.ReasonInvalid, Detail: fmt.Sprintf(
					"the apply claims %s and %s: an apply claims one leased task", claimed, l.Path)}
			}
			if lane := laneOf(l.Path); l.WIP > 0 && e.claimAbove[lane] >= l.WIP {
				return &rules.Violation{Reason: intents.ReasonRateLimited, Detail: fmt.Sprintf(
					"lane %s: %d of its tasks claimed, its rule's wip limit of %d; claim its next task with on_conflict wait (coagent task next --wait) to wait for a slot",
					lane, e.claimAbove[lane], l.WIP)}
			}
			claimed = l.Path
		}
	}
	if !fenced {
		return &rules.Violation{Reason: intents.ReasonFenced, Detail: fmt.Sprintf(
			"%s holds no claim of %s under fence %d: the claim ended (its lease ran out, it was released, or an operator took the task)",
			leases[0].Path, in.Agent, in.Fence)}
	}
	return nil
}

// leaseOf tells, on the decision d of in's apply, the lease its change
// just started for in's agent, if it started one.
func (e *Engine) leaseOf(in *intents.Intent, d *intents.Decision) {
	for _, c := range e.claimed {
		if c.owner == in.Agent && e.claims[c.path] == c {
			expires := c.expires
			d.Txn, d.Fence, d.LeaseExpires = c.id, c.fence, &expires
			return
		}
	}
}

// tellClaims tells the agents whose claims the change of in just gave or
// took, when in's agent is not they: one of the task rule's operators
// reassigned or cancelled their task. The new owner learns its claim's
// lease and fence, to carry on the task's writes and renewals.
func (e *Engine) tellClaims(in *intents.Intent) {
	why := ""
	if in.Action != "" {
		why = " (" + in.Action + ")"
	}
	for _, c := range e.unclaimed {
		if c.owner == in.Agent {
			continue
		}
		e.emit(intents.Event{Type: intents.EventNotice, Agent: c.owner, Intent: in.ID, Txn: c.id,
			Notice: &intents.Notice{Kind: intents.NoticeRevoked, Txn: c.id, Intent: in.ID, From: in.Agent,
				Detail: fmt.Sprintf("%s took %s from you%s: your claim (txn %s, fence %d) ended", in.Agent, c.path, why, c.id, c.fence)}})
	}
	for _, c := range e.claimed {
		if c.owner == in.Agent || e.claims[c.path] != c {
			continue
		}
		e.emit(intents.Event{Type: intents.EventNotice, Agent: c.owner, Intent: in.ID, Txn: c.id,
			Notice: &intents.Notice{Kind: intents.NoticeAssigned, Txn: c.id, Intent: in.ID, From: in.Agent, Fence: c.fence,
				Detail: fmt.Sprintf("%s gave you %s%s: its claim is yours (txn %s, fence %d) until %s unless renewed",
					in.Agent, c.path, why, c.id, c.fence, c.expires.Format(time.RFC3339Nano))}})
	}
}

// renewClaim renews the claim in names (its txn), for its owner carrying
// its fence.
func (e *Engine) renewClaim(in *intents.Intent, c *claim) {
	switch {
	case c.owner != in.Agent:
		e.reject(in, intents.ReasonUnauthorized, fmt.Sprintf("the claim %s on %s belongs to agent %s", c.id, c.path, c.owner), nil)
		return
	case in.Fence != c.fence:
		e.reject(in, intents.ReasonFenced, fmt.Sprintf("fence %d is not the fence %d of the claim %s on %s", in.Fence, c.fence, c.id, c.path), nil)
		return
	case in.LeaseMS > rules.MaxTaskLease.Milliseconds():
		e.reject(in, intents.ReasonInvalid, fmt.Sprintf("intent field lease_ms = %d: above the %s limit of a task's lease", in.LeaseMS, rules.MaxTaskLease), nil)
		return
	}
	lease := time.Duration(in.LeaseMS) * time.Millisecond
	if lease == 0 {
		lease = c.lease
	}
	g := &intents.Grant{Txn: c.id, Agent: c.owner, Fence: c.fence, LeaseMS: lease.Milliseconds(), Expires: e.now.Add(lease)}
	e.emit(intents.Event{Type: intents.EventRenew, Agent: in.Agent, Intent: in.ID, Txn: c.id, Grant: g})
	expires := g.Expires
	e.decide(&intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeRenewed,
		Txn: c.id, Fence: c.fence, LeaseExpires: &expires})
}

// foldRenewClaim folds the renewal of the claim at path.
func (e *Engine) foldRenewClaim(path string, g *intents.Grant) {
	c := e.claims[path]
	c.expires, c.lease, c.warned = g.Expires, time.Duration(g.LeaseMS)*time.Millisecond, false
	c.warnN = e.timers.add(e.claimWarnAt(c), timerClaimWarn, c.path)
	c.endN = e.timers.add(c.expires, timerClaimEnd, c.path)
}

// claimWarning tells c's owner its lease is about to end.
func (e *Engine) claimWarning(c *claim) {
	if !c.expires.After(e.now) {
		return // the end is due too
	}
	e.emit(intents.Event{Type: intents.EventNotice, Agent: c.owner, Txn: c.id,
		Notice: &intents.Notice{Kind: intents.NoticeLeaseExpiring, Txn: c.id,
			Detail: fmt.Sprintf("the lease of your claim on %s ends at %s; renew it (txn %s, fence %d) or the task is reclaimed",
				c.path, c.expires.Format(time.RFC3339Nano), c.id, c.fence)}})
}

// reclaim ends c, whose lease ran out: one change, which no intent made,
// removes the task's owner and sets its status to the rule's reclaim state
// (or, past the rule's max_retries, to its dead status); then the old
// owner is told. Its fence is dead from the change on.
func (e *Engine) reclaim(c *claim) {
	writes := []intents.Write{{Path: c.path + ".owner", Op: intents.OpDelete}}
	// An effect still pending may have happened: the task is not put back
	// in the pool but left as it was, ownerless, for someone to reconcile
	// before anyone claims it again. Nor is the try counted: it has not
	// ended yet.
	task, _ := e.tree.Get(c.path)
	pending := rules.PendingEffects(task)
	status := c.reclaimTo
	var dead *intents.DeadTask
	if len(pending) == 0 {
		var tries []intents.Write
		if tries, dead = e.tryEnded(c, task, intents.TryLeaseEnded); dead != nil {
			status = dead.Status
		}
		writes = append(writes, tries...)
	}
	if status != "" && len(pending) == 0 {
		v, _ := json.Marshal(status)
		writes = append(writes, intents.Write{Path: c.path + ".status", Op: intents.OpSet, Value: v})
	}
	plan, err := e.tree.Plan(writes)
	if err != nil {
		// The task is no longer an object the status can be set in: the
		// owner alone goes.
		if plan, err = e.tree.Plan(writes[:1]); err != nil {
			panic(fmt.Sprintf("engine: reclaim %s: %v", c.path, err))
		}
	}
	owner := c.owner
	e.emit(intents.Event{Type: intents.EventChange, Txn: c.id, Change: &intents.Change{Writes: plan}})
	detail := fmt.Sprintf("your claim on %s (txn %s, fence %d) was reclaimed: its lease ended at %s", c.path, c.id, c.fence,
		c.expires.Format(time.RFC3339Nano))
	switch {
	case len(pending) > 0:
		detail += fmt.Sprintf("; its effects %s were pending: it is left to be reconciled before anyone claims it", strings.Join(pending, ", "))
	case dead != nil:
		detail += "; " + e.buried(dead)
	case c.reclaimTo != "":
		detail += "; its status is " + c.reclaimTo + " again"
	}
	e.emit(intents.Event{Type: intents.EventNotice, Agent: owner, Txn: c.id,
		Notice: &intents.Notice{Kind: intents.NoticeReclaimed, Txn: c.id, Detail: detail}})
	e.effects.Reclaimed = append(e.effects.Reclaimed, Reclaimed{Task: c.path, Owner: owner, Lease: c.id, Fence: c.fence, Reconcile: pending})
}

// tryEnded counts the try of c's task (whose record is task) that just
// ended with the task back in the pool, why saying how, when the rule in
// force has max_retries: the write of its tries and, past max_retries, the
// task's dead letter, whose status the caller sets. A rule without
// max_retries counts nothing. The letter's Rev and Time are the change's,
// which buried fills in once it is folded.
func (e *Engine) tryEnded(c *claim, task any, why string) ([]intents.Write, *intents.DeadTask) {
	ls := e.rules.Leases([]string{c.path}, e.tree, e.tree)
	if len(ls) == 0 || ls[0].Path != c.path || ls[0].MaxRetries == 0 {
		return nil, nil
	}
	l := ls[0]
	rec, _ := task.(map[string]any)
	tries := 1
	if n, ok := rec["tries"].(float64); ok && n >= 0 && n < 1e9 {
		tries += int(n)
	}
	v, _ := json.Marshal(tries)
	writes := []intents.Write{{Path: c.path + ".tries", Op: intents.OpSet, Value: v}}
	if tries <= l.MaxRetries {
		return writes, nil
	}
	d := &intents.DeadTask{Task: c.path, Status: l.DeadTo, Pool: l.ReclaimTo, Tries: tries, MaxRetries: l.MaxRetries,
		Owner: c.owner, Lease: c.id, Fence: c.fence, Why: why}
	if errv, ok := rec["error"]; ok {
		d.Error, _ = json.Marshal(errv)
	}
	return writes, d
}

// buried files d, a dead task whose change was just folded, among the
// call's dead letters, and says so for a notice to its last owner.
func (e *Engine) buried(d *intents.DeadTask) string {
	d.Rev, d.Time = e.seq, e.now
	e.effects.DeadTasks = append(e.effects.DeadTasks, d)
	return fmt.Sprintf("it was tried %d times, past its rule's max_retries of %d: its status is %s and it is in the dead letters",
		d.Tries, d.MaxRetries, d.Status)
}

// countReleases counts a try of each task in's change gave back to the
// pool, its owner's own doing (an operator's cancel is not a try): the
// task's owner gone and its status the rule's reclaim_to. Each is one
// change of its own, which no intent made, after in's decision; past the
// rule's max_retries it also sets the task's dead status.
func (e *Engine) countReleases(in *intents.Intent) {
	if len(e.unclaimed) == 0 {
		return
	}
	for _, c := range slices.Clone(e.unclaimed) {
		if c.owner != in.Agent || c.reclaimTo == "" {
			continue
		}
		task, ok := e.tree.Get(c.path)
		rec, _ := task.(map[string]any)
		if !ok || rec == nil || ownerOf(e.tree, c.path) != "" || len(rules.PendingEffects(task)) > 0 {
			continue
		}
		if status, _ := rec["status"].(string); status != c.reclaimTo {
			continue
		}
		writes, dead := e.tryEnded(c, task, intents.TryReleased)
		if writes == nil {
			continue
		}
		if dead != nil {
			v, _ := json.Marshal(dead.Status)
			writes = append(writes, intents.Write{Path: c.path + ".status", Op: intents.OpSet, Value: v})
		}
		plan, err := e.tree.Plan(writes)
		if err != nil {
			continue // the record cannot take the fields: nothing is counted
		}
		e.emit(intents.Event{Type: intents.EventChange, Txn: c.id, Change: &intents.Change{Writes: plan}})
		if dead != nil {
			e.buried(dead)
		}
	}
}

// laneOf is the lane of the task at path: its parent, "" for a task at
// the top.
func laneOf(path string) string {
	if i := strings.LastIndexByte(path, '.'); i > 0 {
		return path[:i]
	}
	return ""
}
