package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// Decide is an arbiter written as a function: given a case (SPEC §5), it
// returns the resolution — the winners, the losers or a replacement, and a
// rationale. It may leave the resolution's Escalation and Arbiter empty;
// RunArbiter fills them. An error means "no answer now": the case goes back
// to the queue and comes again. ctx ends when the case reaches its deadline
// or the arbiter stops, and Decide should return then.
type Decide func(ctx context.Context, c *intents.Escalation) (*intents.Resolution, error)

// arbitersDurable is the durable consumer on the arbiter stream that every
// arbiter shares, so that each case goes to one of them. The coordinator
// creates it at start.
const arbitersDurable = intents.ArbitersConsumer

// arbiterUpdateWait bounds the attempt to set the shared consumer's
// AckWait to this arbiter's: under authentication an arbiter may not
// change consumers, and the server does not answer a refused request.
const arbiterUpdateWait = 2 * time.Second

// arbiterFetchWait bounds each pull request, so that an arbiter that stops
// leaves no request behind for long: a case delivered to a request nobody
// reads comes back only after AckWait.
const arbiterFetchWait = 5 * time.Second

// RunArbiter serves as the arbiter name, resolving cases with decide until
// ctx ends; then it returns nil. It creates, or joins, the durable pull
// consumer "arbiters" on the arbiter stream (COAGENT_ARBITER), which all
// arbiters share: each case goes to one of them, and comes again to another
// if that one dies or goes silent past its AckWait. It takes one case at a
// time, calls decide, sends the resolution to the coordinator's
// arbiter.resolve endpoint, and then acknowledges the case.
//
// What happens to a case that is not resolved:
//   - decide returns an error, or a resolution that does not fit the case:
//     the case is handed back (Nak) and comes again after the retry delay;
//   - the coordinator refuses the resolution as invalid — the case is no
//     longer open (another arbiter or the deadline's fallback settled it) or
//     the coordinator finds the resolution wrong — or the case is past its
//     deadline: the case is dropped (Term) and the refusal logged;
//   - the coordinator cannot be reached or answers with another error: the
//     case is handed back;
//   - ctx ends while decide runs: the case is handed back at once.
//
// The stream must exist: the coordinator creates it at start. RunArbiter
// returns an error if it cannot set up the consumer or if nc is closed.
func RunArbiter(ctx context.Context, nc *nats.Conn, name string, decide Decide, opts ...Option) error {
	if !intents.ValidSegment(name) {
		return fmt.Errorf("agents: arbiter name %q is not an agent name", name)
	}
	if nc == nil || decide == nil {
		return errors.New("agents: RunArbiter needs a connection and a Decide")
	}
	cfg := newConfig(opts)
	if cfg.ackWait <= 0 || cfg.retryDelay < 0 || cfg.resolveTimeout <= 0 {
		return fmt.Errorf("agents: arbiter options: ack wait %s and resolve timeout %s must be positive, retry delay %s not negative",
			cfg.ackWait, cfg.resolveTimeout, cfg.retryDelay)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("agents: jetstream: %w", err)
	}
	a := &arbiterRun{nc: nc, js: js, name: name, decide: decide, cfg: cfg, subj: intents.Subjects{Prefix: cfg.prefix},
		log: cfg.logger.With("arbiter", name)}
	cons, err := a.consumer(ctx)
	if err != nil {
		return err
	}
	for {
		if ctx.Err() != nil {
			return nil
		}
		if nc.IsClosed() {
			return fmt.Errorf("agents: arbiter %s: %w", name, nats.ErrConnectionClosed)
		}
		fctx, cancel := context.WithTimeout(ctx, arbiterFetchWait)
		m, err := cons.Next(jetstream.FetchContext(fctx))
		cancel()
		switch {
		case err == nil:
			a.handle(ctx, m)
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
			// Nothing to do yet.
		case errors.Is(err, nats.ErrConnectionClosed):
			return fmt.Errorf("agents: arbiter %s: %w", name, err)
		default:
			a.log.Warn("fetching cases failed; trying again", "err", err)
			if !a.pause(ctx) {
				return nil
			}
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
				if c, err := a.consumer(ctx); err == nil {
					cons = c
				} else {
					a.log.Warn("recreating the consumer failed", "err", err)
				}
			}
		}
	}
}

// arbiterRun is one RunArbiter: it handles one case at a time on the
// caller's goroutine.
type arbiterRun struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	name   string
	decide Decide
	cfg    config
	subj   intents.Subjects
	log    *slog.Logger
	// ackWait is the AckWait of the consumer in use: a case in hand is
	// kept alive a third of the way through it.
	ackWait time.Duration
}

// consumer joins the arbiters' shared consumer, which the coordinator
// creates, and sets its AckWait to this arbiter's where it may; it creates
// the consumer where none exists (a coordinator that did not). The
// AckWait in force is the one the arbiter keeps a case alive by.
func (a *arbiterRun) consumer(ctx context.Context) (jetstream.Consumer, error) {
	stream := a.subj.Stream(intents.StreamArbiter)
	cfg := jetstream.ConsumerConfig{
		Durable:       arbitersDurable,
		FilterSubject: a.subj.Escalations(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       a.cfg.ackWait,
		MaxDeliver:    -1,
	}
	cons, err := a.js.Consumer(ctx, stream, arbitersDurable)
	switch {
	case err == nil && cons.CachedInfo().Config.AckWait != a.cfg.ackWait:
		uctx, cancel := context.WithTimeout(ctx, arbiterUpdateWait)
		updated, uerr := a.js.UpdateConsumer(uctx, stream, cfg)
		cancel()
		if uerr != nil {
			a.log.Warn("the arbiters' consumer keeps its ack wait; this arbiter may not change it",
				"ack_wait", cons.CachedInfo().Config.AckWait, "wanted", a.cfg.ackWait, "err", uerr)
		} else {
			cons = updated
		}
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		cons, err = a.js.CreateOrUpdateConsumer(ctx, stream, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("agents: consumer %s on %s (is the coordinator running?): %w", arbitersDurable, stream, err)
	}
	a.ackWait = cons.CachedInfo().Config.AckWait
	return cons, nil
}

// pause waits the retry delay (at least 100ms, so that a persistent failure
// does not spin); false if ctx ended first.
func (a *arbiterRun) pause(ctx context.Context) bool {
	return sleep(ctx, max(a.cfg.retryDelay, 100*time.Millisecond))
}

// handle settles one case, or hands it back, or drops it; see RunArbiter.
func (a *arbiterRun) handle(ctx context.Context, m jetstream.Msg) {
	var c intents.Escalation
	if err := json.Unmarshal(m.Data(), &c); err != nil || c.ID == "" {
		a.log.Error("dropped a message that is not a case", "err", err, "data", clipText(string(m.Data()), 200))
		a.settle(m, jetstream.Msg.Term, "term")
		return
	}
	log := a.log.With("escalation", c.ID)
	res, err := a.decideWhileAlive(ctx, m, &c)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		log.Info("stopping: case handed back", "err", err)
		a.settle(m, jetstream.Msg.Nak, "nak")
		return
	case errors.Is(err, errPastDeadline):
		log.Warn("case dropped: past its deadline, the coordinator's fallback settles it", "err", err)
		a.settle(m, jetstream.Msg.Term, "term")
		return
	default:
		log.Warn("no resolution; the case will come again", "err", err)
		a.nakLater(m)
		return
	}
	err = a.resolve(ctx, res)
	var refused *arbiterRefusal
	switch {
	case err == nil:
		log.Info("resolved", "winners", res.Winners, "losers", res.Losers, "replaced", res.Replacement != nil,
			"rationale", res.Rationale)
		a.settle(m, jetstream.Msg.Ack, "ack")
	case errors.As(err, &refused) && refused.Code == string(intents.ReasonInvalid):
		log.Warn("resolution refused; case dropped (settled already, past its deadline, or the resolution is wrong)",
			"err", err)
		a.settle(m, jetstream.Msg.Term, "term")
	default:
		log.Warn("resolution not delivered; the case will come again", "err", err)
		a.nakLater(m)
	}
}

var errPastDeadline = errors.New("agents: the case is past its deadline")

// decideWhileAlive runs decide under a context that ends at the case's
// deadline, and meanwhile tells the server, three times per AckWait, that
// the case is being worked on. It returns decide's resolution, filled and
// checked against the case.
func (a *arbiterRun) decideWhileAlive(ctx context.Context, m jetstream.Msg, c *intents.Escalation) (*intents.Resolution, error) {
	dctx, cancel := ctx, context.CancelFunc(func() {})
	if !c.Deadline.IsZero() {
		dctx, cancel = context.WithDeadlineCause(ctx, c.Deadline, errPastDeadline)
	}
	defer cancel()
	beat := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(a.ackWait/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if err := m.InProgress(); err != nil {
					a.log.Debug("telling the server the case is in hand failed", "escalation", c.ID, "err", err)
				}
			case <-beat:
				return
			case <-dctx.Done():
				return // past the deadline nobody should hold the case
			}
		}
	})
	res, err := a.decide(dctx, c)
	close(beat)
	wg.Wait()
	if err != nil {
		if errors.Is(context.Cause(dctx), errPastDeadline) {
			return nil, fmt.Errorf("%w: %w", errPastDeadline, err)
		}
		return nil, err
	}
	if res == nil {
		return nil, errors.New("agents: decide returned no resolution and no error")
	}
	r := *res
	if r.Escalation == "" {
		r.Escalation = c.ID
	}
	if r.Arbiter == "" {
		r.Arbiter = a.name
	}
	if err := CheckResolution(c, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// settle acks, naks or terms m, logging a failure (the server then
// delivers the case again after AckWait, which is harmless).
func (a *arbiterRun) settle(m jetstream.Msg, how func(jetstream.Msg) error, what string) {
	if err := how(m); err != nil {
		a.log.Warn("could not "+what+" the case; it will come again after the ack wait", "err", err)
	}
}

func (a *arbiterRun) nakLater(m jetstream.Msg) {
	a.settle(m, func(m jetstream.Msg) error { return m.NakWithDelay(a.cfg.retryDelay) }, "nak")
}

// arbiterRefusal is the coordinator's refusal of a resolution: the micro
// error code (a SPEC §3 reason) and its description.
type arbiterRefusal struct {
	Code, Detail string
}

func (e *arbiterRefusal) Error() string {
	return fmt.Sprintf("agents: arbiter.resolve refused (%s): %s", e.Code, e.Detail)
}

// resolve sends res to the coordinator. It is not cut short when ctx ends:
// a resolution in hand is delivered, within the resolve timeout.
func (a *arbiterRun) resolve(ctx context.Context, res *intents.Resolution) error {
	data, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("agents: encode resolution: %w", err)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.resolveTimeout)
	defer cancel()
	reply, err := a.nc.RequestWithContext(rctx, a.subj.API(intents.APIArbiterResolve), data)
	if err != nil {
		return fmt.Errorf("agents: arbiter.resolve: %w", err)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		return &arbiterRefusal{Code: code, Detail: reply.Header.Get(micro.ErrorHeader)}
	}
	var ok struct {
		OK bool `json:"ok"`
	}
	if err := json.Unmarshal(reply.Data, &ok); err != nil || !ok.OK {
		return fmt.Errorf("agents: arbiter.resolve: unexpected reply %q", clipText(string(reply.Data), 200))
	}
	return nil
}

// ErrBadResolution is returned (wrapped) by CheckResolution.
var ErrBadResolution = errors.New("agents: resolution does not fit its case")

// CheckResolution reports what the coordinator would refuse in res as an
// answer to c, short of what only it can know (whether the case is still
// open, whether a replacement's id is taken): the escalation id, a
// rationale, at least one winner, loser or replacement, intent ids the case
// names, none both winning and losing, not the escalated intent and a
// transaction both winning, and a replacement that is a valid apply. Every
// problem found is reported, wrapped in ErrBadResolution.
func CheckResolution(c *intents.Escalation, res *intents.Resolution) error {
	probs := resolutionProblems(c, res)
	if !intents.ValidSegment(res.Arbiter) {
		probs = append(probs, fmt.Sprintf("arbiter %q is not an agent name", res.Arbiter))
	}
	if len(probs) > 0 {
		return fmt.Errorf("%w: %s", ErrBadResolution, strings.Join(probs, "; "))
	}
	return nil
}

// resolutionProblems lists what CheckResolution finds wrong in res, save
// its arbiter's name.
func resolutionProblems(c *intents.Escalation, res *intents.Resolution) []string {
	var probs []string
	if res.Escalation != c.ID {
		probs = append(probs, fmt.Sprintf("escalation %q, want %q", res.Escalation, c.ID))
	}
	if strings.TrimSpace(res.Rationale) == "" {
		probs = append(probs, "no rationale")
	}
	if len(res.Winners)+len(res.Losers) == 0 && res.Replacement == nil {
		probs = append(probs, "no winner, no loser and no replacement")
	}
	known := caseIntentIDs(c)
	for _, id := range slices.Concat(res.Winners, res.Losers) {
		if !slices.Contains(known, id) {
			probs = append(probs, fmt.Sprintf("%q is not an intent of the case (those are %s)", id, strings.Join(known, ", ")))
		}
	}
	for _, id := range res.Winners {
		if slices.Contains(res.Losers, id) {
			probs = append(probs, fmt.Sprintf("%s both wins and loses", id))
		}
	}
	if slices.Contains(res.Winners, c.ID) && slices.ContainsFunc(res.Winners, func(id string) bool { return id != c.ID }) {
		probs = append(probs, "the escalated intent and a transaction in flight cannot both win; write a replacement")
	}
	if r := res.Replacement; r != nil {
		if err := r.Validate(); err != nil {
			probs = append(probs, fmt.Sprintf("replacement: %v", err))
		} else if r.Kind != intents.KindApply {
			probs = append(probs, fmt.Sprintf("replacement: kind %s; a replacement is an apply", r.Kind))
		}
		if slices.Contains(res.Winners, c.ID) {
			probs = append(probs, "the escalated intent cannot both win and be replaced")
		}
	}
	return probs
}

// caseIntentIDs returns the ids a resolution may name: the escalated
// intent's and those of the proposes it conflicts with.
func caseIntentIDs(c *intents.Escalation) []string {
	ids := []string{c.ID}
	add := func(id string) {
		if id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if c.Holder != nil {
		add(c.Holder.Intent)
	}
	for _, in := range c.Intents {
		if in != nil {
			add(in.ID)
		}
	}
	return ids
}

// Model is a language model as an arbiter needs it: a prompt in, a
// completion out. Wrap any client in it.
type Model interface {
	Complete(ctx context.Context, prompt string) (string, error)
}

// ErrModelOutput is returned (wrapped) by a ModelArbiter's Decide when the
// model's answer is not a resolution of the case.
var ErrModelOutput = errors.New("agents: model answer is not a resolution")

// ModelArbiter returns a Decide that asks m: it renders the case as a
// prompt (see CasePrompt) and parses the answer, one JSON object
// {"winners": [...], "losers": [...], "rationale": "..."}, possibly in a
// code fence or among prose. An answer that is not such an object, names
// ids the case does not, or otherwise does not fit the case is an error
// wrapping ErrModelOutput (and ErrBadResolution where it applies) that
// quotes the answer; RunArbiter then hands the case back, so that it comes
// again and the model is asked again. The resolution's Arbiter is left for
// RunArbiter to fill.
func ModelArbiter(m Model) Decide {
	return func(ctx context.Context, c *intents.Escalation) (*intents.Resolution, error) {
		out, err := m.Complete(ctx, CasePrompt(c))
		if err != nil {
			return nil, fmt.Errorf("agents: model: %w", err)
		}
		return ParseModelAnswer(c, out)
	}
}

// ParseModelAnswer reads a model's answer to the case c: one JSON object
// with "winners", "losers" (intent ids) and "rationale", and no other
// field, possibly wrapped in a code fence or prose. Errors wrap
// ErrModelOutput and quote the answer.
func ParseModelAnswer(c *intents.Escalation, out string) (*intents.Resolution, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s; the answer was %q", ErrModelOutput, fmt.Sprintf(format, args...), clipText(out, 300))
	}
	i, j := strings.Index(out, "{"), strings.LastIndex(out, "}")
	if i < 0 || j < i {
		return nil, bad("no JSON object")
	}
	var ans struct {
		Winners   []string `json:"winners"`
		Losers    []string `json:"losers"`
		Rationale string   `json:"rationale"`
	}
	dec := json.NewDecoder(strings.NewReader(out[i : j+1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ans); err != nil {
		return nil, bad("%v", err)
	}
	if dec.InputOffset() != int64(j+1-i) {
		return nil, bad("more than one JSON object")
	}
	res := &intents.Resolution{Escalation: c.ID, Winners: ans.Winners, Losers: ans.Losers, Rationale: strings.TrimSpace(ans.Rationale)}
	// The arbiter's name is RunArbiter's to fill; check the rest.
	if probs := resolutionProblems(c, res); len(probs) > 0 {
		return nil, fmt.Errorf("%w: %w: %s; the answer was %q", ErrModelOutput, ErrBadResolution, strings.Join(probs, "; "), clipText(out, 300))
	}
	return res, nil
}

// CasePrompt renders a case for a language model: the escalated intent,
// the transactions in flight it conflicts with and their proposes, the
// conflicts, the current values and versions of the paths involved, and
// how to answer. The same case always renders the same prompt.
func CasePrompt(c *intents.Escalation) string {
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
	var others []*intents.Intent
	for _, in := range c.Intents {
		if in == nil {
			continue
		}
		if in.ID == c.ID {
			fmt.Fprintf(&b, "The escalated intent %s (agent %s, priority %d):\n  %s\n\n", in.ID, in.Agent, in.Priority, js(in))
		} else {
			others = append(others, in)
		}
	}
	if h := c.Holder; h != nil {
		fmt.Fprintf(&b, "The transaction in flight: %s of agent %s (fence %d), opened by propose %s, writing:\n  %s\n\n",
			h.Txn, h.Agent, h.Fence, h.Intent, js(h.Writes))
	}
	for _, in := range others {
		fmt.Fprintf(&b, "The propose %s that opened a transaction in flight (agent %s, priority %d):\n  %s\n\n", in.ID, in.Agent, in.Priority, js(in))
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
	ids := caseIntentIDs(c)
	fmt.Fprintf(&b, "Answer with one JSON object and nothing else:\n")
	fmt.Fprintf(&b, "{\"winners\": [intent ids], \"losers\": [intent ids], \"rationale\": \"one sentence saying why\"}\n")
	fmt.Fprintf(&b, "The intent ids you may name: %s.\n", strings.Join(ids, ", "))
	fmt.Fprintf(&b, "A losing escalated intent is rejected; a losing propose has its transaction aborted. ")
	fmt.Fprintf(&b, "The escalated intent and a transaction in flight cannot both win.\n")
	return b.String()
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

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
