package arbiter

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/coagent/coagent/intents"
)

// Prompt renders a case for a language model: the escalated intent, the
// transactions in flight it conflicts with and their proposes, the
// conflicts, the current values and versions of the paths involved, and
// how to answer (the answer ParseAnswer reads). The same case always
// renders the same prompt.
func Prompt(c *intents.Escalation) string {
	var b strings.Builder
	js := func(v any) string {
		data, err := json.MarshalIndent(v, "  ", "  ")
		if err != nil {
			return fmt.Sprintf("(unencodable: %v)", err)
		}
		return string(data)
	}
	fmt.Fprintf(&b, "You are an arbiter for CoAgent, which coordinates agents writing shared state.\n")
	fmt.Fprintf(&b, "An agent's intent conflicts with a transaction in flight and asked for arbitration. Decide who wins.\n\n")
	fmt.Fprintf(&b, "Case %s", c.ID)
	if !c.Deadline.IsZero() {
		fmt.Fprintf(&b, ", to be resolved by %s", c.Deadline.UTC().Format(time.RFC3339))
	}
	b.WriteString(".\n\n")
	if in := c.Escalated(); in != nil {
		fmt.Fprintf(&b, "%s%s (agent %s, priority %d):\n  %s\n\n", escalatedHead, in.ID, in.Agent, in.Priority, js(in))
	}
	if h := c.Holder; h != nil {
		fmt.Fprintf(&b, "The transaction in flight: %s of agent %s (fence %d), opened by propose %s, writing:\n  %s\n\n",
			h.Txn, h.Agent, h.Fence, h.Intent, js(h.Writes))
	}
	for _, in := range c.Proposes() {
		fmt.Fprintf(&b, "%s%s that opened a transaction in flight (agent %s, priority %d):\n  %s\n\n", proposeHead, in.ID, in.Agent, in.Priority, js(in))
	}
	if len(c.Conflicts) > 0 {
		b.WriteString("Conflicts:\n")
		for _, cf := range c.Conflicts {
			fmt.Fprintf(&b, "- %s on %s with transaction %s of agent %s\n", cf.Kind, cf.Path, cf.WithTxn, cf.WithAgent)
		}
		b.WriteString("\n")
	}
	if len(c.State) > 0 {
		b.WriteString("Current state of the paths involved:\n")
		for _, p := range slices.Sorted(maps.Keys(c.State)) {
			st := c.State[p]
			if !st.Exists {
				fmt.Fprintf(&b, "- %s: absent\n", p)
				continue
			}
			v, _ := json.Marshal(st.Value)
			fmt.Fprintf(&b, "- %s = %s (version %d)\n", p, v, st.Version)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "Answer with one JSON object and nothing else:\n")
	fmt.Fprintf(&b, "{\"winners\": [intent ids], \"losers\": [intent ids], \"rationale\": \"one sentence saying why\"}\n")
	fmt.Fprintf(&b, "The intent ids you may name: %s.\n", strings.Join(IDs(c), ", "))
	fmt.Fprintf(&b, "A losing escalated intent is rejected; a losing propose has its transaction aborted. ")
	fmt.Fprintf(&b, "The escalated intent and a transaction in flight cannot both win.\n")
	return b.String()
}

// The headings Prompt puts before each intent's JSON, which PromptIntents
// reads back.
const (
	escalatedHead = "The escalated intent "
	proposeHead   = "The propose "
)

// PromptIntents reads back the intents a Prompt shows as JSON: the
// escalated intent and the proposes in its way, in order. It is for a
// scripted model standing in for a real one in tests and demos, which has
// to find the intents in the text as a real model would; the JSON of an
// intent is read whole, so what its values say is not taken for a heading.
// A prompt that shows no escalated intent is an error.
func PromptIntents(prompt string) (escalated *intents.Intent, proposes []*intents.Intent, err error) {
	for rest := prompt; ; {
		i, head := strings.Index(rest, escalatedHead), escalatedHead
		if k := strings.Index(rest, proposeHead); k >= 0 && (i < 0 || k < i) {
			i, head = k, proposeHead
		}
		if i < 0 {
			break
		}
		rest = rest[i+len(head):]
		j := strings.Index(rest, ":\n")
		if j < 0 {
			break
		}
		rest = rest[j+2:]
		in := new(intents.Intent)
		dec := json.NewDecoder(strings.NewReader(rest))
		if err := dec.Decode(in); err != nil {
			return nil, nil, fmt.Errorf("arbiter: prompt: the intent after %q: %w", strings.TrimSpace(head), err)
		}
		rest = rest[dec.InputOffset():]
		if head == escalatedHead {
			escalated = in
		} else {
			proposes = append(proposes, in)
		}
	}
	if escalated == nil {
		return nil, nil, errors.New("arbiter: prompt: no escalated intent")
	}
	return escalated, proposes, nil
}

// ErrModelOutput is what an *AnswerError is (errors.Is): a model's answer
// that is not a resolution of its case.
var ErrModelOutput = errors.New("arbiter: model answer is not a resolution")

// AnswerError is ParseAnswer's refusal of a model's answer: what is wrong
// and the answer, quoted in the message (its first 300 characters). Err is
// the cause: the JSON decoder's error, or the *ResolutionError of an
// answer that reads but does not fit the case (so errors.Is(err,
// ErrBadResolution) holds then). errors.Is(err, ErrModelOutput) always
// holds. The message has no package prefix: the caller that asked the
// model says where it comes from ("agents: model answer is not …").
type AnswerError struct {
	Problem string
	Answer  string
	Err     error
}

func (e *AnswerError) Error() string {
	quoted := fmt.Sprintf("%.300q", e.Answer)
	if utf8.RuneCountInString(e.Answer) > 300 {
		quoted += "…"
	}
	return fmt.Sprintf("model answer is not a resolution: %s; the answer was %s", e.Problem, quoted)
}

// Is makes an *AnswerError match ErrModelOutput.
func (e *AnswerError) Is(target error) bool { return target == ErrModelOutput }

func (e *AnswerError) Unwrap() error { return e.Err }

// ParseAnswer reads a model's answer to the case c, as Prompt asks for it:
// one JSON object with "winners", "losers" (intent ids) and "rationale",
// and no other field, possibly in a code fence or among prose. The
// resolution it returns names the case and fits it (Check), save its
// Arbiter, which is left empty for the caller to sign. An answer that is
// not such an object, or does not fit the case, is an *AnswerError.
func ParseAnswer(c *intents.Escalation, out string) (*intents.Resolution, error) {
	bad := func(err error, format string, args ...any) error {
		return &AnswerError{Problem: fmt.Sprintf(format, args...), Answer: out, Err: err}
	}
	i, j := strings.Index(out, "{"), strings.LastIndex(out, "}")
	if i < 0 || j < i {
		return nil, bad(nil, "no JSON object")
	}
	var ans struct {
		Winners   []string `json:"winners"`
		Losers    []string `json:"losers"`
		Rationale string   `json:"rationale"`
	}
	dec := json.NewDecoder(strings.NewReader(out[i : j+1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ans); err != nil {
		return nil, bad(err, "%v", err)
	}
	if dec.InputOffset() != int64(j+1-i) {
		return nil, bad(nil, "more than one JSON object")
	}
	res := &intents.Resolution{Escalation: c.ID, Winners: ans.Winners, Losers: ans.Losers, Rationale: strings.TrimSpace(ans.Rationale)}
	if probs := problems(c, res, false); len(probs) > 0 {
		return nil, bad(asError(probs), "%s", strings.Join(probs, "; "))
	}
	return res, nil
}
