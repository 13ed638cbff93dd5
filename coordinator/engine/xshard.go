package engine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/conflict"
	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/intents"
)

// Cross-shard applies (intents/xshard.go, docs/sharding.md): two-phase
// commit between shards, on events of their own logs.
//
// The shard that receives an apply whose boards are its own and another
// shard's coordinates it. It splits the intent into a part per shard and
// decides its own part as it would decide an apply, up to the change: if
// the part would be refused, so is the intent. Otherwise a begin event
// holds its part's paths and names every part, and the intent is queued.
// Its service asks each other shard to prepare its part (XPrepare): the
// same decision there, and a prepare event that holds the part's paths.
// The coordinator then decides (XDecide). Every part prepared, it applies
// its own part, and its commit event, carrying the decision, is the commit
// point, logged before any participant is told; each participant applies
// its part (XFinish), and only then is the decision logged as the
// intent's and answered (XDone), so that an agent told applied may write
// on at once. A refusal drops its own part and is answered at once; each
// participant drops its part. A read of a path a participant's part
// holds waits for the part to end (XHolds): a third agent must not read
// the apply's effect on one shard and then its part undone on another.
//
// A prepared part holds its paths as a transaction in flight does, in the
// conflict index under the intent's id, but has no lease: only its
// coordinator's decision ends it, so a participant whose coordinator is
// away waits (InDoubt lists what it waits for). Its writes are held as
// sets: nothing merges into a prepared part, so the change its commit
// makes is the one its prepare checked.

// ErrXShard is returned (wrapped) for a cross-shard request the engine
// refuses as malformed or misdirected: nothing is recorded.
var ErrXShard = errors.New("engine: cross-shard request refused")

// xpart is a part of a cross-shard apply prepared here.
type xpart struct {
	conflict.Txn
	coord string
	in    *intents.Intent
	at    time.Time
}

// XPrepared is a part of a cross-shard apply prepared here and not yet
// ended: Coord's decision of Intent ends it.
type XPrepared struct {
	Intent string
	Coord  string
	At     time.Time // when it was prepared
}

// xcoord is a cross-shard apply this shard coordinates: its begin event,
// and once its commit point is logged the decision it will answer.
type xcoord struct {
	begin   *intents.XShard
	at      time.Time
	decided *intents.Decision
}

// XPending is a cross-shard apply this shard coordinates and has not
// answered: undecided, or (Decided set) committed and waiting for every
// other shard to apply its part (XDone).
type XPending struct {
	Intent  string
	Parts   []intents.XPart
	At      time.Time
	Decided *intents.Decision
}

// InDoubt lists the parts prepared here, by intent id.
func (e *Engine) InDoubt() []XPrepared {
	out := make([]XPrepared, 0, len(e.xparts))
	for _, id := range slices.Sorted(maps.Keys(e.xparts)) {
		p := e.xparts[id]
		out = append(out, XPrepared{Intent: id, Coord: p.coord, At: p.at})
	}
	return out
}

// Coordinating lists the cross-shard applies this shard began and has
// not answered, by intent id.
func (e *Engine) Coordinating() []XPending {
	out := make([]XPending, 0, len(e.xcoords))
	for _, id := range slices.Sorted(maps.Keys(e.xcoords)) {
		c := e.xcoords[id]
		out = append(out, XPending{Intent: id, Parts: c.begin.Parts, At: c.at, Decided: c.decided})
	}
	return out
}

// XCounts are how many parts this shard prepared for other shards'
// cross-shard applies and has not ended, and how many cross-shard applies
// it coordinates and has not answered.
func (e *Engine) XCounts() (inDoubt, unanswered int) {
	for _, p := range e.xparts {
		if p.coord != e.Shard() {
			inDoubt++
		}
	}
	return inDoubt, len(e.xcoords)
}

// XOutcome is this shard's decision of a cross-shard apply it coordinates
// and has not answered: the decision its commit point logged, or nil if
// it is undecided. ok is false for one it does not coordinate, or has
// answered (its recorded decision says).
func (e *Engine) XOutcome(id string) (d *intents.Decision, ok bool) {
	c := e.xcoords[id]
	if c == nil {
		return nil, false
	}
	return c.decided, true
}

// XHolds says whether a part prepared here for another shard's
// cross-shard apply holds a path overlapping one of paths. A read of such
// a path waits for the part to end: its coordinator may have committed
// already, and an agent that read the apply's effect on the coordinator's
// boards must not then read this shard's part undone.
func (e *Engine) XHolds(paths []string) bool {
	self := e.Shard()
	for _, p := range e.xparts {
		if p.coord == self {
			continue
		}
		for _, w := range p.Writes {
			for _, q := range paths {
				if q == "" || intents.Overlaps(w.Path, q) {
					return true
				}
			}
		}
	}
	return false
}

// xcheck is a part being decided for a prepare: its decision is caught
// (refused) instead of emitted, and so is its success (ok).
type xcheck struct {
	id      string
	ok      bool
	refused *intents.Decision
}

// xcaught reports whether in is a part being prepared.
func (e *Engine) xcaught(in *intents.Intent) bool { return e.xcheck != nil && e.xcheck.id == in.ID }

// xprepare decides part as an apply here, up to its change, and returns
// the decision that refuses it, or nil when it may be prepared. A part
// never waits: it is decided with on_conflict reject, and one that would
// wait for a person or an arbiter is refused.
func (e *Engine) xprepare(part *intents.Intent) *intents.Decision {
	cp := *part
	cp.OnConflict = intents.OnConflictReject
	prev := e.xcheck
	x := &xcheck{id: part.ID}
	e.xcheck = x
	defer func() { e.xcheck = prev }()
	e.decideNew(&cp, nil, false)
	if !x.ok && x.refused == nil {
		// Every path of decideNew decides; this is a bug, not the intent's.
		return &intents.Decision{Intent: part.ID, Agent: part.Agent, Outcome: intents.OutcomeRejected,
			Reason: intents.ReasonInvalid, Detail: "the part was neither prepared nor refused", Retryable: false}
	}
	return x.refused
}

// xrefuseWait refuses a part that would wait for a person or an arbiter:
// its coordinator cannot hold the other parts that long.
func (e *Engine) xrefuseWait(in *intents.Intent, what string, conflicts []intents.Conflict) {
	e.reject(in, intents.ReasonConflict, what+"; a part of a cross-shard apply does not wait", conflicts)
}

// crossShard says whether in is a cross-shard apply this shard
// coordinates, and returns its parts, this shard's first; or, for a
// cross-shard intent that cannot be one, why. ok false and detail ""
// mean in is no cross-shard intent of this shard.
func (e *Engine) crossShard(in *intents.Intent, pre, post []*cond.Condition, reads, writes []string) (parts []intents.XPart, detail string, ok bool) {
	if e.owners == nil && e.shard == "" {
		return nil, "", false
	}
	// Every intent of a shard passes here: most name only its boards.
	mine := true
	for _, ps := range [][]string{reads, writes} {
		for _, p := range ps {
			mine = mine && e.owns(intents.Board(p))
		}
	}
	if mine {
		return nil, "", false
	}
	self := e.Shard()
	shards := map[string]bool{}
	for _, ps := range [][]string{reads, writes} {
		for _, p := range ps {
			shards[e.owner(intents.Board(p))] = true
		}
	}
	if len(shards) < 2 || !shards[self] {
		return nil, "", false
	}
	whose := func(paths []string) (string, string) {
		owner := ""
		var named []string
		for _, b := range intents.Boards(paths) {
			o := e.owner(b)
			named = append(named, fmt.Sprintf("%s (shard %s)", b, o))
			if owner == "" {
				owner = o
			} else if owner != o {
				return "", strings.Join(named, " and ")
			}
		}
		if owner == "" {
			owner = self
		}
		return owner, ""
	}
	switch {
	case in.Kind != intents.KindApply:
		return nil, fmt.Sprintf("a %s touches boards of shards %s; a transaction may touch one shard's boards, an apply several",
			in.Kind, strings.Join(slices.Sorted(maps.Keys(shards)), ", ")), false
	case in.Fence != 0:
		return nil, "an apply under a task's claim (fence) may touch one shard's boards", false
	}
	if ask, err := intents.AskOf(in.Meta); err != nil || ask != nil {
		return nil, "an input request (meta.ask) may touch one shard's boards", false
	}
	byShard := map[string]*intents.Intent{}
	part := func(s string) *intents.Intent {
		p := byShard[s]
		if p == nil {
			p = &intents.Intent{ID: in.ID, Agent: in.Agent, Kind: intents.KindApply, Action: in.Action,
				Priority: in.Priority, OnConflict: intents.OnConflictReject, Meta: in.Meta}
			byShard[s] = p
		}
		return p
	}
	for _, r := range in.Reads {
		p := part(e.owner(intents.Board(r.Path)))
		p.Reads = append(p.Reads, r)
	}
	for _, w := range in.Writes {
		p := part(e.owner(intents.Board(w.Path)))
		p.Writes = append(p.Writes, w)
	}
	for _, cs := range []struct {
		kind  string
		conds []*cond.Condition
		srcs  []string
		to    func(*intents.Intent, string)
	}{
		{"pre", pre, in.Pre, func(p *intents.Intent, s string) { p.Pre = append(p.Pre, s) }},
		{"post", post, in.Post, func(p *intents.Intent, s string) { p.Post = append(p.Post, s) }},
	} {
		for i, c := range cs.conds {
			s, mixed := whose(c.Paths)
			if mixed != "" {
				return nil, fmt.Sprintf("%s[%d] reads %s; a condition of a cross-shard apply may read one shard's boards: split it", cs.kind, i, mixed), false
			}
			cs.to(part(s), cs.srcs[i])
		}
	}
	parts = []intents.XPart{{Shard: self, Intent: part(self)}}
	for _, s := range slices.Sorted(maps.Keys(byShard)) {
		if s != self {
			parts = append(parts, intents.XPart{Shard: s, Intent: byShard[s]})
		}
	}
	return parts, "", true
}

// xbegin decides a cross-shard apply this shard coordinates: its own part
// first, which refuses the intent if it is refused; otherwise the begin
// event, and the intent queued until every shard has answered.
func (e *Engine) xbegin(in *intents.Intent, parts []intents.XPart) {
	if d := e.xprepare(parts[0].Intent); d != nil {
		e.decide(d)
		return
	}
	e.emit(intents.Event{Type: intents.EventXShard, Agent: in.Agent, Intent: in.ID,
		XShard: &intents.XShard{Phase: intents.XShardBegin, Intent: in.ID, Coord: e.Shard(), Parts: parts}})
	others := make([]string, 0, len(parts)-1)
	for _, p := range parts[1:] {
		others = append(others, p.Shard)
	}
	e.decide(&intents.Decision{Intent: in.ID, Agent: in.Agent, Outcome: intents.OutcomeQueued,
		Detail: fmt.Sprintf("a cross-shard apply: prepared on shard %s, waiting for shard %s to prepare its part",
			e.Shard(), strings.Join(others, " and "))})
}

// XPrepare prepares this shard's part of a cross-shard apply that shard
// x.Coord coordinates (x is its prepare request), and returns this
// shard's vote: prepared, durable once Commit's Pending is and its paths
// held until XFinish; or the decision that refuses the part. A part
// prepared already is prepared; a request that is not one for this shard
// is an ErrXShard and changes nothing.
func (e *Engine) XPrepare(now time.Time, x *intents.XShard, out []*intents.Event) (Ready, intents.XVote, error) {
	vote := intents.XVote{Shard: e.Shard()}
	if err := x.Check(intents.XShardPrepare); err != nil {
		return Ready{Events: out}, vote, fmt.Errorf("%w: %v", ErrXShard, err)
	}
	if s := x.Parts[0].Shard; s != e.Shard() {
		return Ready{Events: out}, vote, fmt.Errorf("%w: the part of shard %s sent to shard %s", ErrXShard, s, e.Shard())
	}
	if x.Coord == e.Shard() {
		return Ready{Events: out}, vote, fmt.Errorf("%w: shard %s coordinates intent %s itself", ErrXShard, x.Coord, x.Intent)
	}
	part := x.Parts[0].Intent
	e.begin(now, out)
	e.advance()
	if p, ok := e.xparts[x.Intent]; ok {
		vote.Prepared, vote.Versions = true, e.xversions(p)
		return e.end(), vote, nil
	}
	if cause, ok := e.ended.get(x.Intent); ok {
		// A prepare that comes again after its part ended: preparing it
		// anew could apply it twice.
		vote.Decision = &intents.Decision{Intent: part.ID, Agent: part.Agent, Outcome: intents.OutcomeRejected, Reason: intents.ReasonConflict,
			Detail: fmt.Sprintf("the part of intent %s on shard %s ended already (%s)", x.Intent, e.Shard(), cause)}
		return e.end(), vote, nil
	}
	if vote.Decision = e.xprepare(part); vote.Decision != nil {
		e.settle()
		return e.end(), vote, nil
	}
	e.emit(intents.Event{Type: intents.EventXShard, Agent: part.Agent, Intent: part.ID,
		XShard: &intents.XShard{Phase: intents.XShardPrepare, Intent: x.Intent, Coord: x.Coord, Parts: x.Parts}})
	vote.Prepared, vote.Versions = true, e.xversions(e.xparts[x.Intent])
	e.settle()
	return e.end(), vote, nil
}

// xversions are the versions p's paths will have once it is applied.
func (e *Engine) xversions(p *xpart) map[string]uint64 {
	v := e.versions(p.in, nil, nil)
	if plan, err := e.tree.Plan(p.in.Writes); err == nil {
		for _, a := range plan {
			if _, ok := v[a.Path]; ok {
				v[a.Path] = a.NewVersion
			}
		}
	}
	return v
}

// XFinish ends this shard's prepared part of intent id as its
// coordinator decided: commit applies it, and either frees its paths.
// A part not prepared here (ended already, or never prepared) is left as
// it is.
func (e *Engine) XFinish(now time.Time, id string, commit bool, out []*intents.Event) (Ready, error) {
	p := e.xparts[id]
	if p != nil && p.coord == e.Shard() {
		return Ready{Events: out}, fmt.Errorf("%w: intent %s is coordinated here; its decision ends its part", ErrXShard, id)
	}
	e.begin(now, out)
	e.advance()
	if p = e.xparts[id]; p != nil {
		e.xend(p, commit)
		e.settle()
	}
	return e.end(), nil
}

// xend applies (commit) or drops p, and frees its paths.
func (e *Engine) xend(p *xpart, commit bool) {
	if commit {
		e.xapply(p)
	}
	e.xrelease(p, commit, nil)
}

// xapply applies p's writes. Its paths were held since it was checked,
// and nothing merged into them: the plan its prepare made is the plan now.
func (e *Engine) xapply(p *xpart) {
	if len(p.in.Writes) == 0 {
		return
	}
	plan, err := e.tree.Plan(p.in.Writes)
	if err != nil {
		panic(fmt.Sprintf("engine: the prepared part of intent %s no longer plans: %v", p.ID, err))
	}
	e.emit(intents.Event{Type: intents.EventChange, Agent: p.Agent, Intent: p.ID, Change: &intents.Change{Writes: plan}})
}

// xrelease frees p's paths, committed or aborted; d is the decision a
// coordinator's commit point carries.
func (e *Engine) xrelease(p *xpart, commit bool, d *intents.Decision) {
	phase := intents.XShardAbort
	if commit {
		phase = intents.XShardCommit
	}
	e.emit(intents.Event{Type: intents.EventXShard, Agent: p.Agent, Intent: p.ID,
		XShard: &intents.XShard{Phase: phase, Intent: p.ID, Coord: p.coord, Decision: d}})
}

// XDecide decides a cross-shard apply this shard coordinates, given each
// other shard's vote. When every part was prepared, its own part is
// applied and its commit event, the commit point, carries the decision
// (applied); the caller tells the other shards once it is durable, and
// answers the decision (XDone) once each has applied its part, so that
// whoever is told reads every part. Otherwise the intent is rejected as
// the first refusal says, its own part dropped, and answered at once:
// nothing of it was visible anywhere. One decided already is left as it
// is.
func (e *Engine) XDecide(now time.Time, id string, votes []intents.XVote, out []*intents.Event) (Ready, error) {
	c := e.xcoords[id]
	if c == nil || c.decided != nil {
		return Ready{Events: out}, nil
	}
	e.begin(now, out)
	e.advance()
	own := e.xparts[id]
	var refusal *intents.Decision
	for _, part := range c.begin.Parts[1:] {
		i := slices.IndexFunc(votes, func(v intents.XVote) bool { return v.Shard == part.Shard })
		switch {
		case i < 0:
			refusal = &intents.Decision{Reason: intents.ReasonConflict, Detail: fmt.Sprintf("shard %s did not answer", part.Shard)}
		case !votes[i].Prepared:
			refusal = &intents.Decision{Reason: intents.ReasonConflict, Detail: "refused"}
			if d := votes[i].Decision; d != nil {
				cp := *d
				refusal = &cp
			}
			refusal.Detail = fmt.Sprintf("shard %s refused its part: %s", part.Shard, refusal.Detail)
			if intents.Misrouted(refusal) {
				// The board moved since this shard split the intent: the
				// whole intent may be sent again, under a new id.
				refusal.Reason = intents.ReasonConflict
				refusal.Detail += "; its board moved, retry"
			}
		}
		if refusal != nil {
			break
		}
	}
	if refusal != nil {
		e.xend(own, false)
		e.decide(&intents.Decision{Intent: id, Agent: own.Agent, Outcome: intents.OutcomeRejected, Reason: refusal.Reason,
			Detail: refusal.Detail, Conflicts: refusal.Conflicts, Versions: refusal.Versions})
	} else {
		// The versions its own part leaves, as the change will make them;
		// the other shards' are theirs to tell.
		e.xapply(own)
		// The versions its paths have after it: its own part's, and those
		// each other shard said its part would leave.
		versions := e.versions(own.in, nil, nil)
		for _, v := range votes {
			for _, p := range slices.Sorted(maps.Keys(v.Versions)) {
				if len(versions) >= maxVersions {
					break
				}
				if versions == nil {
					versions = map[string]uint64{}
				}
				versions[p] = v.Versions[p]
			}
		}
		e.xrelease(own, true, &intents.Decision{Intent: id, Agent: own.Agent, Outcome: intents.OutcomeApplied,
			Rev: e.tree.Rev(), Versions: versions})
	}
	e.settle()
	return e.end(), nil
}

// XDone answers a cross-shard apply this shard committed, once every
// other shard has applied its part: its decision. One not committed, or
// answered already, is left as it is.
func (e *Engine) XDone(now time.Time, id string, out []*intents.Event) Ready {
	e.begin(now, out)
	e.advance()
	if c := e.xcoords[id]; c != nil && c.decided != nil {
		d := *c.decided
		e.decide(&d)
		e.settle()
	}
	return e.end()
}

// xhold puts a prepared part's paths in the conflict index.
func (e *Engine) xhold(id, coord string, in *intents.Intent, at time.Time) {
	p := &xpart{Txn: conflict.Txn{ID: id, Agent: in.Agent}, coord: coord, in: in, at: at}
	for _, w := range conflictWrites(in) {
		p.Writes = append(p.Writes, intents.Write{Path: w.Path, Op: intents.OpSet})
	}
	for _, r := range in.Reads {
		p.Reads = append(p.Reads, r.Path)
	}
	// What the part's conditions and the invariants over its writes read
	// stays as its prepare saw it. The conditions compiled then, under the
	// same rules.
	if pre, post, _, err := e.conditions(in); err == nil {
		for _, c := range slices.Concat(pre, post) {
			p.Reads = append(p.Reads, c.Paths...)
		}
	}
	p.Reads = append(p.Reads, invariantReads(e.rules.Invariants(writePaths(in.Writes)))...)
	if e.xparts == nil {
		e.xparts = map[string]*xpart{}
	}
	e.xparts[id] = p
	e.index.Add(&p.Txn)
}

// foldXShard folds a cross-shard event.
func (e *Engine) foldXShard(ev *intents.Event) {
	x := ev.XShard
	switch x.Phase {
	case intents.XShardBegin:
		if e.xcoords == nil {
			e.xcoords = map[string]*xcoord{}
		}
		e.xcoords[x.Intent] = &xcoord{begin: x, at: ev.Time}
		e.xhold(x.Intent, x.Coord, x.Part(e.Shard()), ev.Time)
	case intents.XShardPrepare:
		e.xhold(x.Intent, x.Coord, x.Parts[0].Intent, ev.Time)
	case intents.XShardCommit, intents.XShardAbort:
		p := e.xparts[x.Intent]
		e.index.Remove(&p.Txn)
		delete(e.xparts, x.Intent)
		if c := e.xcoords[x.Intent]; c != nil && x.Decision != nil {
			c.decided = x.Decision // answered by its decision event
		} else {
			delete(e.xcoords, x.Intent)
		}
		cause := intents.CauseCommitted
		if x.Phase == intents.XShardAbort {
			cause = intents.CauseAborted
		}
		e.ended.put(x.Intent, cause)
		e.redecide = append(e.redecide, e.waits.Release(x.Intent)...)
	}
}

// checkXShard checks a cross-shard event before it is folded.
func (e *Engine) checkXShard(x *intents.XShard) error {
	if x == nil {
		return fmt.Errorf("xshard event without xshard")
	}
	switch x.Phase {
	case intents.XShardBegin:
		if x.Coord != e.Shard() {
			return fmt.Errorf("begin of intent %s coordinated by shard %s in shard %s's log", x.Intent, x.Coord, e.Shard())
		}
		if x.Part(e.Shard()) == nil {
			return fmt.Errorf("begin of intent %s without shard %s's part", x.Intent, e.Shard())
		}
	case intents.XShardPrepare:
		if len(x.Parts) != 1 || x.Parts[0].Intent == nil || x.Parts[0].Shard != e.Shard() {
			return fmt.Errorf("prepare of intent %s without shard %s's part alone", x.Intent, e.Shard())
		}
	case intents.XShardCommit, intents.XShardAbort:
		if e.xparts[x.Intent] == nil {
			return fmt.Errorf("%s of intent %s, which no part here prepared", x.Phase, x.Intent)
		}
		if d := x.Decision; d != nil && (x.Phase != intents.XShardCommit || e.xcoords[x.Intent] == nil || d.Intent != x.Intent) {
			return fmt.Errorf("%s of intent %s with a decision, which only a coordinator's commit of it carries", x.Phase, x.Intent)
		}
		return nil
	default:
		return fmt.Errorf("xshard event of phase %q", x.Phase)
	}
	if e.xparts[x.Intent] != nil {
		return fmt.Errorf("%s of intent %s, whose part is prepared already", x.Phase, x.Intent)
	}
	return nil
}
