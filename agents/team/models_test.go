package team

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
)

func ask(t *testing.T, m agents.Model, prompt string) string {
	t.Helper()
	out, err := m.Complete(context.Background(), prompt)
	if err != nil {
		t.Fatalf("complete %q: %v", prompt, err)
	}
	return out
}

// The scripted models answer as a function of the seed and the prompt.
func TestScriptedIsAFunctionOfSeedAndPrompt(t *testing.T) {
	sec := sectionPrompt(Title, "Risks", "Incident reviews of lost updates", "Incident reviews of lost updates finds that teams lose work.")
	a, b, c := ask(t, Scripted(7).Writer, sec), ask(t, Scripted(7).Writer, sec), ask(t, Scripted(8).Writer, sec)
	if a != b {
		t.Errorf("same seed, same prompt, two answers:\n%s\n%s", a, b)
	}
	if a == c {
		t.Errorf("seeds 7 and 8 wrote the same section: %s", a)
	}
	if !strings.Contains(a, `As "Incident reviews of lost updates" shows, teams lose work.`) || !strings.Contains(a, "the risks") {
		t.Errorf("the section does not cite its source or name itself: %s", a)
	}
	intro1 := ask(t, Scripted(7).Writer, introPrompt("writer-1", Title, draftIntro, []string{"Background", "Findings"}))
	intro2 := ask(t, Scripted(7).Writer, introPrompt("writer-2", Title, draftIntro, []string{"Background", "Findings"}))
	if intro1 == intro2 || !strings.HasSuffix(intro1, "The report covers background, findings.") {
		t.Errorf("intros:\n%s\n%s", intro1, intro2)
	}
	sum := ask(t, Scripted(7).Researcher, summaryPrompt(Title, "Event sourcing in production"))
	if !strings.HasPrefix(sum, "Event sourcing in production finds that ") {
		t.Errorf("summary: %s", sum)
	}
	review := reviewPrompt(Title, []material{{ID: "m1", Title: "A", Summary: "a"}, {ID: "m2", Title: "B", Summary: "b"}})
	id, why, ok := strings.Cut(ask(t, Scripted(7).Editor, review), ": ")
	if !ok || (id != "m1" && id != "m2") || why == "" {
		t.Errorf("review answer %q", id+": "+why)
	}
	if _, err := Scripted(7).Writer.Complete(context.Background(), "write something"); err == nil {
		t.Error("the scripted writer answered a prompt it cannot read")
	}
}

// clashCase is the case the coordinator sends when w2's rewrite escalates
// against w1's transaction on the intro.
func clashCase(holderDraft, rewrite string) *intents.Escalation {
	value, _ := json.Marshal(rewrite)
	meta, _ := json.Marshal(map[string]string{"draft": holderDraft})
	propose := &intents.Intent{ID: "01JD00000000000000000000P1", Agent: "writer-1", Kind: intents.KindPropose,
		Writes: []intents.Write{{Path: "report.intro", Op: intents.OpSet}}, LeaseMS: 60000, Meta: meta}
	esc := &intents.Intent{ID: "01JD00000000000000000000E1", Agent: "writer-2", Kind: intents.KindApply,
		OnConflict: intents.OnConflictEscalate, Writes: []intents.Write{{Path: "report.intro", Op: intents.OpSet, Value: value}}}
	return &intents.Escalation{ID: esc.ID, Intents: []*intents.Intent{esc, propose},
		Holder:    &intents.Holder{Txn: "01JD00000000000000000000T1", Agent: "writer-1", Fence: 1, Intent: propose.ID, Writes: propose.Writes},
		State:     map[string]intents.PathState{"report.intro": {Exists: true, Value: draftIntro, Version: 1}},
		Conflicts: []intents.Conflict{{Path: "report.intro", Kind: intents.ConflictWriteWrite, WithTxn: "01JD00000000000000000000T1", WithAgent: "writer-1"}},
		Deadline:  time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// The scripted arbiter reads both texts from the case prompt and keeps the
// longer; the seed breaks a tie.
func TestScriptedArbiterKeepsTheLongerRewrite(t *testing.T) {
	for _, tc := range []struct {
		name           string
		holder, newer  string
		seed           uint64
		winner, loser  string
		rationaleWords string
	}{
		{"holder longer", "a long and careful intro, with \"quotes\" and The propose in it", "short", 1, "01JD00000000000000000000P1", "01JD00000000000000000000E1", "writer-1's rewrite says more"},
		{"rewrite longer", "short", "a much longer rewrite of the intro", 1, "01JD00000000000000000000E1", "01JD00000000000000000000P1", "writer-2's rewrite says more"},
		{"tie, even seed", "same", "same", 2, "01JD00000000000000000000E1", "01JD00000000000000000000P1", "by lot, writer-2's"},
		{"tie, odd seed", "same", "same", 3, "01JD00000000000000000000P1", "01JD00000000000000000000E1", "by lot, writer-1's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clashCase(tc.holder, tc.newer)
			res, err := agents.ModelArbiter(Scripted(tc.seed).Arbiter)(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Winners) != 1 || res.Winners[0] != tc.winner || len(res.Losers) != 1 || res.Losers[0] != tc.loser ||
				!strings.Contains(res.Rationale, tc.rationaleWords) {
				t.Errorf("resolution %+v", res)
			}
		})
	}
}

func TestStatsCountsEachDecisionOnce(t *testing.T) {
	var s Stats
	q := &intents.Decision{Intent: "a", Outcome: intents.OutcomeQueued,
		Conflicts: []intents.Conflict{{Path: "m.x", Kind: intents.ConflictReadWrite, WithTxn: "T"}}}
	ap := &intents.Decision{Intent: "a", Outcome: intents.OutcomeApplied, MergedWith: []string{"T2"}}
	rej := &intents.Decision{Intent: "b", Outcome: intents.OutcomeRejected, Reason: intents.ReasonPreconditionFailed}
	for _, d := range []*intents.Decision{q, q, ap, rej, {Intent: "b", Outcome: intents.OutcomeRejected, Duplicate: true}} {
		s.AddDecision(d)
	}
	s.AddEvent(&intents.Event{Type: intents.EventNotice, Notice: &intents.Notice{Kind: intents.NoticeWaiting}})
	s.AddEvent(&intents.Event{Type: intents.EventDecision, Decision: ap})
	if s.Intents != 2 || s.Decisions != 3 || s.Waits != 1 || s.Merges != 1 || s.Notices != 1 || s.Events != 2 ||
		s.Outcomes[intents.OutcomeApplied] != 1 || s.Reasons[intents.ReasonPreconditionFailed] != 1 ||
		s.Conflicts[intents.ConflictReadWrite] != 1 {
		t.Errorf("stats %+v", s)
	}
	var o Stats
	for _, d := range []*intents.Decision{rej, ap, q} {
		o.AddDecision(d)
	}
	if !s.SameDecisions(&o) {
		t.Errorf("the same decisions in another order compare unequal:\n%+v\n%+v", s, o)
	}
	// The recorded decision sent again (duplicate) is how an agent that
	// asked again may first learn of it: it counts, once.
	var first Stats
	first.AddDecision(&intents.Decision{Intent: "x", Outcome: intents.OutcomeRejected, Reason: intents.ReasonArbiterRejected, Duplicate: true})
	if first.Decisions != 1 || first.Reasons[intents.ReasonArbiterRejected] != 1 {
		t.Errorf("a first duplicate is not counted: %+v", first)
	}
	o.AddDecision(&intents.Decision{Intent: "c", Outcome: intents.OutcomeApplied})
	if s.SameDecisions(&o) {
		t.Error("different decisions compare equal")
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	if p := Percentile(ds, 0.5); p != 5 {
		t.Errorf("p50 = %d", p)
	}
	if p := Percentile(ds, 0.99); p != 10 {
		t.Errorf("p99 = %d", p)
	}
	if p := Percentile(nil, 0.5); p != 0 {
		t.Errorf("p50 of nothing = %d", p)
	}
	if ds[0] != 5 {
		t.Error("Percentile sorted its argument")
	}
}
