package agents

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
)

// Model is a language model as an arbiter needs it: a prompt in, a
// completion out. Wrap any client in it.
type Model interface {
	Complete(ctx context.Context, prompt string) (string, error)
}

// ModelArbiter returns a Decide that asks m: it renders the case with
// arbiter.Prompt and reads the answer with arbiter.ParseAnswer — one JSON
// object {"winners": [...], "losers": [...], "rationale": "..."}, possibly
// in a code fence or among prose. An answer that is not such an object,
// names ids the case does not, or otherwise does not fit the case is an
// error that quotes the answer and wraps arbiter.ErrModelOutput (and
// arbiter.ErrBadResolution where the answer reads but does not fit);
// RunArbiter then hands the case back, so that it comes again and the
// model is asked again. An error of the model is returned wrapped. The
// resolution's Arbiter is left for RunArbiter to fill.
func ModelArbiter(m Model) Decide {
	return func(ctx context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		out, err := m.Complete(ctx, arbiter.Prompt(c))
		if err != nil {
			return nil, fmt.Errorf("agents: model: %w", err)
		}
		res, err := arbiter.ParseAnswer(c, out)
		if err != nil {
			return nil, fmt.Errorf("agents: %w", err)
		}
		return res, nil
	}
}

// ScriptedModel is a deterministic Model for tests: it answers with Func if
// set, and otherwise with Replies in turn, then ErrScriptEnded. It records
// the prompts it was given. It is safe for concurrent use; do not copy it
// once used.
type ScriptedModel struct {
	// Replies are the answers, one per call, in order.
	Replies []string
	// Func, if set, answers instead of Replies.
	Func func(prompt string) (string, error)

	mu      sync.Mutex
	prompts []string
}

var _ Model = (*ScriptedModel)(nil)

// ErrScriptEnded is returned by a ScriptedModel asked more often than it
// has replies.
var ErrScriptEnded = errors.New("agents: scripted model has no more replies")

// Complete answers the next reply of the script; it fails if ctx has
// ended.
func (s *ScriptedModel) Complete(ctx context.Context, prompt string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.mu.Lock()
	n := len(s.prompts)
	s.prompts = append(s.prompts, prompt)
	s.mu.Unlock()
	if s.Func != nil {
		return s.Func(prompt)
	}
	if n >= len(s.Replies) {
		return "", fmt.Errorf("%w (%d given)", ErrScriptEnded, len(s.Replies))
	}
	return s.Replies[n], nil
}

// Prompts returns the prompts the model was given, in order.
func (s *ScriptedModel) Prompts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.prompts)
}
