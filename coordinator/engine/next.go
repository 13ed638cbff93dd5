package engine

import (
	"cmp"
	"encoding/json"
	"slices"

	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
)

// NextTask returns the task of lane (a path whose members are task records
// under a task rule with a lease) that a claim of the lane's next task
// gets: of the claimable ones — no owner, no effect pending, and the
// rule's pool status (its reclaim_to; no status, for a rule without one)
// — the one with the highest numeric priority field, and among equals the
// one changed least recently (the lowest mod_rev), then by name. ok is
// false when none is claimable, or the lane's claims are at its rule's
// wip limit (LaneFull). The caller decides the claim in the same
// turn of the loop, so two agents asking at once get two tasks.
func (e *Engine) NextTask(lane string) (task string, ok bool) {
	type candidate struct {
		path     string
		priority float64
		modRev   uint64
	}
	var best *candidate
	for _, name := range e.tree.Members(lane) {
		p := lane + "." + name
		leases := e.rules.Leases([]string{p}, e.tree, e.tree)
		if len(leases) == 0 || leases[0].Path != p || e.claims[p] != nil {
			continue
		}
		if w := leases[0].WIP; w > 0 && e.claimAbove[lane] >= w {
			continue // no slot for it: see LaneFull
		}
		v, _ := e.tree.Get(p)
		rec, _ := v.(map[string]any)
		if rec == nil || ownerOf(e.tree, p) != "" || len(rules.PendingEffects(v)) > 0 {
			continue
		}
		if status, _ := rec["status"].(string); status != leases[0].ReclaimTo {
			continue
		}
		c := candidate{path: p, modRev: e.tree.Lookup(p).ModRev}
		c.priority, _ = rec["priority"].(float64)
		if best == nil || cmp.Or(cmp.Compare(best.priority, c.priority), cmp.Compare(c.modRev, best.modRev), cmp.Compare(c.path, best.path)) < 0 {
			best = &c
		}
	}
	if best == nil {
		return "", false
	}
	return best.path, true
}

// LaneFull reports whether lane's claimed tasks are at a wip limit of the
// rules over its tasks: held of wip. A claim of its next task waits for a
// slot, or is told there is none.
func (e *Engine) LaneFull(lane string) (held, wip int, full bool) {
	held = e.claimAbove[lane]
	for _, name := range e.tree.Members(lane) {
		p := lane + "." + name
		if ls := e.rules.Leases([]string{p}, e.tree, e.tree); len(ls) > 0 && ls[0].Path == p && ls[0].WIP > 0 && held >= ls[0].WIP {
			return held, ls[0].WIP, true
		}
	}
	return held, 0, false
}

// ClaimNext returns in, an apply sent to claim a lane's next task, as
// the claim of task: its writes taken as relative to the task, and one
// more that sets the task's owner to in's agent. The log records it so,
// and a replay decides it as any claim.
func ClaimNext(in *intents.Intent, task string) *intents.Intent {
	cp := *in
	cp.Writes = make([]intents.Write, 0, len(in.Writes)+1)
	if !slices.ContainsFunc(in.Writes, func(w intents.Write) bool { return w.Path == "owner" }) {
		// A template that names the owner itself (so that it is an apply
		// with writes, valid before it is rewritten) keeps its own.
		owner, _ := json.Marshal(in.Agent)
		cp.Writes = append(cp.Writes, intents.Write{Path: task + ".owner", Op: intents.OpSet, Value: owner})
	}
	for _, w := range in.Writes {
		w.Path = task + "." + w.Path
		cp.Writes = append(cp.Writes, w)
	}
	return &cp
}

// Reconcile is a task left to be reconciled: its claim ended with effects
// pending, so it has no owner and nobody may claim it until each is
// declared.
type Reconcile struct {
	Task    string
	Pending []string
	// ModRev is the task's last change: when it was left so, or last
	// touched since.
	ModRev uint64
}

// Reconciles lists the tasks of the rules' lanes (rules.Set.Lanes) left
// to be reconciled, by path.
func (e *Engine) Reconciles() []Reconcile {
	var out []Reconcile
	for _, lane := range e.rules.Lanes() {
		for _, name := range e.tree.Members(lane) {
			p := lane + "." + name
			v, _ := e.tree.Get(p)
			if ownerOf(e.tree, p) != "" {
				continue
			}
			if pending := rules.PendingEffects(v); len(pending) > 0 {
				st, _ := e.tree.Stat(p)
				out = append(out, Reconcile{Task: p, Pending: pending, ModRev: st.ModRev})
			}
		}
	}
	slices.SortFunc(out, func(a, b Reconcile) int { return cmp.Compare(a.Task, b.Task) })
	return out
}
