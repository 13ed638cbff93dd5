package coordinator

import (
	"encoding/json"
	"slices"

	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
)

// viewer is who a read is answered for, and what the board rules' readers
// let it see. Every way of reading goes through one: state.get, log.query,
// txn.list, conflicts.top, the change feed (read by anyone) and the
// arbiters' cases (read by role:arbiter).
type viewer struct {
	rules.Viewer
	set *rules.Set
	// all: the viewer reads everything, every agent's events included:
	// without authentication (nothing is kept from anyone, as nothing stops
	// anyone from being anyone), or an observer.
	all bool
}

// viewerOf returns who a request with the reply subject reply is answered
// for. Under Options.Auth the server lets each agent receive only under its
// own inbox prefix (intents.InboxPrefix), so the reply subject names the
// agent that will read the answer; a reply anywhere else is answered as to
// anyone, since anyone may be subscribed there.
func (s *Service) viewerOf(reply string) viewer { return viewerOf(s.rules.Load(), s.opts.Auth, reply) }

// viewerOf is Service.viewerOf under the rules set, for every coordinator
// that answers reads, a standby too; auth is Options.Auth.
func viewerOf(set *rules.Set, auth bool, reply string) viewer {
	if !auth {
		return viewer{set: set, all: true}
	}
	v := viewer{set: set}
	if agent, ok := intents.InboxAgent(reply); ok {
		v.Agent = agent
	}
	v.all = set.Observer(v.Viewer)
	return v
}

// anyone is the viewer of what is published to every agent.
func (s *Service) anyone() viewer { return viewer{set: s.rules.Load()} }

// arbiters is the viewer of the cases on the arbiter queue: any arbiter
// may pull one.
func (s *Service) arbiters() viewer {
	return viewer{Viewer: rules.Viewer{Roles: []string{rules.RoleArbiter}}, set: s.rules.Load()}
}

// hides reports whether some values are kept from v.
func (v viewer) hides() bool { return !v.all && v.set.Hides(v.Viewer) }

// own reports whether an event is v's own: its agent is v.
func (v viewer) own(ev *intents.Event) bool { return v.Agent != "" && ev.Agent == v.Agent }

// value returns the value at path as v may see it, and the paths kept
// from it.
func (v viewer) value(path string, value any) (any, []string) {
	if v.all {
		return value, nil
	}
	if path == "" {
		return v.root(value)
	}
	return v.set.Redact(v.Viewer, path, value)
}

// root is value for the whole tree (the path ""): each board as v may
// read it, a board kept from v whole taken out and named.
func (v viewer) root(value any) (any, []string) {
	boards, ok := value.(map[string]any)
	if !ok || !v.hides() {
		return value, nil
	}
	out := make(map[string]any, len(boards))
	var hidden []string
	for b, bv := range boards {
		seen, h := v.set.Redact(v.Viewer, b, bv)
		hidden = append(hidden, h...)
		if len(h) == 1 && h[0] == b {
			continue
		}
		out[b] = seen
	}
	slices.Sort(hidden)
	return out, hidden
}

// change returns ev, a change event, as v may see it: a copy whose writes
// have the values v may not read taken out and named in Redacted, or ev
// itself when nothing is kept from v.
func (v viewer) change(ev *intents.Event) *intents.Event {
	if ev.Change == nil || !v.hides() {
		return ev
	}
	var writes []intents.Applied
	var hidden []string
	for i, w := range ev.Change.Writes {
		value, h := v.set.RedactJSON(v.Viewer, w.Path, w.Value)
		if len(h) == 0 {
			continue
		}
		if writes == nil {
			writes = slices.Clone(ev.Change.Writes)
		}
		writes[i].Value = value
		hidden = append(hidden, h...)
	}
	if writes == nil {
		return ev
	}
	cp := *ev
	cp.Change = &intents.Change{Writes: writes, MergedWith: ev.Change.MergedWith, Redacted: hidden}
	return &cp
}

// event returns ev as v may see it in log.query, or false when v may not
// see it at all: everything for an observer (and without authentication);
// otherwise v's own events, every change (its values as v may read them)
// and the rules in force, but no other agent's intents, decisions, grants
// (with their fences), waits or notices.
func (v viewer) event(ev *intents.Event) (*intents.Event, bool) {
	switch {
	case v.all:
		return ev, true
	case ev.Type == intents.EventChange:
		return v.change(ev), true
	case ev.Type == intents.EventRules:
		return ev, true
	case v.own(ev):
		return ev, true
	}
	return nil, false
}

// escalation returns a copy of cs, an arbiter case, with the values the
// arbiters may not read taken out of its state and its intents' and
// holder's writes, and named in Redacted; cs itself when none are.
func (v viewer) escalation(cs *intents.Escalation) *intents.Escalation {
	if !v.hides() {
		return cs
	}
	cp := *cs
	var hidden []string
	cp.State = make(map[string]intents.PathState, len(cs.State))
	for path, st := range cs.State {
		value, h := v.set.Redact(v.Viewer, path, st.Value)
		switch {
		case len(h) == 1 && h[0] == path:
			st = intents.PathState{}
		case len(h) > 0:
			st.Value = value
		}
		cp.State[path] = st
		hidden = append(hidden, h...)
	}
	// writes returns a copy of ws with the values v may not read taken
	// out, or nil when it keeps nothing from v.
	writes := func(ws []intents.Write) []intents.Write {
		var out []intents.Write
		for i, w := range ws {
			value, h := v.set.RedactJSON(v.Viewer, w.Path, w.Value)
			if len(h) == 0 {
				continue
			}
			if out == nil {
				out = slices.Clone(ws)
			}
			out[i].Value = value
			hidden = append(hidden, h...)
		}
		return out
	}
	cp.Intents = make([]*intents.Intent, len(cs.Intents))
	for i, in := range cs.Intents {
		if ws := writes(in.Writes); ws != nil {
			c := *in
			c.Writes = ws
			in = &c
		}
		cp.Intents[i] = in
	}
	if cs.Holder != nil {
		if ws := writes(cs.Holder.Writes); ws != nil {
			h := *cs.Holder
			h.Writes = ws
			cp.Holder = &h
		}
	}
	if a := cs.Approval; a != nil && len(a.After) > 0 {
		// The values an approval would leave are the intent's writes'.
		ac := *a
		ac.After = make(map[string]intents.PathState, len(a.After))
		for path, st := range a.After {
			if raw, ok := st.Value.(json.RawMessage); ok {
				value, h := v.set.RedactJSON(v.Viewer, path, raw)
				switch {
				case len(h) == 1 && h[0] == path:
					st = intents.PathState{}
				case len(h) > 0:
					st.Value = value
				}
				hidden = append(hidden, h...)
			}
			ac.After[path] = st
		}
		cp.Approval = &ac
	}
	if len(hidden) == 0 {
		return cs
	}
	slices.Sort(hidden)
	cp.Redacted = slices.Compact(hidden)
	return &cp
}
