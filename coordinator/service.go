package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/coagent/coagent/conflict"
	"github.com/coagent/coagent/coordinator/migrate"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/bugs"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures a Service. The zero value works: every field
// documents its default, applied by EnsureDefaults, and Start refuses
// options Validate finds wrong.
type Options struct {
	// Prefix is the subject prefix: one or more dot-separated tokens, none
	// empty, with no wildcard (* or >) and no white space. The default is
	// "coagent" (intents.DefaultPrefix).
	Prefix string
	// Shard names the shard this coordinator decides (docs/sharding.md):
	// its log joins it at the first start, and a log of another shard is
	// refused. Prefix must be the shard's own (intents.Subjects.Shard:
	// coagent.s1 for shard s1), so that its streams, lease key and
	// replicated log are its own. The default is the default shard, whose
	// prefix is the deployment's.
	Shard string
	// Core configures the engine and the log; see CoreOptions. Its Logger
	// defaults to Logger.
	Core CoreOptions
	// MaxBatch bounds how many intents are decided and made durable in one
	// synced write. The default is 1024.
	MaxBatch int
	// MaxIntake bounds the API submits and stream messages waiting for the
	// loop; a submit that finds it full is answered unavailable at once
	// (send the same intent again). The default is 8192.
	MaxIntake int
	// MaxAckPending bounds the intents fetched from the intents stream but
	// not yet acknowledged. The default is 4096.
	MaxAckPending int
	// AckWait is how long JetStream waits for an acknowledgement before it
	// delivers an intent again: after a crash, the intents the dead process
	// held come back within it. The default is 5s.
	AckWait time.Duration
	// DecisionsMaxAge is how long decisions stay in their stream. The
	// default is 24h.
	DecisionsMaxAge time.Duration
	// EventsMaxAge is how long the change feed keeps changes. The default
	// is 24h.
	EventsMaxAge time.Duration
	// Replicas is how many servers of a JetStream cluster store each
	// stream the coordinator creates, 1 to 5 (SPEC §10): 3 rides the loss
	// of one server, 5 of two; a server alone can only hold 1. A stream
	// that exists with other replicas is reported (at Warn) and kept as it
	// is: changing it is the operator's call (nats stream edit --replicas).
	// The default is 1.
	Replicas int
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
	// Roles, if set, returns the roles agents hold beside those of the
	// rules (the agent registry's), merged into every rules file put in
	// force through the API's rules.set, as coagent serve merges them into
	// its --rules file. It is called on the API's goroutines, once per
	// rules.set. The default is nil: none.
	Roles func() map[string][]string
	// Interest, if set, reports whether anyone is subscribed to a subject:
	// the live events of a type (coagent.events.<type>, core NATS) are
	// encoded and sent only while someone listens. An embedded server can
	// say (InterestOf); with an external one every event is sent. The
	// default is nil.
	Interest func(subject string) bool
	// SlowGroup is how long a group may take from its commit to being
	// durable before it is logged (at Info, at most one line a second,
	// with how many more were slow meanwhile): the sign of a slow disk or
	// of groups too large. The default is 100ms.
	SlowGroup time.Duration
	// Metrics, if set, is where the service registers its Prometheus
	// metrics (metrics.go) at start, and takes them out of at Shutdown, so
	// that the Services a cluster.Member starts one after the other register in
	// the same one; the caller registers the Go and process collectors. The
	// default (nil) is a registry of the service's own, with the Go and
	// process collectors, which Registry returns. There is never a global
	// one.
	Metrics prometheus.Registerer
	// Notify, if set, is told of what needs a person, once it is durable
	// and only by the coordinator that decided it: cases waiting for the
	// arbiters, dead letters (cases and tasks), reclaims, reconciles and
	// operators' overrides (notify.Webhook posts them). Post must not
	// block. The default is nil: none.
	Notify Notifier
	// Now is the clock. The default is time.Now.
	Now func() time.Time
	// Logger receives operational messages. The default discards them.
	Logger *slog.Logger
	// Bugs plants deliberate bugs, for the robustness suite to show that
	// its checks catch them (internal/bugs: nothing outside this module
	// can set it). The default, nil, plants none.
	Bugs *bugs.Set
}

// EnsureDefaults fills every zero field with its default, Core's
// included.
func (o *Options) EnsureDefaults() {
	if o.Prefix == "" {
		o.Prefix = intents.DefaultPrefix
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 1024
	}
	if o.MaxIntake == 0 {
		o.MaxIntake = 8192
	}
	if o.MaxAckPending == 0 {
		o.MaxAckPending = 4096
	}
	if o.AckWait == 0 {
		o.AckWait = 5 * time.Second
	}
	if o.DecisionsMaxAge == 0 {
		o.DecisionsMaxAge = 24 * time.Hour
	}
	if o.EventsMaxAge == 0 {
		o.EventsMaxAge = 24 * time.Hour
	}
	if o.SubmitWait == 0 {
		o.SubmitWait = 10 * time.Second
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.MaxSubmits == 0 {
		o.MaxSubmits = 10000
	}
	if o.SlowGroup == 0 {
		o.SlowGroup = 100 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Core.Logger == nil {
		o.Core.Logger = o.Logger
	}
	o.Core.EnsureDefaults()
}

// Validate reports every problem of the options at once, Core's included,
// each naming the field and its value. A zero field is not a problem: it
// takes its default. Start calls EnsureDefaults, then Validate.
func (o *Options) Validate() error {
	var errs []error
	if o.Prefix != "" {
		if err := validPrefix(o.Prefix); err != nil {
			errs = append(errs, fmt.Errorf("coordinator options: Prefix %q: %w", o.Prefix, err))
		}
	}
	if o.Shard != "" && o.Shard != intents.DefaultShard {
		if err := intents.CheckShard(o.Shard); err != nil {
			errs = append(errs, fmt.Errorf("coordinator options: Shard: %w", err))
		} else if !strings.HasSuffix(o.Prefix, "."+o.Shard) {
			errs = append(errs, fmt.Errorf("coordinator options: Prefix %q is not shard %s's own (want it to end in .%s)", o.Prefix, o.Shard, o.Shard))
		}
	}
	count := func(name string, n int) {
		if n < 0 {
			errs = append(errs, fmt.Errorf("coordinator options: %s is negative (%d)", name, n))
		}
	}
	count("MaxBatch", o.MaxBatch)
	count("MaxIntake", o.MaxIntake)
	count("MaxAckPending", o.MaxAckPending)
	count("MaxSubmits", o.MaxSubmits)
	if o.Replicas < 0 || o.Replicas > MaxReplicas {
		errs = append(errs, fmt.Errorf("coordinator options: Replicas is %d, want 1 to %d", o.Replicas, MaxReplicas))
	}
	dur := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("coordinator options: %s is negative (%s)", name, d))
		}
	}
	dur("AckWait", o.AckWait)
	dur("DecisionsMaxAge", o.DecisionsMaxAge)
	dur("EventsMaxAge", o.EventsMaxAge)
	dur("SubmitWait", o.SubmitWait)
	dur("SlowGroup", o.SlowGroup)
	errs = append(errs, o.Core.Validate())
	return errors.Join(errs...)
}

// validPrefix says what is wrong with a subject prefix: the coordinator
// subscribes under it, so a wildcard would take in other subjects, and an
// empty token or white space makes subjects the server refuses.
func validPrefix(p string) error {
	for _, tok := range strings.Split(p, ".") {
		switch {
		case tok == "":
			return errors.New("an empty token")
		case tok == "*" || tok == ">" || strings.ContainsAny(tok, "*>"):
			return errors.New("a wildcard")
		case strings.ContainsFunc(tok, unicode.IsSpace):
			return errors.New("white space")
		}
	}
	return nil
}

// Service is the coordinator on NATS (SPEC §6, version 2). API submits and
// the messages of the intents stream enter one bounded intake; one loop,
// which owns the Core, decides what has arrived as one batch and commits
// it as one durable group; the output stage waits for each group to be
// durable, in order, then answers its requests, publishes its events, and
// hands its stream messages to the acknowledger, which acknowledges them
// in bulk once their decisions are stored. The API's reads reach the Core
// through the loop.
//
// The pieces, by file: intake and loop (loop.go), output and
// acknowledgement (output.go), waiting requests (replies.go), streams and
// the change feed at start (streams.go), the API (api.go), the change
// feed's consumers (feed.go), what a reader may see (view.go).
type Service struct {
	nc  *nats.Conn
	pub *nats.Conn // publishes replies, decisions, notices and events
	js  jetstream.JetStream
	// feed publishes the change feed's acknowledged messages (see
	// feeder), with a pending bound of its own.
	feed jetstream.JetStream
	// feeder puts the changes on the feed, off the output stage.
	feeder *feeder
	core   *Core
	subj   intents.Subjects
	opts   Options
	log    *slog.Logger

	intake chan input // API submits and stream messages, in arrival order
	acc    *output    // loop-owned: the group being gathered
	// lanes are the claims of a lane's next task that wait for one to be
	// claimable, by lane, and woken those a group's changes to their lane
	// woke, to decide again; both loop-owned.
	lanes map[string][]laneWaiter
	woken []input
	// committed counts the groups the loop handed to the output stage
	// (loop-owned), durable those the log made durable; durableKick wakes
	// the loop when one is, so that it commits the next.
	committed   int64
	durable     atomic.Int64
	durableKick chan struct{}
	maxInflight int64       // see maxInflightLocal
	calls       chan func() // API calls that need the engine
	// flying are the telling events of the groups committed and not yet
	// known to be durable (loop-owned); reads holds the reads waiting for
	// them (reads.go).
	flying []*intents.Event
	reads  heldReads
	// logReaders are the API's reads of the event log, which Shutdown
	// waits for before it closes the log.
	logReaders logReaders
	groups     chan *output    // durable groups, from the loop to the output stage
	acks       chan pendingAck // stream messages, from the output stage to the acknowledger
	replies    *replies        // API submits waiting for their decisions
	cases      *caseQueue      // the arbiters' queue, kept to the open cases
	submits    chan struct{}   // a token for every API submit not yet answered
	cons       jetstream.ConsumeContext
	api        micro.Service
	cancel     context.CancelFunc
	// xs runs the cross-shard applies this shard coordinates and asks
	// after the parts it prepared (xshard.go).
	xs      *xshards
	looped  chan struct{} // closed when the loop has stopped
	stopped chan struct{} // closed when the output stage has sent the last of it
	// broken is set once the log failed: the Core has moved past what is
	// durable, so nothing more may be decided, answered or acknowledged.
	// failure is why (see Err).
	broken  atomic.Bool
	failure atomic.Pointer[error]

	// node is the name of this coordinator in a cluster ("" alone).
	node string
	// stamp marks the answers of its reads with node (nil alone).
	stamp stamp
	// leased, in a cluster, reports whether this coordinator's lease is in
	// force (nil alone: it always is).
	leased func() bool

	mu struct {
		sync.Mutex
		// follows are the feed consumers made for each agent
		// (feed.follow) within followInactive.
		follows map[string][]followMark
	}
	// hot counts where conflicts happen, for conflicts.top; loop-owned,
	// rebuilt from the tail of the log at start.
	hot *conflict.Hotspots
	// rules is the board rules in force as of the last durable group, for
	// what readers may see (see viewer); nil when none.
	rules atomic.Pointer[rules.Set]
	// routing is what submits are routed by to other shards (router.go).
	routing atomic.Pointer[routing]

	// metrics are the service's Prometheus collectors; registry is its
	// own registry when Options.Metrics is nil.
	metrics  *metrics
	registry *prometheus.Registry
}

// Start opens the Core in dir, creates the streams and the consumers if
// missing, starts the API and begins consuming. It returns once it is
// serving. Streams a wire v1 coordinator made are migrated first
// (migrate.Streams); one that cannot be is an error wrapping
// migrate.ErrRefused, which names the nats command to run.
func Start(ctx context.Context, nc *nats.Conn, dir string, opts Options) (*Service, error) {
	return start(ctx, nc, dir, opts, nil)
}

// StartActive is Start for the active coordinator of a cluster: it
// decides with active.Core if set, and hands every group to the
// Replicator that active.Replicator makes before its own log writes it.
// See Active.
func StartActive(ctx context.Context, nc *nats.Conn, dir string, opts Options, active *Active) (*Service, error) {
	return start(ctx, nc, dir, opts, active)
}

func start(ctx context.Context, nc *nats.Conn, dir string, opts Options, active *Active) (*Service, error) {
	began := time.Now()
	opts.EnsureDefaults()
	if opts.Bugs != nil {
		opts.Core.Engine.Bugs = *opts.Bugs
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("coordinator: start: %w", err)
	}
	s := &Service{nc: nc, subj: intents.Subjects{Prefix: opts.Prefix}, opts: opts, log: opts.Logger,
		intake: make(chan input, opts.MaxIntake), calls: make(chan func()), groups: make(chan *output, outputQueue),
		acks: make(chan pendingAck, 64), submits: make(chan struct{}, opts.MaxSubmits),
		looped: make(chan struct{}), stopped: make(chan struct{}), hot: conflict.NewHotspots(), durableKick: make(chan struct{}, 1),
		xs: newXShards()}
	s.mu.follows = map[string][]followMark{}
	s.maxInflight = maxInflightLocal
	if active != nil {
		s.maxInflight = maxInflightReplicated
	}
	s.metrics = newMetrics(s)
	if sync := opts.Core.Log.OnSync; sync != nil {
		opts.Core.Log.OnSync = func(events int, took time.Duration) {
			sync(events, took)
			s.metrics.synced(events, took)
		}
	} else {
		opts.Core.Log.OnSync = s.metrics.synced
	}
	// Stored decisions, events, the change feed and the replicated log's
	// appends go out on a connection of their own: the first one carries
	// the requests, the consumer's deliveries and the acknowledgements, and
	// the server reads each connection on one goroutine. A submit's answer
	// goes back on the connection its request came in on, as micro answers
	// (sent on this one instead, three alternated rounds of coagent bench
	// --agents 16,64 --unsynced could not tell the two apart).
	pubOpts := nc.Opts
	pubOpts.Name += " (publisher)"
	if u := nc.ConnectedUrl(); u != "" {
		// On the first connection's server first: picked at random from a
		// cluster's URLs, the publisher could land on another node, and the
		// loss of that node alone would cut the coordinator's appends and
		// answers off while it still held the lease.
		pubOpts.Servers = append([]string{u}, pubOpts.Servers...)
		pubOpts.NoRandomize = true
	}
	pub, err := pubOpts.Connect()
	if err != nil {
		return nil, fmt.Errorf("coordinator: connect the publisher: %w", err)
	}
	s.pub = pub
	publisher := func(pending int) (jetstream.JetStream, error) {
		return jetstream.New(pub, jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			s.log.Warn("publish failed", "subject", m.Subject, "err", err)
		}), jetstream.WithPublishAsyncMaxPending(pending),
			// A publish whose stream leader died unanswered (a node of a
			// cluster failed) is given up after this, rather than held in
			// the pending count for ever, which would stall the feed and
			// keep Shutdown waiting.
			jetstream.WithPublishAsyncTimeout(publishTimeout))
	}
	if s.js, err = publisher(maxFeedPending); err != nil {
		return nil, fmt.Errorf("coordinator: jetstream: %w", err)
	}
	// The feed's acknowledgements each cover up to feedAckEvery+1 changes:
	// as many changes may be on their way as before.
	if s.feed, err = publisher(maxFeedPending / (feedAckEvery + 1)); err != nil {
		return nil, fmt.Errorf("coordinator: jetstream: %w", err)
	}
	// A member taking over bounds each step of the set-up that asks
	// JetStream (see Active.Setup).
	setupCtx := func() (context.Context, context.CancelFunc) {
		if active != nil && active.Setup > 0 {
			return context.WithTimeout(ctx, active.Setup)
		}
		return ctx, func() {}
	}
	streamsCtx, cancelStreams := setupCtx()
	defer cancelStreams()
	// A store written by wire v1 is moved to v2 first, before anything
	// takes an intent.
	if err := migrate.Streams(streamsCtx, s.js, s.subj, s.log); err != nil {
		pub.Close()
		return nil, err
	}
	cons, err := s.ensureStreams(streamsCtx)
	if err != nil {
		pub.Close()
		return nil, err
	}
	if err := s.ensureArbitersConsumer(streamsCtx); err != nil {
		pub.Close()
		return nil, err
	}
	warm := active != nil && active.Core != nil
	if warm {
		s.core, active.Core = active.Core, nil
		s.core.Log().SetOnSync(opts.Core.Log.OnSync)
	} else if s.core, err = OpenCore(dir, opts.Core); err != nil {
		pub.Close()
		return nil, err
	}
	if active != nil {
		s.node, s.stamp, s.leased = active.Node, stampOf(active.Node, intents.RoleActive), active.Leased
		if active.Replicator != nil {
			if s.core.replicate, err = active.Replicator(pub, s.core.Log()); err != nil {
				s.core.Close()
				pub.Close()
				return nil, err
			}
		}
	}
	if opts.Shard != "" {
		// A coordinator of a named shard says so on its reads' answers.
		s.stamp = s.stamp.shard(opts.Shard)
	}
	s.replies = newReplies(opts.Now)
	// What the engine was rebuilt from, for the start's log line (read
	// now: the loop takes snapshots once it runs).
	snapAt, lastAt := s.core.lastSnap, s.core.Log().LastSeq()
	// Everything the engine was rebuilt from is durable.
	s.reads.release(s.core.Engine().Seq(), s.core.Engine().State().Rev())
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
	// The feed is brought to the log first: a change a killed process
	// made durable and did not publish is published now.
	s.feeder = newFeeder(s)
	if s.feeder.mend(); s.feeder.broken != nil {
		s.log.Warn("the change feed may miss the last changes before the restart until the stream answers", "err", s.feeder.broken)
	}
	// The arbiters' queue is brought to the cases open now: those settled
	// while no coordinator ran leave it, and the open ones it lacks (one
	// published just before a crash may not have reached the stream) go to
	// the arbiters again.
	s.cases = newCaseQueue(s)
	casesCtx, cancelCases := setupCtx()
	queued, err := s.cases.load(casesCtx, func(id string) bool { _, ok := s.core.Engine().Case(id); return ok })
	cancelCases()
	if err != nil {
		s.core.Close()
		pub.Close()
		return nil, fmt.Errorf("coordinator: read the arbiters' queue %s: %w", s.subj.Stream(intents.StreamArbiter), err)
	}
	go s.cases.run()
	republished := 0
	for _, id := range s.core.Engine().Parked() {
		if cs, ok := s.core.Engine().Case(id); ok && !queued[id] {
			s.cases.published(id, s.publishCase(s.subj.Escalations(), cs))
			republished++
		}
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.loop(loopCtx)
	go s.feeder.run()
	go s.output()
	go s.replies.run()
	// The gauges read the log, the publisher and the engine through the
	// loop, so they are registered once those run.
	if s.registry, err = s.metrics.register(opts.Metrics); err != nil {
		s.Shutdown(ctx)
		return nil, fmt.Errorf("coordinator: register the metrics: %w", err)
	}
	if err := s.join(ctx); err != nil {
		s.Shutdown(ctx)
		return nil, err
	}
	if !s.call(ctx, s.setRouting) {
		s.Shutdown(ctx)
		return nil, errUnavailable
	}
	if s.api, err = s.startAPI(); err != nil {
		s.Shutdown(ctx)
		return nil, err
	}
	if err := s.xstart(ctx); err != nil {
		s.Shutdown(ctx)
		return nil, err
	}
	// Stream messages never fill the intake past MaxAckPending, which
	// bounds what the consumer hands over unacknowledged; the callback may
	// wait for room, holding up only the consumer. Heartbeats every
	// second: a pull lost with a node that stopped, or while the
	// consumer elected a leader, is found out and made again within two
	// seconds, where the default heartbeat (half the 30 s expiry) left
	// the stream's intents undecided for half a minute.
	s.cons, err = cons.Consume(func(m jetstream.Msg) { s.intake <- input{msg: m, at: time.Now()} },
		jetstream.PullMaxMessages(min(opts.MaxAckPending, 2*opts.MaxBatch)), jetstream.PullHeartbeat(time.Second))
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
	s.log.Info("coordinator started", "dir", dir, "prefix", opts.Prefix, "auth", opts.Auth,
		"events", lastAt, "first", s.core.Log().FirstSeq(), "snapshot", snapAt, "replayed", replayed(warm, lastAt-snapAt), "warm", warm,
		"open_cases", len(queued)+republished, "took", time.Since(began).Round(time.Millisecond))
	return s, nil
}

// replayed is how many events the start folded to rebuild the engine:
// none when it took the Core a standby followed with.
func replayed(warm bool, n uint64) uint64 {
	if warm {
		return 0
	}
	return n
}

// InterestOf returns an Options.Interest for the clients of an embedded
// server's global account: its subscriptions, routed ones included, as
// the server itself matches them.
func InterestOf(ns *server.Server) func(subject string) bool {
	acc := ns.GlobalAccount()
	return acc.SubscriptionInterest
}

// errPublishesPending: asynchronous publishes were still unacknowledged
// when the wait for them ended.
var errPublishesPending = errors.New("coordinator: publishes not acknowledged")

// awaitPublishes waits until each of jss has every asynchronous publish
// acknowledged, until timeout fires (errPublishesPending), or until ctx
// ends.
func awaitPublishes(ctx context.Context, timeout <-chan time.Time, jss ...jetstream.JetStream) error {
	for _, js := range jss {
		select {
		case <-js.PublishAsyncComplete():
		case <-timeout:
			return errPublishesPending
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// publishTimeout bounds the wait for JetStream's answer to one of the
// service's asynchronous publishes (changes, decisions, cases).
const publishTimeout = 10 * time.Second

// maxFeedPending bounds the change feed's messages sent and not yet stored
// by JetStream: past it, publishing waits, which is the feed's flow
// control.
const maxFeedPending = 16384

// hotspotTail is how many of the last events rebuild the conflict
// dashboard at start.
const hotspotTail = 200000

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

// Registry returns the service's own metrics registry, or nil when
// Options.Metrics named one to register in.
func (s *Service) Registry() *prometheus.Registry { return s.registry }

// Core returns the durable engine. Only for use after Shutdown, or in
// tests that know the loop is idle.
func (s *Service) Core() *Core { return s.core }

// Shutdown stops consuming and taking requests, lets the loop decide what
// arrived (its decisions made durable, answered, published and
// acknowledged), and closes the log. A submit still waiting for a final
// decision is answered with its latest interim one.
func (s *Service) Shutdown(ctx context.Context) error {
	// Out of the registry first: a scrape must not read a closed log.
	s.metrics.unregister()
	if s.cons != nil {
		s.cons.Drain()
	}
	if s.api != nil {
		s.api.Stop()
	}
	s.xclose()
	s.cancel()
	select {
	case <-s.stopped:
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.replies != nil {
		s.replies.close()
	}
	// The feed's last publishes are waited for a moment: each is given up
	// after publishTimeout anyway.
	drained := time.NewTimer(publishTimeout)
	if err := awaitPublishes(ctx, drained.C, s.js, s.feed); errors.Is(err, errPublishesPending) {
		s.log.Warn("the change feed's last publishes were not all acknowledged", "pending", s.js.PublishAsyncPending()+s.feed.PublishAsyncPending())
	}
	drained.Stop()
	if err := s.pub.Drain(); err != nil {
		s.log.Warn("drain the publisher", "err", err)
	}
	s.logReaders.close()
	last := s.core.Log().LastSeq()
	if err := s.core.Close(); err != nil {
		return err
	}
	s.log.Info("coordinator stopped", "events", last)
	return nil
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

var errUnavailable = errors.New("coordinator: not serving")
