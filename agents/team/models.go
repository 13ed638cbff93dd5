package team

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"strings"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
)

// Models are the language models behind the roles: a prompt in, a
// completion out. A nil field gets the scripted model of Scripted for the
// run's seed, so the zero value runs offline; set a field to plug a real
// model in behind a role. The prompts are plain text and say what answer
// they want.
type Models struct {
	// Researcher summarizes each source in one sentence.
	Researcher agents.Model
	// Writer writes a section from its source, and rewrites the intro.
	Writer agents.Model
	// Editor names the weakest source, to be demoted.
	Editor agents.Model
	// Arbiter settles the rewrite clash (see arbiter.Prompt and
	// arbiter.ParseAnswer for the prompt and the answer it wants).
	Arbiter agents.Model
}

// Scripted returns deterministic models for seed: each answer is a function
// of the seed and the prompt alone, so a run with the same seed writes the
// same report, whoever wins the races along the way. They read the prompts
// the way a real model would have to, from the text, and follow a fixed
// rule where a model would use judgement: the editor demotes a source
// picked by the seed, the arbiter keeps the longer rewrite (the seed breaks
// a tie).
func Scripted(seed uint64) Models {
	return Models{
		Researcher: &agents.ScriptedModel{Func: func(p string) (string, error) { return scriptResearcher(seed, p) }},
		Writer:     &agents.ScriptedModel{Func: func(p string) (string, error) { return scriptWriter(seed, p) }},
		Editor:     &agents.ScriptedModel{Func: func(p string) (string, error) { return scriptEditor(seed, p) }},
		Arbiter:    &agents.ScriptedModel{Func: func(p string) (string, error) { return scriptArbiter(seed, p) }},
	}
}

func (m *Models) fill(seed uint64) {
	s := Scripted(seed)
	if m.Researcher == nil {
		m.Researcher = s.Researcher
	}
	if m.Writer == nil {
		m.Writer = s.Writer
	}
	if m.Editor == nil {
		m.Editor = s.Editor
	}
	if m.Arbiter == nil {
		m.Arbiter = s.Arbiter
	}
}

// complete asks m and trims the answer; an empty answer is an error.
func complete(ctx context.Context, m agents.Model, prompt string) (string, error) {
	out, err := m.Complete(ctx, prompt)
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	out = strings.TrimSpace(out)
	if out == "" {
		return "", fmt.Errorf("model: empty answer to %q", intents.Clip(prompt, 80))
	}
	return out, nil
}

// The prompts. The scripted models parse them back, so their shapes are
// fixed by the patterns below.

func summaryPrompt(topic, source string) string {
	return fmt.Sprintf("You are the researcher of a content team writing a report titled %q.\n"+
		"Summarize the source %q in one sentence: what does it find?\n"+
		"Answer with the sentence only.\n", topic, source)
}

func sectionPrompt(topic, section, source, summary string) string {
	return fmt.Sprintf("You are a writer on a content team writing a report titled %q.\n"+
		"Write one paragraph for the section %q.\n"+
		"Cite the source %q, which the researcher summarized as: %s\n"+
		"Answer with the paragraph only.\n", topic, section, source, summary)
}

func introPrompt(writer, topic, draft string, sections []string) string {
	return fmt.Sprintf("You are %s, a writer on a content team writing a report titled %q.\n"+
		"Rewrite the introduction. The current draft: %s\n"+
		"The sections that follow: %s.\n"+
		"Answer with the paragraph only.\n", writer, topic, draft, strings.Join(sections, "; "))
}

func reviewPrompt(topic string, sources []material) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are the editor of a content team writing a report titled %q.\n", topic)
	b.WriteString("Review the sources the writers cite and name the one whose claim is weakest; it will be demoted.\n")
	for _, m := range sources {
		fmt.Fprintf(&b, "- %s: %q: %s\n", m.ID, m.Title, m.Summary)
	}
	b.WriteString("Answer with the source's id, a colon and one sentence saying why.\n")
	return b.String()
}

var (
	reSource  = regexp.MustCompile(`the source "([^"]*)"`)
	reSection = regexp.MustCompile(`for the section "([^"]*)"`)
	reSummary = regexp.MustCompile(`summarized as: (.*)\n`)
	reListed  = regexp.MustCompile(`(?m)^- ([A-Za-z0-9_-]+): "([^"]*)"`)
	reFollow  = regexp.MustCompile(`The sections that follow: (.*)\.\n`)
)

// rng is the scripted models' randomness: a function of the seed and the
// prompt.
func rng(seed uint64, prompt string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(prompt))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

func pick(r *rand.Rand, xs []string) string { return xs[r.IntN(len(xs))] }

// picks returns n distinct elements of xs in a random order.
func picks(r *rand.Rand, xs []string, n int) []string {
	idx := r.Perm(len(xs))[:min(n, len(xs))]
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = xs[j]
	}
	return out
}

var findings = []string{
	"agents that declare what they read and write lose no updates under contention",
	"most conflicts between agents touch fewer than one path in twenty",
	"short leases keep a stalled agent from blocking its team for long",
	"an append-only log makes every disputed edit easy to audit",
	"preconditions turn silent overwrites into clear, retryable rejections",
	"an arbiter settles the few real clashes within seconds",
	"disjoint edits of one document can almost always be merged automatically",
	"teams spend less time on coordination once claims are explicit",
}

func scriptResearcher(seed uint64, prompt string) (string, error) {
	m := reSource.FindStringSubmatch(prompt)
	if m == nil {
		return "", fmt.Errorf("scripted researcher: no source in the prompt")
	}
	r := rng(seed, prompt)
	return fmt.Sprintf("%s finds that %s.", m[1], pick(r, findings)), nil
}

var (
	openers = []string{
		"This section sets out the %s.",
		"Here we turn to the %s.",
		"We now look at the %s.",
		"The %s deserve a closer look.",
	}
	claims = []string{
		"A team of agents needs one place where conflicting edits are decided, and only one.",
		"Declaring reads and writes up front lets a coordinator merge what is disjoint and hold back what is not.",
		"Every decision is logged, so any past state can be rebuilt and audited.",
		"Short transactions with leases keep a slow agent from holding the others up.",
		"A precondition turns a race into a clear, retryable rejection instead of a lost update.",
		"Waiting on a transaction is cheap when the holder is told and can finish quickly.",
		"The rare clash that rules cannot settle goes to an arbiter, human or model.",
		"Agents stay simple: they say what they want and learn what happened.",
		"Deciding an intent costs microseconds; moving it over the bus costs more.",
		"Replaying the log gives the same state, byte for byte, which makes incidents easy to study.",
	}
	closers = []string{
		"The rest of the report builds on this.",
		"We come back to this in the outlook.",
		"This shapes the recommendations that follow.",
		"",
	}
	intros = []string{
		"Teams of language-model agents now write reports, code and plans together, on one shared state.",
		"When several agents edit the same document, someone has to decide whose edit lands.",
		"Shared state is where agent teams gain their speed, and where they lose their work.",
	}
)

func scriptWriter(seed uint64, prompt string) (string, error) {
	r := rng(seed, prompt)
	if strings.Contains(prompt, "Rewrite the introduction") {
		var b strings.Builder
		b.WriteString(pick(r, intros))
		for _, s := range picks(r, claims, 1+r.IntN(3)) {
			b.WriteString(" " + s)
		}
		if m := reFollow.FindStringSubmatch(prompt); m != nil {
			fmt.Fprintf(&b, " The report covers %s.", strings.ToLower(strings.ReplaceAll(m[1], "; ", ", ")))
		}
		return b.String(), nil
	}
	sec, src, sum := reSection.FindStringSubmatch(prompt), reSource.FindStringSubmatch(prompt), reSummary.FindStringSubmatch(prompt)
	if sec == nil || src == nil || sum == nil {
		return "", fmt.Errorf("scripted writer: the prompt names no section, source or summary")
	}
	var b strings.Builder
	fmt.Fprintf(&b, pick(r, openers), strings.ToLower(sec[1]))
	for _, s := range picks(r, claims, 1+r.IntN(2)) {
		b.WriteString(" " + s)
	}
	finding := strings.TrimSuffix(strings.TrimPrefix(sum[1], src[1]+" finds that "), ".")
	fmt.Fprintf(&b, " As %q shows, %s.", src[1], finding)
	if c := pick(r, closers); c != "" {
		b.WriteString(" " + c)
	}
	return b.String(), nil
}

var doubts = []string{
	"its sample is too small to carry the claim",
	"it reports a single team and generalizes from it",
	"its numbers cannot be reproduced from what it publishes",
	"it is a vendor's own measurement",
}

func scriptEditor(seed uint64, prompt string) (string, error) {
	listed := reListed.FindAllStringSubmatch(prompt, -1)
	if len(listed) == 0 {
		return "", fmt.Errorf("scripted editor: no sources listed in the prompt")
	}
	r := rng(seed, prompt)
	m := listed[r.IntN(len(listed))]
	return fmt.Sprintf("%s: %s.", m[1], pick(r, doubts)), nil
}

// scriptArbiter reads the case prompt of arbiter.Prompt: the escalated
// intent and the proposes in its way, each as JSON after its heading. It
// keeps the longer text; the seed breaks a tie.
func scriptArbiter(seed uint64, prompt string) (string, error) {
	type entry struct {
		in   *intents.Intent
		text string
	}
	escIn, proposes, err := arbiter.PromptIntents(prompt)
	if err != nil {
		return "", fmt.Errorf("scripted arbiter: %w", err)
	}
	if len(proposes) == 0 {
		return "", fmt.Errorf("scripted arbiter: the case names no transaction in flight")
	}
	escalated := &entry{in: escIn, text: proposedText(escIn)}
	holder := &entry{in: proposes[0], text: proposedText(proposes[0])}
	win, lose := escalated, holder
	if n, m := len(holder.text), len(escalated.text); n > m || n == m && seed%2 == 1 {
		win, lose = holder, escalated
	}
	ans := struct {
		Winners   []string `json:"winners"`
		Losers    []string `json:"losers"`
		Rationale string   `json:"rationale"`
	}{[]string{win.in.ID}, []string{lose.in.ID}, fmt.Sprintf("%s's rewrite says more (%d characters against %d)",
		win.in.Agent, len(win.text), len(lose.text))}
	if len(win.text) == len(lose.text) {
		ans.Rationale = fmt.Sprintf("the rewrites are as long as each other; by lot, %s's", win.in.Agent)
	}
	out, err := json.Marshal(ans)
	return string(out), err
}

// proposedText is the text an intent of the clash would write: the value of
// its first set, or for a propose (whose writes carry no values) the draft
// it shows in its meta.
func proposedText(in *intents.Intent) string {
	for _, w := range in.Writes {
		var s string
		if w.Op == intents.OpSet && json.Unmarshal(w.Value, &s) == nil {
			return s
		}
	}
	var meta struct {
		Draft string `json:"draft"`
	}
	json.Unmarshal(in.Meta, &meta)
	return meta.Draft
}
