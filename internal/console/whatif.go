package console

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/coordinator/whatif"
	"github.com/coagent/coagent/intents"
)

// maxRulesBody bounds a what-if request: a rules file and a few numbers.
const maxRulesBody = 1 << 20

// whatifRequest is the body of POST /api/whatif.
type whatifRequest struct {
	// Rules is the rules file, a JSON object.
	Rules json.RawMessage `json:"rules"`
	// Cascade, From, Until and Top are coagent whatif's flags.
	Cascade bool   `json:"cascade,omitempty"`
	From    uint64 `json:"from,omitempty"`
	Until   uint64 `json:"until,omitempty"`
	Top     int    `json:"top,omitempty"`
}

// whatif answers POST /api/whatif: coagent whatif's report of the log
// decided again under the rules file of the request, read through
// log.query as the console reads (package whatif). It is read-only. One
// runs at a time, since it takes a core while it runs: a second is
// answered 429; a request whose client goes away stops reading the log.
func (b *backend) whatif(ctx context.Context, r *http.Request) (any, error) {
	var req whatifRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxRulesBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, badRequest("the request's body: %v", err)
	}
	if len(req.Rules) == 0 || req.Rules[0] != '{' {
		return nil, badRequest("rules: give the rules file, a JSON object")
	}
	if req.Top < 0 || req.Top > 1000 {
		return nil, badRequest("top = %d: want 0 (10) to 1000", req.Top)
	}
	select {
	case b.whatifs <- struct{}{}:
		defer func() { <-b.whatifs }()
	default:
		return nil, &httpError{status: http.StatusTooManyRequests, msg: "a what-if is running already: try again when it is done"}
	}
	rep, err := whatif.RunRemote(func(from uint64) ([]*intents.Event, uint64, error) {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		return b.logPage(ctx, logQuery{From: from})
	}, whatif.Options{Rules: req.Rules, Cascade: req.Cascade, From: req.From, Until: req.Until, Top: req.Top})
	switch {
	case rep == nil:
		var re *rules.Error
		if errors.As(err, &re) {
			return nil, badRequest("%v", err)
		}
		return nil, err
	case err != nil:
		// Non-determinism: the report, and what went wrong.
		return map[string]any{"report": rep, "error": err.Error()}, nil
	}
	return map[string]any{"report": rep}, nil
}
