package engine

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
)

// Traces of the tests: A's header, B's meta, C's replacement.
const (
	traceA = "4bf92f3577b34da6a3ce929d0e0e4736"
	traceB = "0af7651916cd43dd8448eb211c80319c"
	traceC = "11111111111111111111111111111111"
)

func traceparentOf(trace string) string { return "00-" + trace + "-00f067aa0ba902b7-01" }

// traceRun drives an engine and keeps every event it emits.
type traceRun struct {
	t   *testing.T
	e   *Engine
	now time.Time
	all []*intents.Event
}

func newTraceRun(t *testing.T, cfg Config) *traceRun {
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &traceRun{t: t, e: e, now: base}
}

func (r *traceRun) submit(in *intents.Intent, header ...string) []*intents.Event {
	raw, err := json.Marshal(in)
	if err != nil {
		r.t.Fatal(err)
	}
	var h []string
	if len(header) > 0 {
		h = header
	}
	evs := r.e.Submit(r.now, Input{Agent: in.Agent, Raw: raw, Traceparent: h}, nil).Events
	r.all = append(r.all, evs...)
	return evs
}

func (r *traceRun) advance(d time.Duration) []*intents.Event {
	r.now = r.now.Add(d)
	evs := r.e.Tick(r.now, nil).Events
	r.all = append(r.all, evs...)
	return evs
}

// story lists the events of r with trace, one "type intent" line each.
func (r *traceRun) story(trace string) string {
	var b strings.Builder
	for _, ev := range r.all {
		if ev.Trace == trace {
			fmt.Fprintf(&b, "%s %s", ev.Type, ev.Intent)
			if ev.Decision != nil {
				fmt.Fprintf(&b, " %s", ev.Decision.Outcome)
			}
			if ev.Release != nil {
				fmt.Fprintf(&b, " %s", ev.Release.Cause)
			}
			if ev.Notice != nil {
				fmt.Fprintf(&b, " %s", ev.Notice.Kind)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func (r *traceRun) wantStory(trace, want string) {
	r.t.Helper()
	if got := r.story(trace); got != want {
		r.t.Errorf("events of trace %s:\n%s\nwant:\n%s", trace, got, want)
	}
}

func setQ(v string) []intents.Write {
	return []intents.Write{{Path: "doc.q", Op: intents.OpSet, Value: json.RawMessage(v)}}
}

// A transaction's story carries its trace from its propose's header to the
// end: the grant, a commit sent without a trace of its own, its change and
// its release. A waiter that came with meta.traceparent keeps its own
// trace through its wait, the notice to the holder, and its decision once
// the commit frees it, although the commit's call decides it.
func TestTraceFollowsTxnAndWaiter(t *testing.T) {
	r := newTraceRun(t, Config{})
	g := r.submit(&intents.Intent{ID: fuzzID(1), Agent: "w1", Kind: intents.KindPropose,
		Writes: []intents.Write{{Path: "doc.q", Op: intents.OpSet}}}, traceparentOf(traceA))
	grant := g[len(g)-1].Decision
	r.submit(&intents.Intent{ID: fuzzID(2), Agent: "w2", Kind: intents.KindApply, OnConflict: intents.OnConflictWait,
		Writes: setQ("2"), Meta: json.RawMessage(`{"traceparent":"` + traceparentOf(traceB) + `","why":"x"}`)})
	r.submit(&intents.Intent{ID: fuzzID(3), Agent: "w1", Kind: intents.KindCommit, Txn: grant.Txn, Fence: grant.Fence,
		Writes: setQ("1")})
	r.submit(&intents.Intent{ID: fuzzID(4), Agent: "w3", Kind: intents.KindApply, Writes: setQ("3")})

	r.wantStory(traceA, "intent "+fuzzID(1)+"\ngrant "+fuzzID(1)+"\ndecision "+fuzzID(1)+" granted\n"+
		"intent "+fuzzID(3)+"\nchange "+fuzzID(3)+"\nrelease "+fuzzID(3)+" committed\ndecision "+fuzzID(3)+" committed\n")
	r.wantStory(traceB, "intent "+fuzzID(2)+"\nwait "+fuzzID(2)+"\nnotice "+fuzzID(2)+" waiting\ndecision "+fuzzID(2)+" queued\n"+
		"change "+fuzzID(2)+"\ndecision "+fuzzID(2)+" applied\n")
	r.wantStory("", "intent "+fuzzID(4)+"\nchange "+fuzzID(4)+"\ndecision "+fuzzID(4)+" applied\n")
}

// An expiry, its notices and the waiter it frees carry the traces of what
// they belong to, and so do they in an engine rebuilt from the log (the
// fold) and in one restored from a snapshot: the trace is state, not the
// call's.
func TestTraceOfTimers(t *testing.T) {
	for _, rebuild := range []string{"live", "fold", "snapshot"} {
		t.Run(rebuild, func(t *testing.T) {
			cfg := Config{LeaseWarning: 500 * time.Millisecond}
			r := newTraceRun(t, cfg)
			r.submit(&intents.Intent{ID: fuzzID(1), Agent: "w1", Kind: intents.KindPropose, LeaseMS: 2000,
				Writes: []intents.Write{{Path: "doc.q", Op: intents.OpSet}}}, traceparentOf(traceA))
			r.submit(&intents.Intent{ID: fuzzID(2), Agent: "w2", Kind: intents.KindApply, OnConflict: intents.OnConflictWait,
				WaitMS: 5000, Writes: setQ("2")}, traceparentOf(traceB))
			switch rebuild {
			case "fold":
				e, _ := New(cfg)
				for _, ev := range r.all {
					if err := e.Apply(ev); err != nil {
						t.Fatal(err)
					}
				}
				r.e = e
			case "snapshot":
				data, err := json.Marshal(r.e.Snapshot())
				if err != nil {
					t.Fatal(err)
				}
				var s Snapshot
				if err := json.Unmarshal(data, &s); err != nil {
					t.Fatal(err)
				}
				if r.e, err = Restore(cfg, &s); err != nil {
					t.Fatal(err)
				}
			}
			r.all = nil
			r.advance(1600 * time.Millisecond) // the warning
			r.advance(time.Second)             // the expiry, which frees the waiter
			r.wantStory(traceA, "notice  lease_expiring\nexpire  expired\nnotice  lease_expired\n")
			r.wantStory(traceB, "change "+fuzzID(2)+"\ndecision "+fuzzID(2)+" applied\n")
			if s := r.story(""); s != "" {
				t.Errorf("events without a trace:\n%s", s)
			}
		})
	}
}

// A resolution with a replacement traced by its meta belongs to the
// replacement's story; the escalated intent's rejection stays in its own,
// and the holder's preemption in the holder's.
func TestTraceOfResolution(t *testing.T) {
	r := newTraceRun(t, Config{})
	r.submit(&intents.Intent{ID: fuzzID(1), Agent: "w1", Kind: intents.KindPropose,
		Writes: []intents.Write{{Path: "doc.q", Op: intents.OpSet}}}, traceparentOf(traceA))
	r.submit(&intents.Intent{ID: fuzzID(2), Agent: "w2", Kind: intents.KindApply, OnConflict: intents.OnConflictEscalate,
		Writes: setQ("2")}, traceparentOf(traceB))
	res := &intents.Resolution{Escalation: fuzzID(2), Arbiter: "arb", Losers: []string{fuzzID(1), fuzzID(2)}, Rationale: "both wrong",
		Replacement: &intents.Intent{ID: fuzzID(3), Agent: "w2", Kind: intents.KindApply, Writes: setQ("3"),
			Meta: json.RawMessage(`{"traceparent":"` + traceparentOf(traceC) + `"}`)}}
	ready, err := r.e.Resolve(r.now, res, nil)
	evs := ready.Events
	if err != nil {
		t.Fatal(err)
	}
	r.all = evs
	r.wantStory(traceC, "resolve "+fuzzID(2)+"\nintent "+fuzzID(3)+"\nchange "+fuzzID(3)+"\ndecision "+fuzzID(3)+" applied\n")
	r.wantStory(traceA, "release "+fuzzID(1)+" preempted\ndecision "+fuzzID(1)+" aborted\n")
	r.wantStory(traceB, "decision "+fuzzID(2)+" rejected\n")

	// Without a trace of its own, the replacement takes the escalated
	// intent's.
	r = newTraceRun(t, Config{})
	r.submit(&intents.Intent{ID: fuzzID(1), Agent: "w1", Kind: intents.KindPropose,
		Writes: []intents.Write{{Path: "doc.q", Op: intents.OpSet}}})
	r.submit(&intents.Intent{ID: fuzzID(2), Agent: "w2", Kind: intents.KindApply, OnConflict: intents.OnConflictEscalate,
		Writes: setQ("2")}, traceparentOf(traceB))
	res.Replacement.Meta = nil
	ready, err = r.e.Resolve(r.now, res, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.all = ready.Events
	r.wantStory(traceB, "resolve "+fuzzID(2)+"\nintent "+fuzzID(3)+"\nchange "+fuzzID(3)+"\ndecision "+fuzzID(3)+" applied\n"+
		"decision "+fuzzID(2)+" rejected\n")
}

// A traceparent that cannot be used decides nothing: the intent is decided
// as without it, and its event says which traceparent and why. A good one
// in meta stands in for a bad header; a header wins over meta.
func TestTraceUnusable(t *testing.T) {
	for _, c := range []struct {
		name      string
		header    []string
		meta      string
		trace     string
		problem   string // in the intent event's trace_error; "" for none
		noProblem bool
	}{
		{name: "uppercase header", header: []string{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"},
			problem: `header traceparent = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": not a W3C traceparent: trace-id "4BF92F3577B34DA6A3CE929D0E0E4736" is not 32 lowercase hex digits`},
		{name: "zero trace", header: []string{"00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
			problem: "trace-id is all zeros"},
		{name: "two headers", header: []string{traceparentOf(traceA), traceparentOf(traceB)},
			problem: "header traceparent given 2 times"},
		{name: "meta not a string", meta: `{"traceparent":42}`,
			problem: "meta.traceparent = 42: not a W3C traceparent: not a string"},
		{name: "bad header, good meta", header: []string{"garbage"}, meta: `{"traceparent":"` + traceparentOf(traceB) + `"}`,
			trace: traceB, problem: `header traceparent = "garbage": not a W3C traceparent: 7 characters`},
		{name: "header wins", header: []string{traceparentOf(traceA)}, meta: `{"traceparent":"` + traceparentOf(traceB) + `"}`,
			trace: traceA, noProblem: true},
		{name: "later version", header: []string{"01-" + traceA + "-00f067aa0ba902b7-01-whatever"}, trace: traceA, noProblem: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newTraceRun(t, Config{})
			in := &intents.Intent{ID: fuzzID(1), Agent: "w1", Kind: intents.KindApply, Writes: setQ("1")}
			if c.meta != "" {
				in.Meta = json.RawMessage(c.meta)
			}
			evs := r.submit(in, c.header...)
			if d := evs[len(evs)-1].Decision; d == nil || d.Outcome != intents.OutcomeApplied {
				t.Fatalf("decision %+v, want applied", d)
			}
			for _, ev := range evs {
				if ev.Trace != c.trace {
					t.Errorf("%s event: trace %q, want %q", ev.Type, ev.Trace, c.trace)
				}
			}
			got := evs[0].Received.TraceError
			if c.noProblem != (got == "") || !strings.Contains(got, c.problem) {
				t.Errorf("trace_error %q, want one containing %q", got, c.problem)
			}
		})
	}
}

// An intent that does not decode is recorded with the trace of its header,
// or of its meta when that much of it reads.
func TestTraceOfInvalidIntent(t *testing.T) {
	e, _ := New(Config{})
	raw := []byte(`{"id":"` + fuzzID(1) + `","agent":"w1","kind":"apply","writes":[{"path":"a","op":"bogus"}],"meta":{"traceparent":"` + traceparentOf(traceB) + `"}}`)
	evs := e.Submit(base, Input{Agent: "w1", Raw: raw, Traceparent: nil}, nil).Events
	if len(evs) != 2 || evs[0].Received.Error == "" || evs[1].Decision.Reason != intents.ReasonInvalid {
		t.Fatalf("events %+v", evs)
	}
	for _, ev := range evs {
		if ev.Trace != traceB {
			t.Errorf("%s event: trace %q, want %q", ev.Type, ev.Trace, traceB)
		}
	}
	evs = e.Submit(base, Input{Agent: "w1", Raw: []byte(`{not json`), Traceparent: []string{traceparentOf(traceA)}}, nil).Events
	for _, ev := range evs {
		if ev.Trace != traceA {
			t.Errorf("%s event: trace %q, want %q", ev.Type, ev.Trace, traceA)
		}
	}
}
