package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coagent/coagent/conflict"
	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// Options configures a Service. The zero value works.
type Options struct {
	// Prefix is the subject prefix. The default is "coagent".
	Prefix string
	// Core configures the engine and the log; see CoreOptions.
	Core CoreOptions
	// MaxBatch bounds how many intents are decided and made durable in one
	// synced write. The default is 1024.
	MaxBatch int
	// MaxAckPending bounds the intents fetched but not yet acknowledged.
	// The default is 4096.
	MaxAckPending int
	// AckWait is how long JetStream waits for an acknowledgement before it
	// delivers an intent again: after a crash, the intents the dead process
	// held come back within it. The default is 5s.
	AckWait time.Duration
	// DecisionsMaxAge is how long decisions stay in their stream. The
	// default is 24h.
	DecisionsMaxAge time.Duration
	// EventsMaxAge is how long the public event feed keeps events. The
	// default is 24h.
	EventsMaxAge time.Duration
	// SubmitWait is how long an API submit waits for a final decision when
	// the request does not say (header Coagent-Wait-Ms). The default is 10s.
	SubmitWait time.Duration
	// MaxSubmits bounds the API submits waiting for their decisions at
	// once; one more is answered unavailable at once (send the same intent
	// again). The default is 10,000.
	MaxSubmits int
	// Auth says the server enforces every agent's identity as coagent serve
	// --auth configures it: an agent receives only under its own inbox
	// prefix (intents.InboxPrefix). Reads are then answered as the agent a
	// request's reply subject names sees the state under the board rules'
	// readers; without Auth nothing is kept from anyone, since anyone may
	// be anyone. The default is false.
	Auth bool
	// Now is the clock. The default is time.Now.
	Now func() time.Time
	// Logger receives operational messages. The default discards them.
	Logger *slog.Logger
}

func (o *Options) ensureDefaults() {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 1024
	}
	if o.MaxAckPending <= 0 {
		o.MaxAckPending = 4096
	}
	if o.AckWait <= 0 {
		o.AckWait = 5 * time.Second
	}
	if o.DecisionsMaxAge <= 0 {
		o.DecisionsMaxAge = 24 * time.Hour
	}
	if o.EventsMaxAge <= 0 {
		o.EventsMaxAge = 24 * time.Hour
	}
	if o.SubmitWait <= 0 {
		o.SubmitWait = 10 * time.Second
	}
	if o.MaxSubmits <= 0 {
		o.MaxSubmits = 10000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Service is the coordinator on NATS: it consumes intents from JetStream,
// decides them with the Core, makes them durable, then acknowledges them
// and publishes decisions, notices and events; and it answers the API.
// One goroutine owns the Core; everything else reaches it through channels.
type Service struct {
	nc   *nats.Conn
	pub  *nats.Conn // publishes decisions, notices and events
	js   jetstream.JetStream
	core *Core
	subj intents.Subjects
	opts Options
	log  *slog.Logger

	msgs  chan jetstream.Msg
	calls chan func()
	// submits holds a token for every API submit waiting for its decision.
	submits chan struct{}
	acks    chan committed
	// storedAcks carries intents from the acker to ackStored.
	storedAcks chan pendingAck
	cons       jetstream.ConsumeContext
	api        micro.Service
	cancel     context.CancelFunc
	looped     chan struct{} // closed when the loop has stopped
	stopped    chan struct{} // closed when the acker has sent the last of it
	// broken is set once the log failed: the Core has moved past what is
	// durable, so nothing more may be decided or acknowledged. failure is
	// why (see Err).
	broken  atomic.Bool
	failure atomic.Pointer[error]

	mu struct {
		sync.Mutex
		// waiters are API submits waiting for decisions, by intent id.
		waiters map[string][]chan *intents.Decision
		// follows are when each agent had feed consumers made (feed.follow).
		follows map[string][]time.Time
	}
	// open holds the cases sent to the arbiters and not yet settled, so that
	// one the fallback settles can go to the dead-letter stream. Only the
	// loop touches it; it is rebuilt from the engine at start.
	open map[string]*intents.Escalation
	// hot counts where conflicts happen, for conflicts.top; loop-owned,
	// rebuilt from the tail of the log at start.
	hot *conflict.Hotspots
	// rules is the board rules in force as of the last durable batch, for
	// what readers may see (see viewer); nil when none.
	rules atomic.Pointer[rules.Set]
}

// committed is a batch on its way from the loop, which enqueued it in the
// log, to the acker, which waits for it to be durable and then acknowledges
// its messages and publishes its events. The loop decides the next batch
// meanwhile, and the log syncs whatever has been enqueued since its last
// sync in one write.
type committed struct {
	p    *eventlog.Pending
	evs  []*intents.Event
	msgs []jetstream.Msg
	// direct receives the decision of an API submit whose intent has no
	// usable id (the decision cannot be matched by id).
	direct chan *intents.Decision
	// cases are the arbiter cases the batch opened, sent to the arbiters
	// once it is durable; dead are the cases the fallback settled, sent to
	// the dead-letter stream.
	cases, dead []*intents.Escalation
	// done, if set, is closed once the batch is durable and published.
	done chan struct{}
	// rulesChanged says the batch put rules in force: once it is durable,
	// reads are answered under rules.
	rulesChanged bool
	rules        *rules.Set
}

// Start opens the Core in dir, creates the streams and the consumer if
// missing, starts the API and begins consuming. It returns once it is
// serving.
func Start(ctx context.Context, nc *nats.Conn, dir string, opts Options) (*Service, error) {
	opts.ensureDefaults()
	if opts.Core.Logger == nil {
		opts.Core.Logger = opts.Logger
	}
	s := &Service{nc: nc, subj: intents.Subjects{Prefix: opts.Prefix}, opts: opts, log: opts.Logger,
		msgs: make(chan jetstream.Msg, opts.MaxAckPending), calls: make(chan func()), acks: make(chan committed, 64), storedAcks: make(chan pendingAck, 64),
		looped: make(chan struct{}), stopped: make(chan struct{}), submits: make(chan struct{}, opts.MaxSubmits)}
	s.mu.waiters = map[string][]chan *intents.Decision{}
	s.mu.follows = map[string][]time.Time{}
	s.open = map[string]*intents.Escalation{}
	s.hot = conflict.NewHotspots()
	// Decisions and events go out on a connection of their own: the first
	// one carries the consumer's deliveries and acknowledgements, and the
	// server reads each connection on one goroutine.
	pubOpts := nc.Opts
	pubOpts.Name += " (publisher)"
	pub, err := pubOpts.Connect()
	if err != nil {
		return nil, fmt.Errorf("coordinator: connect the publisher: %w", err)
	}
	s.pub = pub
	s.js, err = jetstream.New(pub, jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
		s.log.Warn("publish failed", "subject", m.Subject, "err", err)
	}))
	if err != nil {
		return nil, fmt.Errorf("coordinator: jetstream: %w", err)
	}
	if err := s.ensureStreams(ctx); err != nil {
		pub.Close()
		return nil, err
	}
	if err := s.ensureArbitersConsumer(ctx); err != nil {
		pub.Close()
		return nil, err
	}
	if s.core, err = OpenCore(dir, opts.Core); err != nil {
		pub.Close()
		return nil, err
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, s.subj.Stream(intents.StreamIntents), jetstream.ConsumerConfig{
		Durable:       "coordinator",
		FilterSubject: s.subj.AllIntents(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       opts.AckWait,
		MaxAckPending: opts.MaxAckPending,
		MaxDeliver:    -1,
	})
	if err != nil {
		s.core.Close()
		pub.Close()
		return nil, fmt.Errorf("coordinator: consumer on %s: %w", s.subj.Stream(intents.StreamIntents), err)
	}
	_, set := s.core.Engine().Rules()
	s.rules.Store(set)
	// The conflict dashboard starts from the tail of the log.
	if last := s.core.Log().LastSeq(); last > 0 {
		from := max(s.core.Log().FirstSeq(), last-min(last, hotspotTail)+1)
		_ = s.core.Log().Scan(from, last, func(ev *intents.Event) error {
			if ev.Decision != nil {
				s.hot.Observe(ev.Time, ev.Decision)
			}
			return nil
		})
	}
	if err := s.catchUpFeed(ctx); err != nil {
		s.log.Warn("the event feed may miss the last events before the restart", "err", err)
	}
	// Cases still open after a restart go to the arbiters again: one
	// published just before a crash may not have reached the stream.
	for _, id := range s.core.Engine().Parked() {
		if cs, ok := s.core.Engine().Case(id); ok {
			s.open[cs.ID] = cs
			s.publishCase(s.subj.Escalations(), cs)
		}
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.loop(loopCtx)
	go s.acker()
	if s.api, err = s.startAPI(); err != nil {
		s.Shutdown(ctx)
		return nil, err
	}
	s.cons, err = cons.Consume(func(m jetstream.Msg) { s.msgs <- m },
		jetstream.PullMaxMessages(min(opts.MaxAckPending, 2*opts.MaxBatch)))
	if err != nil {
		s.Shutdown(ctx)
		return nil, fmt.Errorf("coordinator: consume intents: %w", err)
	}
	// The API's subscriptions must be on the server before Start returns,
	// or a request right after it finds no responder.
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		s.Shutdown(ctx)
		return nil, fmt.Errorf("coordinator: flush: %w", err)
	}
	return s, nil
}

// fail stops the service for good: the log failed (a write, a sync, the
// damage a read or a compaction met), so nothing more may be decided or
// acknowledged.
func (s *Service) fail(err error) {
	s.failure.CompareAndSwap(nil, &err)
	s.broken.Store(true)
	s.cancel()
}

// Done is closed once the service has stopped: after Shutdown, or by
// itself when its event log failed (Err says why). A process serving it
// should then end, rather than stay up deciding nothing.
func (s *Service) Done() <-chan struct{} { return s.stopped }

// Err returns why the service stopped by itself, once Done is closed: the
// event log's failure; nil when it was shut down.
func (s *Service) Err() error {
	if e := s.failure.Load(); e != nil {
		return *e
	}
	return nil
}

// Core returns the durable engine. Only for use after Shutdown, or in
// tests that know the loop is idle.
func (s *Service) Core() *Core { return s.core }

// Shutdown stops consuming, lets the loop finish the batch in hand (its
// decisions made durable, acknowledged and published), stops the API and
// closes the log.
func (s *Service) Shutdown(ctx context.Context) error {
	if s.cons != nil {
		s.cons.Drain()
	}
	if s.api != nil {
		s.api.Stop()
	}
	s.cancel()
	select {
	case <-s.stopped:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-s.js.PublishAsyncComplete():
	case <-ctx.Done():
	}
	if err := s.pub.Drain(); err != nil {
		s.log.Warn("drain the publisher", "err", err)
	}
	return s.core.Close()
}

// streamConfigs are the streams of SPEC §6.
func (s *Service) streamConfigs() []jetstream.StreamConfig {
	return []jetstream.StreamConfig{
		{Name: s.subj.Stream(intents.StreamIntents), Subjects: []string{s.subj.AllIntents()},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
			MaxMsgSize: MaxWireMessage},
		{Name: s.subj.Stream(intents.StreamDecisions), Subjects: []string{s.subj.AllDecisions()},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: s.opts.DecisionsMaxAge},
		{Name: s.subj.Stream(intents.StreamEvents), Subjects: []string{s.subj.AllEvents()},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: s.opts.EventsMaxAge},
		{Name: s.subj.Stream(intents.StreamArbiter), Subjects: []string{s.subj.Escalations()},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute},
		{Name: s.subj.Stream(intents.StreamDLQ), Subjects: []string{s.subj.DeadLetters()},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage},
	}
}

// MaxWireMessage is the largest message the intents stream takes: larger
// than an intent may be (1 MiB), so that an oversized intent still reaches
// the coordinator and gets its invalid decision. A server must allow it as
// its max_payload for that; the embedded one does.
const MaxWireMessage = 8 << 20

// hotspotTail is how many of the last events rebuild the conflict
// dashboard at start.
const hotspotTail = 200000

// ErrStreamMismatch is returned (wrapped) when a stream exists with
// settings other than the coordinator's: it is reported, never changed.
var ErrStreamMismatch = errors.New("coordinator: stream exists with other settings")

func (s *Service) ensureStreams(ctx context.Context) error {
	for _, want := range s.streamConfigs() {
		st, err := s.js.Stream(ctx, want.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			if _, err := s.js.CreateStream(ctx, want); err != nil {
				return fmt.Errorf("coordinator: create stream %s: %w", want.Name, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("coordinator: stream %s: %w", want.Name, err)
		}
		have := st.CachedInfo().Config
		var diffs []string
		if !slices.Equal(have.Subjects, want.Subjects) {
			diffs = append(diffs, fmt.Sprintf("subjects %v, want %v", have.Subjects, want.Subjects))
		}
		if have.Retention != want.Retention {
			diffs = append(diffs, fmt.Sprintf("retention %s, want %s", have.Retention, want.Retention))
		}
		if have.Storage != want.Storage {
			diffs = append(diffs, fmt.Sprintf("storage %s, want %s", have.Storage, want.Storage))
		}
		if want.MaxMsgSize != 0 && have.MaxMsgSize != want.MaxMsgSize {
			diffs = append(diffs, fmt.Sprintf("max message size %d, want %d", have.MaxMsgSize, want.MaxMsgSize))
		}
		if want.Duplicates != 0 && have.Duplicates != want.Duplicates {
			diffs = append(diffs, fmt.Sprintf("duplicate window %s, want %s", have.Duplicates, want.Duplicates))
		}
		if len(diffs) > 0 {
			return fmt.Errorf("%w: %s has %v", ErrStreamMismatch, want.Name, diffs)
		}
	}
	return nil
}

// loop owns the Core: it decides intents in batches, fires timers and runs
// the API calls that need the engine, until its context ends; then it
// finishes what it fetched.
func (s *Service) loop(ctx context.Context) {
	defer func() {
		close(s.acks)
		close(s.looped)
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	batch := make([]jetstream.Msg, 0, s.opts.MaxBatch)
	for {
		s.arm(timer)
		select {
		case <-ctx.Done():
			if s.broken.Load() {
				return // what was fetched comes again to the next process
			}
			// Whatever was fetched is decided before stopping: the
			// consumer was drained first, so nothing more comes.
			for {
				select {
				case m := <-s.msgs:
					batch = append(batch[:0], m)
					batch = s.fill(batch)
					s.decide(batch)
				default:
					return
				}
			}
		case m := <-s.msgs:
			batch = append(batch[:0], m)
			batch = s.fill(batch)
			s.decide(batch)
		case call := <-s.calls:
			call()
		case <-timer.C:
			s.commit(s.core.Tick(s.opts.Now()), nil)
		}
	}
}

// fill adds whatever else has already arrived, up to MaxBatch: under load
// batches grow by themselves while the previous one syncs.
func (s *Service) fill(batch []jetstream.Msg) []jetstream.Msg {
	for len(batch) < s.opts.MaxBatch {
		select {
		case m := <-s.msgs:
			batch = append(batch, m)
		default:
			return batch
		}
	}
	return batch
}

func (s *Service) arm(t *time.Timer) {
	d := time.Hour
	if at, ok := s.core.Engine().NextDeadline(); ok {
		d = max(at.Sub(s.opts.Now()), 0)
	}
	t.Reset(d)
}

// decide decides a batch of intent messages in stream order, commits them
// in one synced write, then acknowledges and publishes.
func (s *Service) decide(batch []jetstream.Msg) {
	now := s.opts.Now()
	var evs []*intents.Event
	for _, m := range batch {
		// A subject with more than one token after intents names no agent:
		// the engine records the intent as invalid and answers no one. An
		// empty agent would mean "identity already checked", so a subject
		// with no token at all (NATS allows none) is passed on as "?".
		agent, ok := s.subj.IntentAgent(m.Subject())
		if !ok && agent == "" {
			agent = "?"
		}
		evs = append(evs, s.core.Decide(now, agent, m.Data())...)
	}
	evs = append(evs, s.core.Tick(now)...)
	s.commit(evs, batch)
}

// commit enqueues the batch's events in the log and hands them to the
// acker. A failure to log is fatal for the loop: nothing is acknowledged,
// JetStream delivers again, and a restarted coordinator decides from what
// the log holds.
func (s *Service) commit(evs []*intents.Event, msgs []jetstream.Msg) bool {
	return s.commitWith(committed{evs: evs, msgs: slices.Clone(msgs)})
}

func (s *Service) commitWith(c committed) bool {
	if s.broken.Load() {
		return false
	}
	resolved := map[string]bool{}
	for _, ev := range c.evs {
		switch {
		case ev.Type == intents.EventEscalate:
			if cs, ok := s.core.Engine().Case(ev.Intent); ok {
				c.cases = append(c.cases, cs)
				s.open[cs.ID] = cs
			}
		case ev.Type == intents.EventResolve && ev.Agent != engine.FallbackArbiter:
			resolved[ev.Intent] = true
		case ev.Type == intents.EventRules:
			c.rulesChanged = true
			_, c.rules = s.core.Engine().Rules()
		}
		d := ev.Decision
		if d == nil {
			continue
		}
		s.hot.Observe(ev.Time, d)
		if d.Outcome.Final() && s.open[d.Intent] != nil {
			// Settled: by an arbiter, or, with no resolution, by the
			// fallback at the deadline — then the case is a dead letter.
			if !resolved[d.Intent] {
				c.dead = append(c.dead, s.open[d.Intent])
			}
			delete(s.open, d.Intent)
		}
	}
	p, err := s.core.Commit()
	if err != nil {
		s.log.Error("event log write failed; stopping", "err", err)
		s.fail(err)
		return false
	}
	c.p = p
	s.acks <- c
	return true
}

// acker waits for each committed batch to be durable, in order, then
// publishes its decisions and events and, once JetStream has stored the
// decisions, acknowledges its intents: nothing is told to anyone before it
// is in the log, and no intent is acknowledged before its decision is
// stored — a crash in between only means the intent comes again and gets
// its recorded decision.
func (s *Service) acker() {
	acked := make(chan struct{})
	go s.ackStored(acked)
	defer func() {
		close(s.storedAcks)
		<-acked
		close(s.stopped)
	}()
	for c := range s.acks {
		if c.p != nil && !s.broken.Load() {
			if err := c.p.Wait(context.Background()); err != nil {
				s.log.Error("event log sync failed; stopping", "err", err)
				s.fail(err)
			}
		}
		if s.broken.Load() {
			continue // never acknowledge or publish what is not durable
		}
		if c.rulesChanged {
			s.rules.Store(c.rules)
		}
		stored := s.publish(c.evs)
		for _, cs := range c.cases {
			s.publishCase(s.subj.Escalations(), cs)
		}
		for _, cs := range c.dead {
			s.publishCase(s.subj.DeadLetters(), cs)
		}
		if c.done != nil {
			close(c.done)
		}
		if len(c.msgs) > 0 {
			s.storedAcks <- pendingAck{stored: stored, msgs: c.msgs}
		}
		if c.direct != nil {
			if d := submittedDecision(c.evs); d != nil {
				c.direct <- d
			}
		}
	}
}

// publish sends decisions to their agents, notices on core NATS, and every
// event to the public feed. It returns the acknowledgements of the decision
// messages, which the intents' acknowledgement waits for.
func (s *Service) publish(evs []*intents.Event) []jetstream.PubAckFuture {
	var stored []jetstream.PubAckFuture
	for _, ev := range evs {
		data, err := json.Marshal(ev)
		if err != nil {
			s.log.Error("encode event", "seq", ev.Seq, "err", err)
			continue
		}
		if d := ev.Decision; d != nil {
			if d.Agent != "" && intents.ValidSegment(d.Agent) {
				dd, _ := json.Marshal(d)
				m := nats.NewMsg(s.subj.Decisions(d.Agent))
				m.Header.Set(intents.HeaderIntent, d.Intent)
				m.Data = dd
				if f := s.publishAsync(m); f != nil {
					stored = append(stored, f)
				}
			}
			s.wake(d)
		}
		if ev.Type == intents.EventNotice && intents.ValidSegment(ev.Agent) {
			if err := s.pub.Publish(s.subj.Notices(ev.Agent), data); err != nil {
				s.log.Warn("publish notice", "err", err)
			}
		}
		s.publishFeedData(ev, data)
	}
	return stored
}

// catchUpFeed publishes again the events a previous process made durable
// but was killed before publishing, so that the public feed has every
// event and a watcher resuming from a revision sees no gap. It starts
// after the feed's last message: the rest of that event's change paths,
// then every later event of the log.
func (s *Service) catchUpFeed(ctx context.Context) error {
	lg := s.core.Log()
	if lg.LastSeq() == 0 {
		return nil
	}
	st, err := s.js.Stream(ctx, s.subj.Stream(intents.StreamEvents))
	if err != nil {
		return err
	}
	m, err := st.GetLastMsgForSubject(ctx, s.subj.AllEvents())
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// An empty feed is a new one (or one whose events all aged out):
		// nobody watching it can have seen anything to continue from.
		return nil
	}
	if err != nil {
		return err
	}
	var last intents.Event
	if err := json.Unmarshal(m.Data, &last); err != nil {
		return fmt.Errorf("feed's last message %s: %w", m.Subject, err)
	}
	if last.Seq >= lg.LastSeq() && last.Type != intents.EventChange {
		return nil
	}
	from := last.Seq + 1
	if last.Type == intents.EventChange && last.Change != nil {
		writes := last.Change.Writes
		for i, w := range writes {
			if s.subj.EventsChange(w.Path) == m.Subject {
				for _, rest := range writes[i+1:] {
					s.publishAsync(&nats.Msg{Subject: s.subj.EventsChange(rest.Path), Data: m.Data})
				}
				break
			}
		}
	}
	if from > lg.LastSeq() {
		return nil
	}
	n := 0
	err = lg.Scan(max(from, lg.FirstSeq()), lg.LastSeq(), func(ev *intents.Event) error {
		s.publishFeed(ev)
		n++
		return nil
	})
	s.log.Info("event feed caught up with the log", "from", from, "events", n)
	return err
}

// publishFeed publishes ev on the public feed: a change once per path
// written, anything else once under its type.
func (s *Service) publishFeed(ev *intents.Event) {
	data, err := json.Marshal(ev)
	if err != nil {
		s.log.Error("encode event", "seq", ev.Seq, "err", err)
		return
	}
	s.publishFeedData(ev, data)
}

func (s *Service) publishFeedData(ev *intents.Event, data []byte) {
	if ev.Type == intents.EventChange {
		// Every agent may follow the change feed: the values the readers
		// rules keep from anyone are not in it (log.query and state.get
		// give them to those who may read them).
		if shown := s.anyone().change(ev); shown != ev {
			var err error
			if data, err = json.Marshal(shown); err != nil {
				s.log.Error("encode event", "seq", ev.Seq, "err", err)
				return
			}
		}
		for _, w := range ev.Change.Writes {
			s.publishAsync(&nats.Msg{Subject: s.subj.EventsChange(w.Path), Data: data})
		}
		return
	}
	s.publishAsync(&nats.Msg{Subject: s.subj.Events(ev.Type), Data: data})
}

// pendingAck is a batch of intents to acknowledge once JetStream has stored
// their decisions.
type pendingAck struct {
	stored []jetstream.PubAckFuture
	msgs   []jetstream.Msg
}

// ackStored acknowledges intents once their decisions are stored, off the
// acker's path so that waiting for JetStream does not hold up the next
// batch's publishing.
func (s *Service) ackStored(done chan struct{}) {
	defer close(done)
	for a := range s.storedAcks {
		if err := waitStored(a.stored); err != nil {
			// Not acknowledged: the intents come again and get their
			// recorded decisions published then.
			s.log.Warn("decisions not stored; their intents will be delivered again", "err", err)
			continue
		}
		for _, m := range a.msgs {
			if err := m.Ack(); err != nil {
				s.log.Warn("ack failed; the intent will come again and get its recorded decision", "err", err)
			}
		}
	}
}

// publishCase sends an arbiter case to the work queue, or a dead one to the
// dead-letter stream. The escalation id is the message id, so a case sent
// again (after a restart) within the duplicate window is not queued twice.
//
// A case on the arbiters' queue shows them what role:arbiter may read; the
// dead-letter stream, which only the coordinator's own user may read (and
// `coagent dlq retry` sends again from), keeps the case whole.
func (s *Service) publishCase(subject string, cs *intents.Escalation) {
	if subject == s.subj.Escalations() {
		cs = s.arbiters().escalation(cs)
	}
	data, err := json.Marshal(cs)
	if err != nil {
		s.log.Error("encode case", "escalation", cs.ID, "err", err)
		return
	}
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, cs.ID)
	m.Data = data
	s.publishAsync(m)
}

// apiResolve applies a resolution on the loop and answers once its events
// are durable and published.
func (s *Service) apiResolve(ctx context.Context, res *intents.Resolution) error {
	var rerr error
	done := make(chan struct{})
	var failed bool
	ok := s.call(ctx, func() {
		evs, err := s.core.Resolve(s.opts.Now(), res)
		rerr = err
		failed = !s.commitWith(committed{evs: evs, done: done})
	})
	if !ok || failed {
		return errUnavailable
	}
	select {
	case <-done:
	case <-s.stopped:
		return errUnavailable
	case <-ctx.Done():
		return ctx.Err()
	}
	return rerr
}

// SetRules puts a rules file in force (see package rules) and returns once
// the change is durable; source says where it came from (a path, "api").
// A file that does not compile is an error (a *rules.Error naming the
// field) and changes nothing. It returns the rules event's record.
func (s *Service) SetRules(ctx context.Context, file []byte, source string) (*intents.Rules, error) {
	var rerr error
	var rec *intents.Rules
	done := make(chan struct{})
	var failed bool
	ok := s.call(ctx, func() {
		evs, err := s.core.SetRules(s.opts.Now(), file, source)
		rerr = err
		for _, ev := range evs {
			if ev.Rules != nil {
				rec = ev.Rules
			}
		}
		failed = !s.commitWith(committed{evs: evs, done: done})
	})
	if !ok || failed {
		return nil, errUnavailable
	}
	select {
	case <-done:
	case <-s.stopped:
		return nil, errUnavailable
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return rec, rerr
}

// Rules returns the rules in force (nil when none were ever set).
func (s *Service) Rules(ctx context.Context) (*intents.Rules, error) {
	var rec *intents.Rules
	if !s.call(ctx, func() { rec, _ = s.core.Engine().Rules() }) {
		return nil, errUnavailable
	}
	return rec, nil
}

// waitStored waits for JetStream to acknowledge every future.
func waitStored(fs []jetstream.PubAckFuture) error {
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for _, f := range fs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-timeout.C:
			return errors.New("coordinator: no acknowledgement from JetStream in 10s")
		}
	}
	return nil
}

func (s *Service) publishAsync(m *nats.Msg) jetstream.PubAckFuture {
	f, err := s.js.PublishMsgAsync(m)
	if err != nil {
		s.log.Warn("publish", "subject", m.Subject, "err", err)
		return nil
	}
	return f
}

// wake hands a decision to the API submits waiting on its intent.
func (s *Service) wake(d *intents.Decision) {
	if d.Intent == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	chans := s.mu.waiters[d.Intent]
	for _, ch := range chans {
		select {
		case ch <- d:
		default:
		}
	}
	if d.Outcome.Final() {
		delete(s.mu.waiters, d.Intent)
	}
}

// await registers ch for the decisions of intent id.
func (s *Service) await(id string, ch chan *intents.Decision) {
	s.mu.Lock()
	s.mu.waiters[id] = append(s.mu.waiters[id], ch)
	s.mu.Unlock()
}

// forget drops ch from the waiters of id.
func (s *Service) forget(id string, ch chan *intents.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.waiters[id] = slices.DeleteFunc(s.mu.waiters[id], func(c chan *intents.Decision) bool { return c == ch })
	if len(s.mu.waiters[id]) == 0 {
		delete(s.mu.waiters, id)
	}
}

// call runs fn on the loop and waits for it; false if the loop is gone.
func (s *Service) call(ctx context.Context, fn func()) bool {
	done := make(chan struct{})
	select {
	case s.calls <- func() { fn(); close(done) }:
	case <-s.looped:
		return false
	case <-ctx.Done():
		return false
	}
	select {
	case <-done:
		return true
	case <-s.looped:
		return false
	}
}

// apiSubmit decides an intent given to the API directly, as sent by agent
// ("": the body's agent is the agent), and waits for its final decision up to wait; past it, the
// latest interim one is the answer. Nothing is answered before it is
// durable: the acker delivers.
func (s *Service) apiSubmit(ctx context.Context, agent string, raw []byte, wait time.Duration) (*intents.Decision, error) {
	ch := make(chan *intents.Decision, 4)
	var id string
	var failed bool
	ok := s.call(ctx, func() {
		evs := s.core.Decide(s.opts.Now(), agent, raw)
		var direct chan *intents.Decision
		id = submittedID(evs)
		if id != "" {
			s.await(id, ch)
		} else {
			direct = ch
		}
		failed = !s.commitWith(committed{evs: evs, direct: direct})
	})
	if !ok || failed {
		if id != "" {
			s.forget(id, ch)
		}
		return nil, errUnavailable
	}
	if id != "" {
		defer s.forget(id, ch)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var last *intents.Decision
	for {
		select {
		case d := <-ch:
			last = d
			if d.Outcome.Final() {
				return d, nil
			}
		case <-timer.C:
			if last != nil {
				return last, nil
			}
			// Not even durable yet: give it the time a sync takes.
			timer.Reset(time.Second)
		case <-ctx.Done():
			if last != nil {
				return last, nil
			}
			return nil, ctx.Err()
		case <-s.stopped:
			if last != nil {
				return last, nil
			}
			return nil, errUnavailable
		}
	}
}

// submittedID returns the id of the intent whose decision evs, the events
// of one Decide, hold: the intent of its received event. Timers that fired
// first, and intents it freed, have decisions of their own in evs too.
func submittedID(evs []*intents.Event) string {
	for _, ev := range evs {
		if ev.Type == intents.EventIntent {
			return ev.Intent
		}
	}
	return ""
}

// submittedDecision returns the decision of the intent evs were decided
// for (see submittedID): the first decision after its received event.
func submittedDecision(evs []*intents.Event) *intents.Decision {
	seen := false
	for _, ev := range evs {
		switch {
		case ev.Type == intents.EventIntent:
			seen = true
		case seen && ev.Decision != nil:
			return ev.Decision
		}
	}
	return nil
}

var errUnavailable = errors.New("coordinator: not serving")

// stateReply is the answer of state.get.
type stateReply struct {
	Rev    uint64                `json:"rev"`
	Values map[string]stateValue `json:"values"`
}

type stateValue struct {
	Exists  bool   `json:"exists"`
	Value   any    `json:"value,omitempty"`
	Version uint64 `json:"version"`
	ModRev  uint64 `json:"mod_rev,omitempty"`
	// Redacted lists what the board rules' readers keep from the reader:
	// the path itself (then nothing of it is shown, not even whether it
	// exists) or paths under it, removed from the value.
	Redacted []string `json:"redacted,omitempty"`
}

func (s *Service) stateGet(ctx context.Context, paths []string, v viewer) (*stateReply, error) {
	out := &stateReply{Values: map[string]stateValue{}}
	ok := s.call(ctx, func() {
		t := s.core.Engine().State()
		out.Rev = t.Rev()
		for _, p := range paths {
			e := t.Lookup(p)
			value, hidden := v.value(p, e.Value)
			if len(hidden) == 1 && hidden[0] == p {
				out.Values[p] = stateValue{Redacted: hidden}
				continue
			}
			out.Values[p] = stateValue{Exists: e.Exists, Value: value, Version: e.Version, ModRev: e.ModRev, Redacted: hidden}
		}
	})
	if !ok {
		return nil, errUnavailable
	}
	return out, nil
}

// decisionGet returns the decision recorded for intent id, nil when there
// is none: the engine's (the latest, interim ones included) or, for an id
// older than its window, the log's record.
func (s *Service) decisionGet(ctx context.Context, id string) (*intents.Decision, error) {
	var d *intents.Decision
	if !s.call(ctx, func() { d, _ = s.core.Engine().Decision(id) }) {
		return nil, errUnavailable
	}
	if d != nil {
		return d, nil
	}
	d, err := s.core.Log().Decision(id)
	if errors.Is(err, eventlog.ErrNotFound) {
		return nil, nil
	}
	return d, err
}

type txnFilter struct {
	Agent string `json:"agent,omitempty"`
	Path  string `json:"path,omitempty"`
}

// txnList lists the transactions in flight. A fence is a capability, and
// a propose's writes may carry values: v sees its own transactions whole,
// and another agent's without its fence and with only the paths and ops of
// its writes (an observer sees everything).
func (s *Service) txnList(ctx context.Context, f txnFilter, v viewer) (any, error) {
	var out []map[string]any
	ok := s.call(ctx, func() {
		for _, t := range s.core.Engine().Txns() {
			if f.Agent != "" && t.Agent != f.Agent {
				continue
			}
			if f.Path != "" && !slices.ContainsFunc(t.Writes, func(w intents.Write) bool { return intents.Overlaps(w.Path, f.Path) }) &&
				!slices.ContainsFunc(t.Reads, func(r intents.Read) bool { return intents.Overlaps(r.Path, f.Path) }) {
				continue
			}
			row := map[string]any{"txn": t.Txn, "agent": t.Agent, "reads": t.Reads, "writes": t.Writes, "lease_expires": t.LeaseExpires}
			if v.all || t.Agent == v.Agent {
				row["fence"] = t.Fence
			} else {
				writes := make([]intents.Write, len(t.Writes))
				for i, w := range t.Writes {
					writes[i] = intents.Write{Path: w.Path, Op: w.Op}
				}
				row["writes"] = writes
			}
			out = append(out, row)
		}
	})
	if !ok {
		return nil, errUnavailable
	}
	if out == nil {
		out = []map[string]any{}
	}
	return map[string]any{"txns": out}, nil
}

// logQuery answers log.query as v may see the log (see viewer.event): a
// page may hold fewer events than the query's limit, none even, when some
// are not v's to see; next goes on after them all.
func (s *Service) logQuery(q eventlog.Query, v viewer) (any, error) {
	evs, next, err := s.core.Log().Query(q)
	if err != nil {
		return nil, err
	}
	shown := make([]*intents.Event, 0, len(evs))
	for _, ev := range evs {
		if ev, ok := v.event(ev); ok {
			shown = append(shown, ev)
		}
	}
	return map[string]any{"events": shown, "next": next}, nil
}

// conflictsTop returns the places with the most conflicts, as v may see
// them: not the boards and documents kept from it whole, and of the pairs of
// agents only those it is one of (an observer sees all).
func (s *Service) conflictsTop(ctx context.Context, limit int, v viewer) ([]conflict.Spot, error) {
	var all []conflict.Spot
	if !s.call(ctx, func() { all = s.hot.Top(s.opts.Now(), 0) }) {
		return nil, errUnavailable
	}
	out := []conflict.Spot{}
	for _, sp := range all {
		if len(out) == limit {
			break
		}
		if !v.all {
			switch sp.Kind {
			case conflict.SpotPair:
				a, b, _ := strings.Cut(sp.Name, "/")
				if a != v.Agent && b != v.Agent {
					continue
				}
			case conflict.SpotPrefix:
				if v.set.Hidden(v.Viewer, sp.Name) {
					continue
				}
			}
		}
		out = append(out, sp)
	}
	return out, nil
}
