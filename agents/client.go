package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// Client is one agent's connection to the coordinator. It is safe for
// concurrent use: any number of goroutines may submit at once.
//
// Submit, and every call built on it (Apply, Propose, Commit, Update, …),
// takes the main path of the wire contract: the intent is a request on
// coagent.api.submit.<agent>, and the reply is its decision, sent once it
// is durable in the coordinator's log. Decision exactly once: when no reply
// comes in time (it was lost, or the coordinator was paused) or the
// coordinator answers unavailable, the client sends the same intent again,
// with the same id and with backoff, until ctx ends; the coordinator
// answers a resend from its record (duplicate) and never applies anything
// twice. An interim decision (queued, escalated) is followed by the same
// request again, which the coordinator holds until the final decision
// exists.
//
// Publish and Decision are the store-and-forward path: Publish returns once
// JetStream has stored the intent on coagent.intents.<agent>, whether or
// not a coordinator runs, and Decision collects its decision whenever the
// agent wants it.
type Client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	name string
	subj intents.Subjects
	cfg  clientConfig
	log  *slog.Logger

	decisions *nats.Subscription
	noticeSub *nats.Subscription
	notices   chan *intents.Notice

	// shards is the shard map, for routing intents and reads by board.
	shards shards

	mu      sync.Mutex
	waiting map[string]*pending // by intent id
	txns    map[string]*Txn     // open, by transaction id, for their notices and preemption
	claims  map[string]*Claim   // held under a lease, by lease id, for the notice of a reclaim
	closed  bool

	// done ends the transactions' and claims' renewers when the client
	// closes; closing
	// is cancelled then too, with ErrClosed, which ends the requests in
	// flight.
	done     chan struct{}
	closing  context.Context
	closeNow context.CancelCauseFunc
	renewers sync.WaitGroup
}

// noticeBuffer is how many notices wait for a reader before the oldest are
// dropped: they are advisories, and a slow reader must not hold up the
// decisions that share the connection.
const noticeBuffer = 256

// Connect makes a client for the agent name on nc, which the caller keeps
// owning (and configures with credentials, TLS and reconnects as needed).
// It subscribes to the agent's decisions (those of the intents it
// publishes, see Decision) and notices before it returns, so nothing sent
// to the agent after Connect is missed.
func Connect(ctx context.Context, nc *nats.Conn, name string, opts ...Option) (*Client, error) {
	if !intents.ValidSegment(name) {
		return nil, fmt.Errorf("agents: agent name %q: want 1–%d letters, digits, '_' or '-'", name, intents.MaxSegmentLen)
	}
	if nc == nil {
		return nil, errors.New("agents: Connect needs a NATS connection")
	}
	cfg, err := newClientConfig(opts)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("agents: jetstream: %w", err)
	}
	c := &Client{nc: nc, js: js, name: name, subj: intents.Subjects{Prefix: cfg.prefix}, cfg: cfg,
		log: cfg.logger.With("agent", name), notices: make(chan *intents.Notice, noticeBuffer),
		waiting: map[string]*pending{}, txns: map[string]*Txn{}, claims: map[string]*Claim{}, done: make(chan struct{})}
	c.closing, c.closeNow = context.WithCancelCause(context.Background())
	if c.decisions, err = nc.Subscribe(c.subj.Decisions(name), c.onDecision); err != nil {
		return nil, fmt.Errorf("agents: subscribe to %s: %w", c.subj.Decisions(name), err)
	}
	if c.noticeSub, err = nc.Subscribe(c.subj.Notices(name), c.onNotice); err != nil {
		c.decisions.Unsubscribe()
		return nil, fmt.Errorf("agents: subscribe to %s: %w", c.subj.Notices(name), err)
	}
	if err := flush(ctx, nc); err != nil {
		c.Close()
		return nil, fmt.Errorf("agents: connect %s: %w", name, err)
	}
	return c, nil
}

func flush(ctx context.Context, nc *nats.Conn) error {
	if _, ok := ctx.Deadline(); ok {
		return nc.FlushWithContext(ctx)
	}
	return nc.FlushTimeout(10 * time.Second)
}

// AuthOptions are the connection options of agent name when the server
// enforces identities (coagent serve --auth): its nkey seed file, which
// `coagent agents add` writes, and the inbox prefix its permissions allow.
func AuthOptions(name, seedFile string) ([]nats.Option, error) {
	key, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		return nil, fmt.Errorf("agents: nkey of %s: %w", name, err)
	}
	return []nats.Option{key, nats.CustomInboxPrefix(intents.InboxPrefix(name)), nats.Name(name)}, nil
}

// Name is the agent's name.
func (c *Client) Name() string { return c.name }

// Close stops the client: the renewal of its open transactions (their
// leases then run out unless committed or aborted first) and of its
// claims (their tasks are then reclaimed unless released first), and its
// subscriptions. Calls waiting for a decision return ErrClosed. The NATS
// connection stays open.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	for id, p := range c.waiting {
		for _, ch := range p.chans {
			close(ch)
		}
		delete(c.waiting, id)
	}
	c.mu.Unlock()
	close(c.done)
	c.closeNow(ErrClosed)
	c.renewers.Wait()
	return errors.Join(c.decisions.Unsubscribe(), c.noticeSub.Unsubscribe(), c.closeShards())
}

// ErrClosed is returned by calls on a closed client.
var ErrClosed = errors.New("agents: client closed")

// Notices returns the advisories the coordinator sends this agent: an
// intent waits on one of its transactions, a lease is about to expire. The
// channel is buffered; when nobody reads it the oldest notices are dropped.
// It is never closed.
func (c *Client) Notices() <-chan *intents.Notice { return c.notices }

func (c *Client) onNotice(m *nats.Msg) {
	var ev intents.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Notice == nil {
		c.log.Warn("dropped a notice that does not parse", "err", err)
		return
	}
	switch n := ev.Notice; n.Kind {
	case intents.NoticeLeaseExpired:
		c.mu.Lock()
		t := c.txns[n.Txn]
		c.mu.Unlock()
		if t != nil {
			t.end(fmt.Errorf("agents: transaction %s: %w: %s", n.Txn, ErrLeaseExpired, n.Detail), true)
		}
	case intents.NoticeReclaimed:
		c.mu.Lock()
		cl := c.claims[n.Txn]
		c.mu.Unlock()
		if cl != nil {
			cl.end(fmt.Errorf("agents: claim %s of %s: %w: %w: %s", n.Txn, cl.task, ErrReclaimed, ErrLeaseExpired, n.Detail), true)
		}
	}
	for {
		select {
		case c.notices <- ev.Notice:
			return
		default:
		}
		select {
		case <-c.notices: // make room: the newest advisory matters most
		default:
		}
	}
}

func (c *Client) onDecision(m *nats.Msg) {
	// The decisions of the intents published on the stream come here. A
	// coordinator of contract version 1 sends those of the API submits too,
	// which their replies have answered already: the header names the
	// intent, so they are dropped without being parsed.
	if id := m.Header.Get(intents.HeaderIntent); id != "" && !c.wants(id) {
		return
	}
	var d intents.Decision
	if err := intents.UnmarshalDecision(m.Data, &d); err != nil {
		c.log.Warn("dropped a decision that does not parse", "err", err)
		return
	}
	if c.wants(d.Intent) {
		c.deliver(&d)
	}
}

// wants reports whether a decision for intent id is waited for here: by a
// Decision call, or as the preemption of an open transaction (the aborted
// decision of its propose).
func (c *Client) wants(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiting[id] != nil {
		return true
	}
	for _, t := range c.txns {
		if t.grant.Intent == id {
			return true
		}
	}
	return false
}

// pending is an intent some calls wait on: Submit for its reply (and, from
// a coordinator that sends it there as well, the subscription), Decision
// for the subscription and the record.
type pending struct {
	chans []chan *intents.Decision
	// hooked are the outcomes the decision hook has been given, so that a
	// decision that comes twice (as a reply and on the subscription, or
	// again as the answer to a resend) is given once.
	hooked []intents.Outcome
}

// deliver hands d to the decision hook and to the calls waiting on its
// intent.
func (c *Client) deliver(d *intents.Decision) {
	if d.Outcome == intents.OutcomeAborted {
		// A preemption: the final decision of the transaction's propose.
		c.mu.Lock()
		t := c.txns[d.Txn]
		c.mu.Unlock()
		if t != nil && d.Intent == t.grant.Intent {
			t.end(fmt.Errorf("agents: transaction %s: %w: %s", d.Txn, ErrPreempted, d.Detail), true)
		}
	}
	c.mu.Lock()
	p := c.waiting[d.Intent]
	hook := c.cfg.onDecision != nil
	if hook && p != nil {
		if slices.Contains(p.hooked, d.Outcome) {
			hook = false
		} else {
			p.hooked = append(p.hooked, d.Outcome)
		}
	}
	c.mu.Unlock()
	if hook {
		c.cfg.onDecision(d)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p = c.waiting[d.Intent]; p == nil {
		return
	}
	for _, ch := range p.chans {
		// Each waiter's channel holds the newest decision only: a final
		// one replaces an interim one not yet read.
		select {
		case <-ch:
		default:
		}
		ch <- d
	}
}

func (c *Client) await(id string) (chan *intents.Decision, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	ch := make(chan *intents.Decision, 1)
	p := c.waiting[id]
	if p == nil {
		p = &pending{}
		c.waiting[id] = p
	}
	p.chans = append(p.chans, ch)
	return ch, nil
}

func (c *Client) forget(id string, ch chan *intents.Decision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.waiting[id]
	if p == nil {
		return
	}
	if i := slices.Index(p.chans, ch); i >= 0 {
		p.chans = slices.Delete(p.chans, i, i+1)
	}
	if len(p.chans) == 0 {
		delete(c.waiting, id)
	}
}

// Submit sends in and returns its final decision, whatever the outcome: a
// rejection is a decision here, not an error. An empty ID gets a fresh
// ULID and an empty Agent the client's name; in is not changed. The error
// is for an intent that could not be sent or got no final decision before
// ctx ended. Calling Submit again with the same intent id is safe: it
// returns the recorded decision.
//
// The intent goes by request/reply on coagent.api.submit.<agent>; see
// Client for how a lost reply and an interim decision are handled, and
// WithResend for how long one request waits.
func (c *Client) Submit(ctx context.Context, in *intents.Intent) (*intents.Decision, error) {
	return c.submit(ctx, in, false)
}

// submit is Submit; built says in comes from Builder.Build, which validated
// everything but the id and agent that prepare fills in.
func (c *Client) submit(ctx context.Context, in *intents.Intent, built bool) (*intents.Decision, error) {
	in, raw, err := c.prepare(in, built)
	if err != nil {
		return nil, err
	}
	ch, err := c.await(in.ID)
	if err != nil {
		return nil, err
	}
	defer c.forget(in.ID, ch)
	ctx, stop := c.bind(ctx)
	defer stop()
	// The first request asks for the intent's first decision, answered as
	// soon as it is durable: the final one for most intents, and for one
	// that waits or escalates its interim decision, at once. After an
	// interim decision, or a first request that was not answered in time,
	// the requests ask for the final one, which the coordinator answers as
	// soon as it exists or, at the end of the wait, with the interim one.
	// A claim that waits for a task asks the coordinator to hold its
	// request as long as it may from the first.
	lc, _ := ctx.Value(laneKey{}).(laneClaim)
	long := lc.wait
	shard := c.route(ctx, in, lc.lane)
	subj, err := c.shardSubjects(ctx, shard)
	if err != nil {
		return nil, err
	}
	redirects := 0
	for attempt := 0; ; {
		d, err := c.ask(ctx, subj, in.ID, raw, long)
		if err == nil && intents.Misrouted(d) && redirects < maxRedirects {
			// Another shard owns the boards: the map is read again, and the
			// same intent sent where it says. A board being moved is
			// refused by both shards for a moment, so the same shard is
			// asked again after a pause.
			redirects++
			c.loadShards(ctx, true)
			if next := c.route(ctx, in, lc.lane); next != shard {
				shard = next
			} else if !sleep(ctx, c.backoff(redirects)) {
				return nil, c.ended(ctx, in.ID, errors.New(d.Detail))
			}
			if subj, err = c.shardSubjects(ctx, shard); err != nil {
				return nil, err
			}
			c.log.Debug("another shard's intent; sending it there", "intent", in.ID, "shard", shard, "detail", d.Detail)
			continue
		}
		if err == nil {
			c.granted(in, d, shard)
			c.deliver(d)
			if d.Outcome.Final() {
				return d, nil
			}
			long, attempt = true, 0
			continue
		}
		if ctx.Err() != nil {
			return nil, c.ended(ctx, in.ID, err)
		}
		if !resendable(err) {
			return nil, fmt.Errorf("agents: submit intent %s: %w", in.ID, err)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			long = true
		}
		c.log.Debug("no decision in the reply; sending the same intent again", "intent", in.ID, "attempt", attempt, "err", err)
		if !sleep(ctx, c.backoff(attempt)) {
			return nil, c.ended(ctx, in.ID, err)
		}
		attempt++
	}
}

// bind returns ctx cancelled also when the client closes, so that no call
// outlives it.
func (c *Client) bind(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	return ctx, func() {
		unhook()
		cancel(nil)
	}
}

// ended is the error of a call on intent id whose ctx ended (or whose
// client closed) before a final decision came; last is the last failure.
func (c *Client) ended(ctx context.Context, id string, last error) error {
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	if last != nil && !errors.Is(last, context.Canceled) && !errors.Is(last, context.DeadlineExceeded) {
		return fmt.Errorf("agents: intent %s: no final decision: %w (last: %w)", id, cause, last)
	}
	return fmt.Errorf("agents: intent %s: no final decision: %w", id, cause)
}

// The API error codes the client acts on (SPEC §6).
const (
	codeUnavailable = "unavailable"
	codeNotFound    = "not_found"
)

// resendable reports whether the same intent is sent again after err: the
// reply did not come in time, no coordinator listens (yet), or it answered
// unavailable (its intake is full, or it cannot decide now).
func resendable(err error) bool {
	var api *APIError
	if errors.As(err, &api) {
		return api.Code == codeUnavailable
	}
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders)
}

// replyMargin is the part of a request's time kept for the reply to
// travel, past the wait the coordinator is asked for: a quarter of it, at
// most a second.
func replyMargin(timeout time.Duration) time.Duration { return min(timeout/4, time.Second) }

// requestTimeout is how long one request may take: the resend interval,
// or less when ctx ends before.
func (c *Client) requestTimeout(ctx context.Context) time.Duration {
	timeout := c.cfg.resend
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	return timeout
}

// prepare fills in's id and agent and validates it, as the coordinator
// would, so a malformed intent fails here with the field it names. An
// intent the builder made is valid already: a fresh ULID and the client's
// own name (checked by Connect) keep it so.
func (c *Client) prepare(in *intents.Intent, built bool) (*intents.Intent, []byte, error) {
	if in == nil {
		return nil, nil, errors.New("agents: nil intent")
	}
	cp := *in
	if cp.ID == "" {
		cp.ID = ulid.Make().String()
	}
	if cp.Agent == "" {
		cp.Agent = c.name
	}
	if !built {
		if err := cp.Validate(); err != nil {
			return nil, nil, fmt.Errorf("agents: %w: %w", ErrInvalid, err)
		}
	}
	raw, err := intents.AppendIntentJSON(nil, &cp)
	if err != nil {
		return nil, nil, fmt.Errorf("agents: encode intent %s: %w", cp.ID, err)
	}
	if len(raw) > intents.MaxIntentSize {
		return nil, nil, fmt.Errorf("agents: intent %s is %d bytes; the limit is %d", cp.ID, len(raw), intents.MaxIntentSize)
	}
	return &cp, raw, nil
}

// ask sends intent id (raw) once on the agent's submit subject and returns
// the decision of the reply, final or interim. With long, the coordinator
// is asked to answer within the request's time less the reply's margin
// (Coagent-Wait-Ms), with the interim decision if no final one exists by
// then; without, to answer the first decision at once. Either way a reply
// that does not come within the request's time was lost.
func (c *Client) ask(ctx context.Context, subj intents.Subjects, id string, raw []byte, long bool) (*intents.Decision, error) {
	timeout := c.requestTimeout(ctx)
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The agent's own submit subject: under auth the server lets it publish
	// only there, and the coordinator checks the body's agent against it.
	m := nats.NewMsg(subj.Submit(c.name))
	m.Data = raw
	wait := "0"
	if long {
		wait = strconv.FormatInt((timeout - replyMargin(timeout)).Milliseconds(), 10)
	}
	m.Header.Set(intents.HeaderWait, wait)
	if lc, ok := ctx.Value(laneKey{}).(laneClaim); ok {
		m.Header.Set(intents.HeaderClaimNext, lc.lane)
	}
	c.traceHeader(ctx, m)
	reply, err := c.nc.RequestMsgWithContext(rctx, m)
	if err != nil {
		return nil, err
	}
	if err := apiError(reply); err != nil {
		return nil, err
	}
	var d intents.Decision
	if err := intents.UnmarshalDecision(reply.Data, &d); err != nil {
		return nil, fmt.Errorf("agents: submit reply %q: %w", intents.Clip(string(reply.Data), 200), err)
	}
	if d.Intent != id {
		return nil, fmt.Errorf("agents: the reply to intent %s is the decision of intent %q", id, d.Intent)
	}
	return &d, nil
}

// APIError is an error reply of the coordinator's API: the micro error code
// (a SPEC §3 reason, or "unavailable"/"internal") and its description.
type APIError struct {
	Code, Description string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("agents: coordinator api: %s: %s", e.Code, e.Description)
}

func apiError(m *nats.Msg) error {
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return &APIError{Code: code, Description: m.Header.Get("Nats-Service-Error")}
	}
	return nil
}

// request calls an API endpoint with a JSON body and decodes the reply.
func (c *Client) request(ctx context.Context, endpoint string, body, out any) error {
	return c.requestOn(ctx, c.subj, endpoint, body, out)
}

// requestOn is request of the coordinator whose subjects are subj (one
// shard's).
func (c *Client) requestOn(ctx context.Context, subj intents.Subjects, endpoint string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("agents: %s: %w", endpoint, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	reply, err := c.nc.RequestWithContext(ctx, subj.API(endpoint), data)
	if err != nil {
		return fmt.Errorf("agents: %s: %w", endpoint, err)
	}
	if err := apiError(reply); err != nil {
		return err
	}
	if err := json.Unmarshal(reply.Data, out); err != nil {
		return fmt.Errorf("agents: %s reply %q: %w", endpoint, intents.Clip(string(reply.Data), 200), err)
	}
	return nil
}

// expect turns a final decision into the call's result: nil for want, a
// *RejectedError for a rejection.
func expect(d *intents.Decision, want intents.Outcome) error {
	switch d.Outcome {
	case want:
		return nil
	case intents.OutcomeRejected:
		return &RejectedError{Decision: d}
	}
	return &UnexpectedError{Decision: d, Want: want}
}

// Apply builds b, submits it as a one-shot apply and returns its decision:
// nil error when applied, a *RejectedError (errors.Is with ErrConflict,
// ErrPreconditionFailed, …) when rejected.
func (c *Client) Apply(ctx context.Context, b *intents.Builder) (*intents.Decision, error) {
	in, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("agents: %w: %w", ErrInvalid, err)
	}
	if in.Kind != intents.KindApply {
		return nil, fmt.Errorf("agents: Apply of a %s intent; build it with intents.Apply", in.Kind)
	}
	d, err := c.submit(ctx, in, true)
	if err != nil {
		return nil, err
	}
	return d, expect(d, intents.OutcomeApplied)
}

// State is a consistent read of some paths at one revision.
type State struct {
	Rev    uint64
	Values map[string]Value
	// Revs is, when the paths' boards belong to more than one shard, the
	// revision each shard answered at (Rev is then 0: the shards' revisions
	// count different logs).
	Revs map[string]uint64
}

// Value is one path's value as read.
type Value struct {
	Exists  bool            `json:"exists"`
	Value   json.RawMessage `json:"value,omitempty"`
	Version uint64          `json:"version"`
	ModRev  uint64          `json:"mod_rev"`
	// ModTime and ModAgent are when the change at ModRev was made and by
	// which agent (none for a reclaim, which the coordinator makes), from
	// ReadMod; both are absent when the coordinator's log no longer holds
	// that change.
	ModTime  *time.Time `json:"mod_time,omitempty"`
	ModAgent string     `json:"mod_agent,omitempty"`
	// Redacted names what the board rules' readers keep from this agent:
	// the path itself (then nothing of it is shown, not even whether it
	// exists) or paths under it, removed from Value.
	Redacted []string `json:"redacted,omitempty"`
}

// Decode unmarshals the value into v; an absent path leaves v unchanged.
func (v Value) Decode(into any) error {
	if !v.Exists || len(v.Value) == 0 {
		return nil
	}
	return json.Unmarshal(v.Value, into)
}

// Read returns the values, versions and mod_revs of paths, all at one
// revision, from the coordinator's state.get.
func (c *Client) Read(ctx context.Context, paths ...string) (*State, error) {
	return c.read(ctx, false, paths)
}

// ReadMod is Read, with each value's ModTime and ModAgent: when its last
// change was made and by whom, to tell a stale task.
func (c *Client) ReadMod(ctx context.Context, paths ...string) (*State, error) {
	return c.read(ctx, true, paths)
}

func (c *Client) read(ctx context.Context, mod bool, paths []string) (*State, error) {
	for i, p := range paths {
		if err := intents.CheckPath(p); err != nil {
			return nil, fmt.Errorf("agents: read: paths[%d] = %q: %w", i, p, err)
		}
	}
	c.loadShards(ctx, false)
	// The paths of each shard are read from it.
	byShard := map[string][]string{}
	var order []string
	for _, p := range paths {
		sh := c.shardOf(p)
		if _, ok := byShard[sh]; !ok {
			order = append(order, sh)
		}
		byShard[sh] = append(byShard[sh], p)
	}
	if len(paths) == 0 {
		order, byShard[intents.DefaultShard] = []string{intents.DefaultShard}, nil
	}
	st := &State{Values: map[string]Value{}}
	for _, sh := range order {
		var out struct {
			Rev    uint64           `json:"rev"`
			Values map[string]Value `json:"values"`
		}
		req := map[string]any{"paths": byShard[sh]}
		if mod {
			req["mod"] = true
		}
		if err := c.requestOn(ctx, c.subj.Shard(sh), intents.APIStateGet, req, &out); err != nil {
			return nil, err
		}
		maps.Copy(st.Values, out.Values)
		st.Rev = out.Rev
		if len(order) > 1 {
			if st.Revs == nil {
				st.Revs = map[string]uint64{}
			}
			st.Revs[sh] = out.Rev
		}
	}
	if len(order) > 1 {
		st.Rev = 0
	}
	return st, nil
}

// sleep waits d or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
