package engine

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/datadriven"
	"github.com/oklog/ulid/v2"
)

// The scripts under testdata/*.txt are datadriven files (Pebble's harness,
// github.com/cockroachdb/datadriven): commands and the output the engine
// must produce for each.
//
//	# comment
//	<command> <args...>
//	<input lines, if any>
//	----
//	<expected output>
//	<blank line>
//
// Commands:
//
//	at <dur>            set the clock to the base time plus dur (never back)
//	submit <agent>      submit the input (an intent's JSON) on agent's subject
//	advance <dur>       set the clock and fire due timers
//	state <path>...     print values, versions and mod_revs
//	txns                print the transactions in flight
//	parked              print the parked intents
//	resolve             give the engine the input, an arbiter's resolution
//	case <name>         print the arbiter's case of an escalated intent
//	rules               put the input, a rules file, in force
//	claims              print the task claims under leases
//	vote <agent> <case> <verdict> [why...]
//	                    give the engine an approver's vote on an approval case
//	vote <agent> <case> answer <json> [why...]
//	                    and an answer to an input case
//
// In inputs, $name stands for a ULID derived from name (an intent id) and
// $Tn for the n-th transaction id the engine handed out; outputs use the
// same names, and times are shown as offsets from the base time. After the
// last command every script checks that replaying its events into a new
// engine gives the same state hash and the same transactions.
//
// After a deliberate change in behaviour, datadriven's -rewrite flag writes
// the output the engine gives now back into the scripts, for review in a
// diff:
//
//	go test ./coordinator/engine -run TestScripts -rewrite
func TestScripts(t *testing.T) {
	// Not datadriven.Walk over testdata/: it would take the fuzz corpora
	// under testdata/fuzz for scripts.
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scripts under testdata/")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			r := newScriptRun(t)
			datadriven.RunTest(t, f, r.run)
			r.checkReplay(t)
		})
	}
}

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type scriptRun struct {
	e      *Engine
	now    time.Time
	log    []*intents.Event
	names  map[string]string // ULID → name
	ids    map[string]string // name → ULID
	txnN   int
	config Config
}

func (r *scriptRun) id(name string) string {
	if id, ok := r.ids[name]; ok {
		return id
	}
	var u ulid.ULID
	_ = u.SetTime(ulid.Timestamp(base))
	sum := sha256.Sum256([]byte(name))
	copy(u[6:], sum[:10])
	r.ids[name], r.names[u.String()] = u.String(), name
	return u.String()
}

var dollar = regexp.MustCompile(`\$[A-Za-z0-9_]+`)

func (r *scriptRun) expand(t *testing.T, s string) string {
	return dollar.ReplaceAllStringFunc(s, func(m string) string {
		name := m[1:]
		if id, ok := r.ids[name]; ok {
			return id
		}
		if strings.HasPrefix(name, "T") {
			t.Fatalf("unknown transaction %s", m)
		}
		return r.id(name)
	})
}

// nameAll maps ids back to their script names.
func (r *scriptRun) nameAll(ids []string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = r.name(id)
	}
	return strings.Join(out, ",")
}

// name maps an id back to its script name, naming new transactions T1, T2….
func (r *scriptRun) name(id string) string {
	if id == "" {
		return "-"
	}
	if n, ok := r.names[id]; ok {
		return n
	}
	r.txnN++
	n := fmt.Sprintf("T%d", r.txnN)
	r.names[id], r.ids[n] = n, id
	return n
}

func (r *scriptRun) rel(t time.Time) string { return "+" + t.Sub(base).String() }

// redact replaces every id in a free sentence by its script name.
func (r *scriptRun) redact(s string) string {
	return regexp.MustCompile(`[0-9A-HJKMNP-TV-Z]{26}`).ReplaceAllStringFunc(s, func(id string) string {
		if _, err := ulid.ParseStrict(id); err != nil {
			return id
		}
		return r.name(id)
	})
}

func newScriptRun(t *testing.T) *scriptRun {
	r := &scriptRun{now: base, names: map[string]string{}, ids: map[string]string{}}
	r.config = Config{MaxTxnsPerAgent: 3, MaxParkedPerAgent: 3}
	var err error
	if r.e, err = New(r.config); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *scriptRun) clock(t *testing.T, arg string) {
	d, err := time.ParseDuration(arg)
	if err != nil {
		t.Fatalf("bad duration %q: %v", arg, err)
	}
	if at := base.Add(d); at.After(r.now) {
		r.now = at
	}
}

// run is the datadriven callback: it runs one command and returns its
// output.
func (r *scriptRun) run(t *testing.T, d *datadriven.TestData) string {
	return strings.Join(r.do(t, d), "\n")
}

func (r *scriptRun) do(t *testing.T, d *datadriven.TestData) []string {
	args := positional(t, d)
	switch d.Cmd {
	case "at":
		r.clock(t, args[0])
		return []string{"now " + r.rel(r.now)}
	case "submit":
		agent := ""
		if len(args) > 0 {
			agent = args[0]
		}
		ready := r.e.Submit(r.now, Input{Agent: agent, Raw: []byte(r.expand(t, d.Input))}, nil)
		r.log = append(r.log, ready.Events...)
		return append(r.describe(ready.Events), r.deadTasks(ready.Effects)...)
	case "resolve":
		var res intents.Resolution
		if err := json.Unmarshal([]byte(r.expand(t, d.Input)), &res); err != nil {
			d.Fatalf(t, "resolve: %v", err)
		}
		ready, err := r.e.Resolve(r.now, &res, nil)
		evs := ready.Events
		r.log = append(r.log, evs...)
		lines := r.describe(evs)
		if err != nil {
			lines = append(lines, "error: "+r.redact(err.Error()))
		}
		return lines
	case "vote":
		if len(args) < 3 {
			d.Fatalf(t, "vote: want <agent> <case> <verdict> [why...]")
		}
		v := &intents.Vote{Agent: args[0], Case: r.id(args[1]), Verdict: args[2], Rationale: strings.Join(args[3:], " ")}
		if v.Verdict == intents.VerdictAnswer && len(args) > 3 {
			v.Answer, v.Rationale = json.RawMessage(args[3]), strings.Join(args[4:], " ")
		}
		ready, err := r.e.Vote(r.now, v, nil)
		r.log = append(r.log, ready.Events...)
		lines := r.describe(ready.Events)
		for _, c := range ready.Effects.Dead {
			lines = append(lines, "dead letter "+r.name(c.ID))
		}
		if err != nil {
			lines = append(lines, "error: "+r.redact(err.Error()))
		}
		return lines
	case "rules":
		ready, err := r.e.SetRules(r.now, []byte(d.Input), "script", nil)
		evs := ready.Events
		r.log = append(r.log, evs...)
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		ev, _ := r.e.Rules()
		return []string{fmt.Sprintf("rules %s in force", ev.Hash[:8])}
	case "shadow":
		mode := ""
		if len(args) > 0 {
			mode = args[0]
		}
		ready, err := r.e.SetShadowRules(r.now, []byte(d.Input), mode, "script", nil)
		r.log = append(r.log, ready.Events...)
		if err != nil {
			return []string{"error: " + err.Error()}
		}
		ev, _ := r.e.Rules()
		if len(ev.Shadow) == 0 {
			return []string{"no shadow rules"}
		}
		return []string{fmt.Sprintf("shadow rules %s in force (%s)", ev.ShadowHash[:8], cmp.Or(ev.ShadowMode, "audit"))}
	case "case":
		c, ok := r.e.Case(r.ids[args[0]])
		if !ok {
			return []string{"no open case " + args[0]}
		}
		var names []string
		for _, in := range c.Intents {
			names = append(names, r.name(in.ID))
		}
		lines := []string{fmt.Sprintf("case %s intents=%s deadline=%s", args[0], strings.Join(names, ","), r.rel(c.Deadline))}
		if c.Holder != nil {
			lines = append(lines, fmt.Sprintf("  holder %s of %s fence=%d propose=%s", r.name(c.Holder.Txn), c.Holder.Agent, c.Holder.Fence, r.name(c.Holder.Intent)))
		}
		var paths []string
		for p, st := range c.State {
			paths = append(paths, fmt.Sprintf("%s exists=%v version=%d", p, st.Exists, st.Version))
		}
		slices.Sort(paths)
		for _, p := range paths {
			lines = append(lines, "  state "+p)
		}
		if pn := c.Panel; pn != nil {
			lines = append(lines, fmt.Sprintf("  panel: %d of %q", pn.Quorum, pn.Of))
			for _, v := range c.Votes {
				lines = append(lines, fmt.Sprintf("  vote %s: winners %s losers %s: %s", v.Agent, r.nameAll(v.Resolution.Winners), r.nameAll(v.Resolution.Losers), v.Rationale))
			}
		}
		if a := c.Approval; a != nil {
			lines = append(lines, fmt.Sprintf("  %s: rules[%d] on %s by %s quorum=%d fallback=%s", c.Kind, a.Rule, a.Path, strings.Join(a.By, ","), a.Quorum, a.Fallback))
			for _, v := range a.Votes {
				lines = append(lines, fmt.Sprintf("  vote %s %s: %s", v.Agent, v.Verdict, v.Rationale))
			}
			var after []string
			for p, st := range a.After {
				after = append(after, fmt.Sprintf("%s exists=%v value=%s version=%d", p, st.Exists, st.Value, st.Version))
			}
			slices.Sort(after)
			for _, p := range after {
				lines = append(lines, "  after "+p)
			}
		}
		return lines
	case "advance":
		r.clock(t, args[0])
		ready := r.e.Tick(r.now, nil)
		r.log = append(r.log, ready.Events...)
		lines := append(r.describe(ready.Events), r.deadTasks(ready.Effects)...)
		for _, c := range ready.Effects.Dead {
			lines = append(lines, "dead letter "+r.name(c.ID))
		}
		if len(lines) == 0 {
			lines = []string{"nothing due at " + r.rel(r.now)}
		}
		return lines
	case "state":
		var lines []string
		for _, p := range args {
			e := r.e.State().Lookup(p)
			if !e.Exists {
				lines = append(lines, fmt.Sprintf("%s absent version=%d", p, e.Version))
				continue
			}
			lines = append(lines, fmt.Sprintf("%s = %s version=%d mod_rev=%d", p, state.FormatValue(e.Value), e.Version, e.ModRev))
		}
		return append(lines, fmt.Sprintf("rev=%d", r.e.State().Rev()))
	case "txns":
		var lines []string
		for _, ti := range r.e.Txns() {
			lines = append(lines, fmt.Sprintf("%s agent=%s fence=%d writes=%s expires=%s",
				r.name(ti.Txn), ti.Agent, ti.Fence, describeWrites(ti.Writes), r.rel(ti.LeaseExpires)))
		}
		if len(lines) == 0 {
			lines = []string{"none in flight"}
		}
		return lines
	case "claims":
		var lines []string
		for _, c := range r.e.Snapshot().Claims {
			lines = append(lines, fmt.Sprintf("%s owner=%s txn=%s fence=%d expires=%s", c.Path, c.Owner, r.name(c.ID), c.Fence, r.rel(c.Expires)))
		}
		if len(lines) == 0 {
			lines = []string{"no claims"}
		}
		return lines
	case "parked":
		var lines []string
		for _, id := range r.e.Parked() {
			p := r.e.parked[id]
			kind := "waiting"
			if p.escalated {
				kind = "escalated"
			}
			lines = append(lines, fmt.Sprintf("%s %s until %s", r.name(id), kind, r.rel(p.deadline)))
		}
		if len(lines) == 0 {
			lines = []string{"none parked"}
		}
		return lines
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return nil
}

// positional returns the bare arguments of a command; the engine's
// commands take no key=value ones, so one is a typo to stop at, not to skip.
func positional(t *testing.T, d *datadriven.TestData) []string {
	t.Helper()
	var args []string
	for _, a := range d.CmdArgs {
		if len(a.Vals) > 0 {
			d.Fatalf(t, "argument %s: %s takes no key=value arguments", a, d.Cmd)
		}
		args = append(args, a.Key)
	}
	return args
}

// describe renders the decisions and notices among events, one line each;
// the other events show through the decisions they lead to.
func (r *scriptRun) describe(evs []*intents.Event) []string {
	var lines []string
	for _, ev := range evs {
		switch ev.Type {
		case intents.EventDecision:
			lines = append(lines, r.decision(ev.Decision)...)
		case intents.EventNotice:
			n := ev.Notice
			line := fmt.Sprintf("notice to %s: %s txn=%s", ev.Agent, n.Kind, r.name(n.Txn))
			if n.Intent != "" {
				line += fmt.Sprintf(" intent=%s from=%s", r.name(n.Intent), n.From)
			}
			if n.Fence != 0 {
				line += fmt.Sprintf(" fence=%d", n.Fence)
			}
			lines = append(lines, line)
		case intents.EventExpire:
			lines = append(lines, fmt.Sprintf("expire %s of %s", r.name(ev.Release.Txn), ev.Release.Agent))
		case intents.EventRelease:
			if ev.Release.Cause == intents.CausePreempted {
				lines = append(lines, fmt.Sprintf("preempt %s of %s", r.name(ev.Release.Txn), ev.Release.Agent))
			}
		case intents.EventResolve:
			lines = append(lines, fmt.Sprintf("resolution by %s accepted", ev.Agent))
		case intents.EventVote:
			lines = append(lines, fmt.Sprintf("vote by %s accepted: %s", ev.Agent, ev.Vote.Verdict))
		case intents.EventShadow:
			sh := ev.Shadow
			lines = append(lines, fmt.Sprintf("shadow %s %s of %s (%s): decided %s, would be %s", sh.Kind, r.name(ev.Intent), ev.Agent,
				sh.Mode, sh.Decided, sh.WouldBeKey()))
			if sh.Rule != "" {
				lines = append(lines, "  rule "+sh.Rule)
			}
			if sh.Detail != "" {
				lines = append(lines, "  detail: "+r.redact(sh.Detail))
			}
		case intents.EventChange:
			if ev.Intent != "" {
				break // shown by its decision
			}
			var ws []string
			what := "try counted" // an owner gave its task back to the pool
			for _, w := range ev.Change.Writes {
				ws = append(ws, fmt.Sprintf("%s %s %s", w.Op, w.Path, w.Value))
				if w.Op == intents.OpDelete && strings.HasSuffix(w.Path, ".owner") {
					what = "reclaim"
				}
			}
			lines = append(lines, fmt.Sprintf("%s txn=%s: %s", what, r.name(ev.Txn), strings.Join(ws, ", ")))
		}
	}
	return lines
}

// deadTasks describes the dead letters of a call's tasks past their tries.
func (r *scriptRun) deadTasks(fx Effects) []string {
	var lines []string
	for _, d := range fx.DeadTasks {
		lines = append(lines, fmt.Sprintf("dead letter %s: status=%s pool=%s tries=%d max_retries=%d owner=%s lease=%s fence=%d why=%s error=%s rev=%d",
			d.Task, d.Status, d.Pool, d.Tries, d.MaxRetries, d.Owner, r.name(d.Lease), d.Fence, d.Why, d.Error, d.Rev))
	}
	return lines
}

func (r *scriptRun) decision(d *intents.Decision) []string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", r.name(d.Intent), d.Agent, d.Outcome)
	if d.Reason != "" {
		fmt.Fprintf(&b, " %s", d.Reason)
	}
	if d.Txn != "" {
		fmt.Fprintf(&b, " txn=%s", r.name(d.Txn))
	}
	if d.Fence != 0 {
		fmt.Fprintf(&b, " fence=%d", d.Fence)
	}
	if d.LeaseExpires != nil {
		fmt.Fprintf(&b, " lease=%s", r.rel(*d.LeaseExpires))
	}
	if d.Rev != 0 {
		fmt.Fprintf(&b, " rev=%d", d.Rev)
	}
	if len(d.MergedWith) > 0 {
		names := make([]string, len(d.MergedWith))
		for i, id := range d.MergedWith {
			names[i] = r.name(id)
		}
		fmt.Fprintf(&b, " merged_with=%s", strings.Join(names, ","))
	}
	if d.Retryable {
		b.WriteString(" retryable")
	}
	if d.Duplicate {
		b.WriteString(" duplicate")
	}
	lines := []string{b.String()}
	for _, c := range d.Conflicts {
		line := fmt.Sprintf("  conflict %s %s", c.Kind, c.Path)
		if c.WithTxn != "" {
			line += fmt.Sprintf(" with %s of %s", r.name(c.WithTxn), c.WithAgent)
		} else if c.WithAgent != "" {
			line += " with " + c.WithAgent
		}
		lines = append(lines, line)
	}
	if len(d.Versions) > 0 {
		var vs []string
		for p, v := range d.Versions {
			vs = append(vs, fmt.Sprintf("%s@%d", p, v))
		}
		slices.Sort(vs)
		lines = append(lines, "  versions "+strings.Join(vs, " "))
	}
	if d.Detail != "" {
		lines = append(lines, "  detail: "+r.redact(d.Detail))
	}
	for _, w := range d.Warnings {
		lines = append(lines, fmt.Sprintf("  warning: %s would be %s: %s", w.Rule, w.WouldBe, r.redact(w.Detail)))
	}
	return lines
}

// checkReplay folds the script's events into a fresh engine and compares.
func (r *scriptRun) checkReplay(t *testing.T) {
	fresh, err := New(r.config)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range r.log {
		if err := fresh.Apply(ev); err != nil {
			t.Fatalf("replay: %v", err)
		}
	}
	if got, want := fresh.State().Hash(), r.e.State().Hash(); got != want {
		t.Errorf("replay: state hash %x, live engine %x", got[:8], want[:8])
	}
	if got, want := fmt.Sprint(fresh.Txns()), fmt.Sprint(r.e.Txns()); got != want {
		t.Errorf("replay: txns\n%s\nlive\n%s", got, want)
	}
	if got, want := fresh.Parked(), r.e.Parked(); !slices.Equal(got, want) {
		t.Errorf("replay: parked %v, live %v", got, want)
	}
	// The task claims, and a snapshot's round trip of them.
	if got, want := fmt.Sprint(fresh.Snapshot().Claims), fmt.Sprint(r.e.Snapshot().Claims); got != want {
		t.Errorf("replay: claims\n%s\nlive\n%s", got, want)
	}
	restored, err := Restore(r.config, r.e.Snapshot())
	if err != nil {
		t.Fatalf("restore the live engine's snapshot: %v", err)
	}
	if got, want := fmt.Sprint(restored.Snapshot()), fmt.Sprint(r.e.Snapshot()); got != want {
		t.Errorf("restore: snapshot\n%s\nlive\n%s", got, want)
	}
}
