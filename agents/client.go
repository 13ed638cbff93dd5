package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// Client is one agent's connection to the coordinator. It publishes the
// agent's intents on coagent.intents.<agent> and matches the decisions that
// come back on coagent.decisions.<agent> by intent id. It is safe for
// concurrent use: any number of goroutines may submit at once.
//
// Delivery is at least once, decision exactly once: every intent goes to the
// intents stream with its id as Nats-Msg-Id, so a publish retried after a
// lost acknowledgement is stored once; and when no decision arrives within
// the resend interval the client asks the coordinator for it again with the
// same intent, which returns the recorded decision (or decides an intent
// the coordinator has not reached yet) and never applies anything twice.
type Client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	name string
	subj intents.Subjects
	cfg  config
	log  *slog.Logger

	decisions *nats.Subscription
	noticeSub *nats.Subscription
	notices   chan *intents.Notice

	mu      sync.Mutex
	waiting map[string][]chan *intents.Decision
	txns    map[string]*Txn // open, by transaction id, for their notices and preemption
	closed  bool

	// done ends the transactions' renewers when the client closes.
	done     chan struct{}
	renewers sync.WaitGroup
}

// noticeBuffer is how many notices wait for a reader before the oldest are
// dropped: they are advisories, and a slow reader must not hold up the
// decisions that share the connection.
const noticeBuffer = 256

// Connect makes a client for the agent name on nc, which the caller keeps
// owning (and configures with credentials, TLS and reconnects as needed).
// It subscribes to the agent's decisions and notices before it returns, so
// nothing sent to the agent after Connect is missed.
func Connect(ctx context.Context, nc *nats.Conn, name string, opts ...Option) (*Client, error) {
	if !intents.ValidSegment(name) {
		return nil, fmt.Errorf("agents: agent name %q: want 1–%d letters, digits, '_' or '-'", name, intents.MaxSegmentLen)
	}
	if nc == nil {
		return nil, errors.New("agents: Connect needs a NATS connection")
	}
	cfg := newConfig(opts)
	if cfg.resend <= 0 || cfg.retries < 0 || cfg.backoffBase <= 0 || cfg.backoffMax < cfg.backoffBase {
		return nil, fmt.Errorf("agents: options: resend %s and backoff base %s must be positive, max %s at least base, retries %d not negative",
			cfg.resend, cfg.backoffBase, cfg.backoffMax, cfg.retries)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("agents: jetstream: %w", err)
	}
	c := &Client{nc: nc, js: js, name: name, subj: intents.Subjects{Prefix: cfg.prefix}, cfg: cfg,
		log: cfg.logger.With("agent", name), notices: make(chan *intents.Notice, noticeBuffer),
		waiting: map[string][]chan *intents.Decision{}, txns: map[string]*Txn{}, done: make(chan struct{})}
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
// leases then run out unless committed or aborted first) and its
// subscriptions. Calls waiting for a decision return ErrClosed. The NATS
// connection stays open.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	for id, chans := range c.waiting {
		for _, ch := range chans {
			close(ch)
		}
		delete(c.waiting, id)
	}
	c.mu.Unlock()
	close(c.done)
	c.renewers.Wait()
	return errors.Join(c.decisions.Unsubscribe(), c.noticeSub.Unsubscribe())
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
	if n := ev.Notice; n.Kind == intents.NoticeLeaseExpired {
		c.mu.Lock()
		t := c.txns[n.Txn]
		c.mu.Unlock()
		if t != nil {
			t.end(fmt.Errorf("agents: transaction %s: %w: %s", n.Txn, ErrLeaseExpired, n.Detail), true)
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
	var d intents.Decision
	if err := json.Unmarshal(m.Data, &d); err != nil {
		c.log.Warn("dropped a decision that does not parse", "err", err)
		return
	}
	c.deliver(&d)
}

// deliver hands d to the calls waiting on its intent.
func (c *Client) deliver(d *intents.Decision) {
	if c.cfg.onDecision != nil {
		c.cfg.onDecision(d)
	}
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
	defer c.mu.Unlock()
	for _, ch := range c.waiting[d.Intent] {
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
	c.waiting[id] = append(c.waiting[id], ch)
	return ch, nil
}

func (c *Client) forget(id string, ch chan *intents.Decision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	chans := c.waiting[id]
	for i, x := range chans {
		if x == ch {
			chans = append(chans[:i], chans[i+1:]...)
			break
		}
	}
	if len(chans) == 0 {
		delete(c.waiting, id)
	} else {
		c.waiting[id] = chans
	}
}

// Submit sends in and returns its final decision, whatever the outcome: a
// rejection is a decision here, not an error. An empty ID gets a fresh
// ULID and an empty Agent the client's name; in is not changed. The error
// is for an intent that could not be sent or got no final decision before
// ctx ended. Calling Submit again with the same intent id is safe: it
// returns the recorded decision.
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
	if err := c.publish(ctx, in.ID, raw); err != nil {
		return nil, err
	}
	resend := time.NewTimer(c.cfg.resend)
	defer resend.Stop()
	for {
		select {
		case d, ok := <-ch:
			if !ok {
				return nil, ErrClosed
			}
			if d.Outcome.Final() {
				return d, nil
			}
			// An interim decision: the final one may take as long as the
			// wait or the arbiter does, and comes on its own.
			resend.Reset(c.interimPatience(in))
		case <-resend.C:
			// The decision may have been sent while this client was cut
			// off, or the intent may be queued behind a backlog: ask the
			// coordinator directly. It answers with the recorded decision
			// and applies nothing twice.
			c.log.Debug("no decision yet; asking again", "intent", in.ID)
			if d, err := c.ask(ctx, raw); err == nil {
				c.deliver(d)
			} else if ctx.Err() == nil {
				c.log.Debug("asking again failed", "intent", in.ID, "err", err)
			}
			resend.Reset(c.cfg.resend)
		case <-ctx.Done():
			return nil, fmt.Errorf("agents: intent %s: no final decision: %w", in.ID, context.Cause(ctx))
		}
	}
}

// interimPatience is how long to wait after an interim decision before
// asking again: the intent's own wait bound (the coordinator's timers end
// it), and never less than the resend interval.
func (c *Client) interimPatience(in *intents.Intent) time.Duration {
	return max(c.cfg.resend, time.Duration(in.Wait())*time.Millisecond)
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
	raw, err := json.Marshal(&cp)
	if err != nil {
		return nil, nil, fmt.Errorf("agents: encode intent %s: %w", cp.ID, err)
	}
	if len(raw) > intents.MaxIntentSize {
		return nil, nil, fmt.Errorf("agents: intent %s is %d bytes; the limit is %d", cp.ID, len(raw), intents.MaxIntentSize)
	}
	return &cp, raw, nil
}

// publish stores the intent on the intents stream, retrying while ctx
// allows: the message id makes the stream keep one copy however many
// attempts reach it.
func (c *Client) publish(ctx context.Context, id string, raw []byte) error {
	subject := c.subj.Intents(c.name)
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, c.cfg.resend)
		_, err := c.js.Publish(pctx, subject, raw, jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("agents: publish intent %s: %w (%w)", id, context.Cause(ctx), err)
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return fmt.Errorf("agents: publish intent %s: %w", id, err)
		}
		c.log.Debug("publish failed; trying again", "intent", id, "attempt", attempt, "err", err)
		if !sleep(ctx, c.backoff(attempt)) {
			return fmt.Errorf("agents: publish intent %s: %w (%w)", id, context.Cause(ctx), err)
		}
	}
}

// ask submits raw through the API and returns the decision it gets back
// within the resend interval (final or interim).
func (c *Client) ask(ctx context.Context, raw []byte) (*intents.Decision, error) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.resend)
	defer cancel()
	// The agent's own submit subject: under auth the server lets it publish
	// only there, and the coordinator checks the body's agent against it.
	m := nats.NewMsg(c.subj.Submit(c.name))
	m.Data = raw
	m.Header.Set(intents.HeaderWait, strconv.FormatInt((c.cfg.resend/2).Milliseconds(), 10))
	reply, err := c.nc.RequestMsgWithContext(rctx, m)
	if err != nil {
		return nil, err
	}
	if err := apiError(reply); err != nil {
		return nil, err
	}
	var d intents.Decision
	if err := json.Unmarshal(reply.Data, &d); err != nil {
		return nil, fmt.Errorf("agents: submit reply %q: %w", clipText(string(reply.Data), 200), err)
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
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("agents: %s: %w", endpoint, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	reply, err := c.nc.RequestWithContext(ctx, c.subj.API(endpoint), data)
	if err != nil {
		return fmt.Errorf("agents: %s: %w", endpoint, err)
	}
	if err := apiError(reply); err != nil {
		return err
	}
	if err := json.Unmarshal(reply.Data, out); err != nil {
		return fmt.Errorf("agents: %s reply %q: %w", endpoint, clipText(string(reply.Data), 200), err)
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
}

// Value is one path's value as read.
type Value struct {
	Exists  bool            `json:"exists"`
	Value   json.RawMessage `json:"value,omitempty"`
	Version uint64          `json:"version"`
	ModRev  uint64          `json:"mod_rev"`
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
	for i, p := range paths {
		if err := intents.CheckPath(p); err != nil {
			return nil, fmt.Errorf("agents: read: paths[%d] = %q: %w", i, p, err)
		}
	}
	var out struct {
		Rev    uint64           `json:"rev"`
		Values map[string]Value `json:"values"`
	}
	if err := c.request(ctx, "state.get", map[string][]string{"paths": paths}, &out); err != nil {
		return nil, err
	}
	if out.Values == nil {
		out.Values = map[string]Value{}
	}
	return &State{Rev: out.Rev, Values: out.Values}, nil
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
