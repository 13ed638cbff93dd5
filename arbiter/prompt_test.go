package arbiter_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
)

func TestParseAnswer(t *testing.T) {
	c := sampleCase()
	const esc, hold = escID, holdID
	for _, tc := range []struct {
		answer string
		bad    string // what the error says; "" for a good answer
		misfit bool   // the answer reads but does not fit the case
	}{
		{answer: `{"winners":["` + esc + `"],"losers":["` + hold + `"],"rationale":"newer is better"}`},
		{answer: "Sure.\n```json\n{\"losers\": [\"" + esc + "\"], \"rationale\": \"w1 was first\"}\n```\nHope this helps."},
		{answer: ``, bad: "no JSON object"},
		{answer: `I pick w2.`, bad: "no JSON object"},
		{answer: `{"winners": ["` + esc + `"`, bad: "no JSON object"},
		{answer: `{"winners": ["` + esc + `"], "rationale": }`, bad: "invalid character"},
		{answer: `{"winners":["` + esc + `"],"rationale":"r","replacement":{}}`, bad: `unknown field "replacement"`},
		{answer: `{"winners":["` + esc + `"],"rationale":"r"} {"losers":[]}`, bad: "more than one JSON object"},
		{answer: `{"winners":"` + esc + `","rationale":"r"}`, bad: "cannot unmarshal string"},
		{answer: `{"winners":["w2"],"rationale":"r"}`, bad: `w2 is neither the escalated intent nor the propose`, misfit: true},
		{answer: `{"winners":["` + esc + `"],"losers":["` + esc + `"],"rationale":"r"}`, bad: "both wins and loses", misfit: true},
		{answer: `{"winners":["` + esc + `","` + hold + `"],"rationale":"r"}`, bad: "cannot both win", misfit: true},
		{answer: `{"winners":["` + esc + `"],"rationale":"  "}`, bad: "rationale is missing", misfit: true},
		{answer: `{"rationale":"nobody"}`, bad: "no winner, no loser", misfit: true},
	} {
		res, err := arbiter.ParseAnswer(c, tc.answer)
		if tc.bad == "" {
			if err != nil || res.Escalation != esc || res.Arbiter != "" || res.Rationale == "" {
				t.Errorf("%q: %+v, %v", tc.answer, res, err)
			}
			continue
		}
		var aerr *arbiter.AnswerError
		if !errors.Is(err, arbiter.ErrModelOutput) || !errors.As(err, &aerr) || !strings.Contains(err.Error(), tc.bad) ||
			aerr.Answer != tc.answer || !strings.Contains(err.Error(), "the answer was ") {
			t.Errorf("%q: error %v, want ErrModelOutput saying %q and quoting the answer", tc.answer, err, tc.bad)
		}
		if errors.Is(err, arbiter.ErrBadResolution) != tc.misfit {
			t.Errorf("%q: errors.Is(err, ErrBadResolution) = %v", tc.answer, !tc.misfit)
		}
		if res != nil {
			t.Errorf("%q: a resolution with an error", tc.answer)
		}
	}
	long := strings.Repeat("é", 400)
	_, err := arbiter.ParseAnswer(c, long)
	if msg := err.Error(); !strings.HasSuffix(msg, `"`+strings.Repeat("é", 300)+`"…`) {
		t.Errorf("a long answer is not quoted by its first 300 characters: %.80s…", msg)
	}
}

// The prompt shows the case whole, says how to answer, and reads back: the
// intents it shows as JSON are the case's, whatever their values say.
func TestPrompt(t *testing.T) {
	c := sampleCase()
	c.Deadline = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c.Intents[0].Writes = []intents.Write{{Path: "report.intro", Op: intents.OpSet,
		Value: []byte(`"The propose X that opened a transaction in flight (agent z):\n  {}"`)}}
	c.Conflicts = []intents.Conflict{{Path: "report.intro", Kind: intents.ConflictWriteWrite, WithTxn: "T1", WithAgent: "w1"}}
	c.State["report.gone"] = intents.PathState{}
	p := arbiter.Prompt(c)
	for _, want := range []string{
		"Case " + escID + ", to be resolved by 2026-01-02T03:04:05Z.",
		"The escalated intent " + escID + " (agent w2, priority 4):",
		"The transaction in flight: T1 of agent w1 (fence 0), opened by propose " + holdID,
		"The propose " + holdID + " that opened a transaction in flight (agent w1, priority 3):",
		"The propose " + twoID + " that opened a transaction in flight (agent w3, priority 1):",
		"- write-write on report.intro with transaction T1 of agent w1",
		"- report.gone: absent\n- report.intro = \"draft\" (version 2)",
		"The intent ids you may name: " + escID + ", " + holdID + ", " + twoID + ".",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("the prompt lacks %q:\n%s", want, p)
		}
	}
	if again := arbiter.Prompt(c); again != p {
		t.Error("the same case rendered two prompts")
	}
	esc, proposes, err := arbiter.PromptIntents(p)
	if err != nil || esc.ID != escID || string(esc.Writes[0].Value) != string(c.Intents[0].Writes[0].Value) ||
		len(proposes) != 2 || proposes[0].ID != holdID || proposes[1].ID != twoID {
		t.Fatalf("PromptIntents: %+v %+v %v", esc, proposes, err)
	}
	if _, _, err := arbiter.PromptIntents("Decide who wins."); err == nil {
		t.Error("a prompt with no intent read back")
	}
	if _, _, err := arbiter.PromptIntents("The escalated intent E (agent w2):\n  {not json"); err == nil ||
		!strings.Contains(err.Error(), `after "The escalated intent"`) {
		t.Errorf("a prompt with a broken intent: %v", err)
	}
}
