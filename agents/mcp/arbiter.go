package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/oklog/ulid/v2"
)

// arbiterBridge puts a model behind agents.RunArbiter: the queue is served
// by the SDK (one case at a time, kept alive while in hand, handed back
// when not settled), and its Decide hands each case to the next_case call
// of a session and waits for that session's resolve.
type arbiterBridge struct {
	s     *Server
	start sync.Once
	cases chan *heldCase // Decide offers a case here; next_case takes it

	mu   sync.Mutex
	held map[string]*heldCase // by escalation id
}

// heldCase is a case a session holds: answer takes its resolution, and
// gone is closed when the session lets go of it (it ended, or the case
// passed its deadline).
type heldCase struct {
	c       *intents.Escalation
	session *sdk.ServerSession
	from    uint64 // the log's revision when the case was taken
	answer  chan *intents.Resolution
	gone    chan struct{}
	once    sync.Once
}

func (h *heldCase) drop() { h.once.Do(func() { close(h.gone) }) }

// offerWait is how long a case pulled from the queue waits for a
// next_case to take it before it goes back to the queue, for another
// arbiter or a later call.
const offerWait = 2 * time.Second

func newArbiterBridge(s *Server) *arbiterBridge {
	return &arbiterBridge{s: s, cases: make(chan *heldCase), held: map[string]*heldCase{}}
}

// run starts serving the queue, once, for as long as the server lives.
func (b *arbiterBridge) run() {
	b.start.Do(func() {
		b.s.workers.Go(func() {
			err := agents.RunArbiter(b.s.done, b.s.nc, b.s.c.Name(), b.decide,
				agents.WithPrefix(b.s.opts.Prefix), agents.WithLogger(b.s.log), agents.WithRetryDelay(200*time.Millisecond))
			if err != nil {
				b.s.log.Error("serving the arbiter queue stopped", "err", err)
			}
		})
	})
}

// decide is the Decide of RunArbiter: it waits for a session to take the
// case and resolve it.
func (b *arbiterBridge) decide(ctx context.Context, c *intents.Escalation) (*intents.Resolution, error) {
	h := &heldCase{c: c, answer: make(chan *intents.Resolution, 1), gone: make(chan struct{})}
	offer := time.NewTimer(offerWait)
	defer offer.Stop()
	select {
	case b.cases <- h:
	case <-offer.C:
		return nil, errors.New("mcp: no session asked for a case")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() {
		b.mu.Lock()
		delete(b.held, c.ID)
		b.mu.Unlock()
	}()
	select {
	case res := <-h.answer:
		return res, nil
	case <-h.gone:
		return nil, errors.New("mcp: the session holding the case ended")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// abandon hands back the cases session ss held.
func (b *arbiterBridge) abandon(ss *sdk.ServerSession) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, h := range b.held {
		if h.session == ss {
			h.drop()
			delete(b.held, id)
		}
	}
}

// NextCaseInput is the input of next_case.
type NextCaseInput struct {
	WaitMS int64 `json:"wait_ms,omitempty" jsonschema:"how long to wait for a case, in milliseconds (default 10000, at most 60000)"`
}

// CaseIntent is one intent of a case.
type CaseIntent struct {
	ID     string    `json:"id"`
	Agent  string    `json:"agent"`
	Kind   string    `json:"kind"`
	Action string    `json:"action,omitempty"`
	Writes []WriteOp `json:"writes,omitempty"`
	Pre    []string  `json:"pre,omitempty"`
	Post   []string  `json:"post,omitempty"`
	// Escalated marks the intent that was escalated; the others opened
	// the transactions it conflicts with.
	Escalated bool `json:"escalated,omitempty"`
}

// Case is an escalation as next_case shows it.
type Case struct {
	ID        string                       `json:"id" jsonschema:"the case id (the escalated intent's id): pass it to resolve"`
	Intents   []CaseIntent                 `json:"intents" jsonschema:"the escalated intent and the transactions it conflicts with"`
	Holder    *intents.Holder              `json:"holder,omitempty" jsonschema:"the transaction in flight the escalated intent conflicts with"`
	State     map[string]intents.PathState `json:"state" jsonschema:"current values and versions of the paths involved"`
	Conflicts []Conflict                   `json:"conflicts"`
	Deadline  time.Time                    `json:"deadline" jsonschema:"resolve before this, or the coordinator's fallback settles the case"`
	Redacted  []string                     `json:"redacted,omitempty"`
}

// NextCaseOutput is the output of next_case.
type NextCaseOutput struct {
	Case *Case  `json:"case,omitempty" jsonschema:"the case to settle, absent when none came in time"`
	Next string `json:"next" jsonschema:"what to do next"`
}

// ResolveInput is the input of resolve.
type ResolveInput struct {
	Case        string          `json:"case" jsonschema:"the case id next_case returned"`
	Winners     []string        `json:"winners,omitempty" jsonschema:"ids of the intents that win (applied or kept)"`
	Losers      []string        `json:"losers,omitempty" jsonschema:"ids of the intents that lose (rejected, reason arbiter_rejected)"`
	Replacement *intents.Intent `json:"replacement,omitempty" jsonschema:"instead of winners: one apply intent of your own that merges the conflicting writes (its id, agent and kind are filled in when left out)"`
	Rationale   string          `json:"rationale" jsonschema:"one sentence on why, told to the agents involved"`
}

// ResolveOutput is the output of resolve.
type ResolveOutput struct {
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	Next   string `json:"next,omitempty"`
}

func (s *Server) addArbiterTools() {
	addTool(s, &sdk.Tool{Name: "next_case", Title: "Take the next arbiter case",
		Description: "As an arbiter: take the next escalated conflict to settle, waiting up to wait_ms for one. " +
			"The case is yours until you resolve it or its deadline passes; read its intents and state, then call resolve."}, s.nextCase)
	addTool(s, &sdk.Tool{Name: "resolve", Title: "Settle an arbiter case",
		Description: "As an arbiter: settle a case from next_case by naming the winning intents and the losing ones " +
			"(every intent of the case is one or the other), or a replacement intent that merges them, with a one-sentence rationale."}, s.resolve)
}

func (s *Server) nextCase(ctx context.Context, req *sdk.CallToolRequest, in NextCaseInput) (*sdk.CallToolResult, *NextCaseOutput, error) {
	wait := 10 * time.Second
	if in.WaitMS > 0 {
		wait = min(time.Duration(in.WaitMS)*time.Millisecond, time.Minute)
	}
	var from uint64
	if st, err := s.c.Read(ctx); err == nil {
		from = st.Rev
	}
	s.arb.run()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case h := <-s.arb.cases:
		h.session, h.from = req.Session, from
		s.arb.mu.Lock()
		s.arb.held[h.c.ID] = h
		s.arb.mu.Unlock()
		out := &NextCaseOutput{Case: caseOf(h.c), Next: fmt.Sprintf("Settle case %s with resolve before %s.", h.c.ID, h.c.Deadline.Format(time.RFC3339))}
		return toolResult(fmt.Sprintf("case %s: %d intents in conflict. %s", h.c.ID, len(h.c.Intents), out.Next), out), out, nil
	case <-t.C:
		out := &NextCaseOutput{Next: "No case is waiting: call next_case again later."}
		return toolResult("no case: "+out.Next, out), out, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

func caseOf(c *intents.Escalation) *Case {
	// Never null where the output schema says an array or an object.
	out := &Case{ID: c.ID, Holder: c.Holder, State: c.State, Deadline: c.Deadline, Redacted: c.Redacted,
		Intents: []CaseIntent{}, Conflicts: []Conflict{}}
	if out.State == nil {
		out.State = map[string]intents.PathState{}
	}
	for _, in := range c.Intents {
		if in == nil {
			continue
		}
		ci := CaseIntent{ID: in.ID, Agent: in.Agent, Kind: string(in.Kind), Action: in.Action,
			Pre: in.Pre, Post: in.Post, Escalated: in.ID == c.ID}
		for _, w := range in.Writes {
			op := WriteOp{Path: w.Path, Op: string(w.Op)}
			if len(w.Value) > 0 {
				var v any
				if err := json.Unmarshal(w.Value, &v); err == nil {
					op.Value = v
				}
			}
			ci.Writes = append(ci.Writes, op)
		}
		out.Intents = append(out.Intents, ci)
	}
	for _, k := range c.Conflicts {
		out.Conflicts = append(out.Conflicts, Conflict{Path: k.Path, Kind: string(k.Kind), WithTxn: k.WithTxn, WithAgent: k.WithAgent})
	}
	return out
}

func (s *Server) resolve(ctx context.Context, req *sdk.CallToolRequest, in ResolveInput) (*sdk.CallToolResult, *ResolveOutput, error) {
	s.arb.mu.Lock()
	h := s.arb.held[in.Case]
	s.arb.mu.Unlock()
	refuse := func(reason intents.Reason, detail, next string) (*sdk.CallToolResult, *ResolveOutput, error) {
		out := &ResolveOutput{Reason: string(reason), Detail: detail, Next: next}
		return toolResult(fmt.Sprintf("resolve %s: refused (%s): %s %s", in.Case, reason, detail, next), out), out, nil
	}
	if h == nil || h.session != req.Session {
		return refuse(intents.ReasonInvalid, fmt.Sprintf("case = %q: this session holds no such case", in.Case),
			"Take a case with next_case first; a case you held may have passed its deadline.")
	}
	res := &intents.Resolution{Escalation: h.c.ID, Arbiter: s.c.Name(), Winners: in.Winners, Losers: in.Losers,
		Replacement: in.Replacement, Rationale: in.Rationale}
	if r := res.Replacement; r != nil {
		if r.ID == "" {
			r.ID = ulid.Make().String()
		}
		if r.Agent == "" {
			r.Agent = s.c.Name()
		}
		if r.Kind == "" {
			r.Kind = intents.KindApply
		}
	}
	if err := arbiter.Check(h.c, res); err != nil {
		return refuse(intents.ReasonInvalid, err.Error(), "Correct the resolution and call resolve again; the case is still yours.")
	}
	select {
	case h.answer <- res:
	case <-h.gone:
		return refuse(intents.ReasonInvalid, "the case is no longer held", "Take another with next_case.")
	}
	// RunArbiter sends it to the coordinator; its acceptance is a resolve
	// event in the log, or, for a case a panel settles, a vote event.
	typ := intents.EventResolve
	if h.c.Panel != nil {
		typ = intents.EventVote
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var page struct {
			Events []*intents.Event `json:"events"`
		}
		err := s.api(ctx, intents.APILogQuery, map[string]any{"type": typ, "from": h.from, "limit": 1000}, &page)
		if err != nil {
			return nil, nil, fmt.Errorf("resolve %s: %w", in.Case, err)
		}
		for _, ev := range page.Events {
			if v := ev.Vote; v != nil && v.Case == h.c.ID && v.Agent == s.c.Name() {
				out := &ResolveOutput{OK: true, Next: fmt.Sprintf("Your vote is recorded: the case is settled when %d of the panel agree. Take another with next_case.", h.c.Panel.Quorum)}
				return toolResult(fmt.Sprintf("resolve %s: vote recorded (winners %s, losers %s)", in.Case,
					strings.Join(in.Winners, ","), strings.Join(in.Losers, ",")), out), out, nil
			}
			if r := ev.Resolution; r != nil && r.Escalation == h.c.ID {
				if r.Arbiter != s.c.Name() {
					return refuse(intents.ReasonInvalid, "arbiter "+r.Arbiter+" settled the case first", "Take another with next_case.")
				}
				out := &ResolveOutput{OK: true, Next: "Settled: the agents involved have their final decisions. Take another with next_case."}
				return toolResult(fmt.Sprintf("resolve %s: accepted (winners %s, losers %s)", in.Case,
					strings.Join(in.Winners, ","), strings.Join(in.Losers, ",")), out), out, nil
			}
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return nil, nil, ctx.Err()
		}
	}
	return refuse(intents.ReasonInvalid, "the coordinator did not accept the resolution (the case may have passed its deadline)",
		"Take another case with next_case.")
}

// sleepCtx waits d or until ctx ends; false if ctx ended. It paces the
// polling of the log for a resolution's acceptance, which the coordinator
// does not announce to the arbiter.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
