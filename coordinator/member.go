package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MemberOptions configures a Member: the coordinator's Options, and its
// part in the cluster.
type MemberOptions struct {
	Options
	// Node names this coordinator, unique in the cluster; required.
	Node string
	// LeaseTTL is how long the leadership lasts unless the active
	// coordinator renews it (it does every third of it): how soon a
	// standby takes over from one that stopped without handing over, or
	// was cut off. The default is 3 seconds; at least 1 second.
	LeaseTTL time.Duration
	// SyncLocal makes the local event log sync every group, as a
	// coordinator alone does. By default a member's does not: a group is
	// answered once a quorum of the cluster has it in COAGENT_LOG, which
	// is the log of record; a local log that lost its unsynced tail (the
	// machine, not the process, crashed) is behind the stream and catches
	// up from it, as after any crash between the two writes. Syncing it
	// would cost each group a disk flush on the answer's path, and buy
	// nothing while JetStream itself keeps the stream in the servers'
	// memory until its own sync interval (nats-server's sync_interval:
	// set it to always to have every group on a quorum of disks).
	SyncLocal bool
	// TrimEvery is how many events the active coordinator appends
	// between the snapshots it stores of the replicated log, after each
	// of which it trims the log below it (see snapshot.go); a negative
	// value stores none but those Snapshot asks for. The default is
	// DefaultTrimEvery.
	TrimEvery int64
	// OnActive, if set, is called each time this member has become the
	// active coordinator, with its Service (to put a rules file in force,
	// say); an error is logged.
	OnActive func(ctx context.Context, svc *Service) error

	// followStall replaces DefaultFollowStall in tests; wrapFollow, if
	// set, wraps each reader of the replicated log a standby opens (a
	// test makes one stall).
	followStall time.Duration
	wrapFollow  func(jetstream.MessagesContext) jetstream.MessagesContext
}

// DefaultLeaseTTL is MemberOptions.LeaseTTL's default.
const DefaultLeaseTTL = 3 * time.Second

// Member is one coordinator of a cluster (SPEC §10). It is a standby that
// follows the replicated log COAGENT_LOG into its own event log and
// engine, until it takes the leadership key of a replicated key-value
// bucket (create-if-absent, or compare-and-set over a lease that lapsed:
// see lease); then, having read
// the log to its end, it starts the Service, which appends every group to
// the log before its own log writes it and answers nothing the stream has
// not stored. It renews the key while active; when it cannot (another
// took it while this one was paused or cut off), or when an append is
// refused (ErrFenced: another appended first), it stops the Service,
// which answers and acknowledges nothing more, and follows again, from
// its own log, which is never ahead of the stream.
type Member struct {
	nc   *nats.Conn
	dir  string
	opts MemberOptions
	subj intents.Subjects
	log  *slog.Logger
	js   jetstream.JetStream
	kv   jetstream.KeyValue
	logs jetstream.Stream

	status *nats.Subscription
	cancel context.CancelFunc
	done   chan struct{}
	err    error // why run stopped by itself; set before done closes

	mu struct {
		sync.Mutex
		role   string
		since  time.Time
		svc    *Service // while active
		seq    uint64   // the last event of the local log, as a standby
		logSeq uint64   // the log message folded last, as a standby
		folded time.Time
	}
	progress chan struct{} // a standby folded a message
	// catching is set while the member holds the key and waits to fold
	// the log's end (catchUp): its reader is then replaced after a short
	// stall, not DefaultFollowStall.
	catching atomic.Bool
	reads    standbyReads    // a standby's read-only API (standby.go)
	snaps    memberSnapshots // snapshots of the replicated log (snapshot.go)
}

// StartMember creates the replicated log and the leadership bucket if
// missing and starts the member as a standby; it returns at once, and the
// member runs until Stop, or until its event log fails (Done, Err).
func StartMember(ctx context.Context, nc *nats.Conn, dir string, opts MemberOptions) (*Member, error) {
	if !opts.SyncLocal {
		// The replicated log is the record; see SyncLocal.
		opts.Core.Log.NoSync = true
	}
	opts.EnsureDefaults()
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.TrimEvery == 0 {
		opts.TrimEvery = DefaultTrimEvery
	}
	var errs []error
	if err := opts.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := CheckNode(opts.Node); err != nil {
		errs = append(errs, fmt.Errorf("coordinator options: Node %q: %w", opts.Node, err))
	}
	if opts.LeaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("coordinator options: LeaseTTL %s: want at least 1s", opts.LeaseTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("coordinator: start member: %w", err)
	}
	m := &Member{nc: nc, dir: dir, opts: opts, subj: intents.Subjects{Prefix: opts.Prefix},
		log: opts.Logger.With("node", opts.Node), done: make(chan struct{}), progress: make(chan struct{}, 1)}
	m.snaps.now = make(chan chan snapshotResult)
	var err error
	if m.js, err = jetstream.New(nc); err != nil {
		return nil, fmt.Errorf("coordinator: jetstream: %w", err)
	}
	bucket := jetstream.KeyValueConfig{Bucket: m.subj.LeaderBucket(), Description: "the active coordinator (SPEC §10)",
		Replicas: opts.Replicas, Storage: jetstream.FileStorage}
	// A cluster that has just formed may not answer at once (its streams
	// electing leaders, other members creating the same ones): the
	// streams are tried again until ctx ends.
	for try := 0; ; try++ {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if m.logs, err = m.ensureLog(callCtx); err == nil {
			m.kv, err = m.ensureBucket(callCtx, bucket)
		}
		cancel()
		if err == nil || errors.Is(err, ErrStreamMismatch) || ctx.Err() != nil {
			break
		}
		m.log.Warn("the cluster does not answer yet; trying again", "err", err)
		select {
		case <-time.After(time.Duration(min(try+1, 5)) * time.Second / 2):
		case <-ctx.Done():
		}
	}
	if err != nil {
		return nil, err
	}
	m.setRole(intents.RoleStandby, nil)
	if m.status, err = nc.Subscribe(m.subj.Status(), m.answerStatus); err != nil {
		return nil, fmt.Errorf("coordinator: subscribe %s: %w", m.subj.Status(), err)
	}
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		m.status.Unsubscribe()
		return nil, fmt.Errorf("coordinator: flush: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go m.run(runCtx)
	return m, nil
}

// CheckNode reports whether name can name a coordinator of a cluster: a
// single subject token.
func CheckNode(name string) error {
	if name == "" {
		return errors.New("empty")
	}
	if !intents.ValidSegment(name) {
		return errors.New("want letters, digits, '-' or '_'")
	}
	return nil
}

// ensureLog creates COAGENT_LOG if missing; one that exists with other
// replicas is reported and kept, as every stream is.
func (m *Member) ensureLog(ctx context.Context) (jetstream.Stream, error) {
	want := logStreamConfig(m.subj, m.opts.Replicas)
	st, err := m.js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if st, err = m.js.CreateStream(ctx, want); err != nil {
			return nil, fmt.Errorf("coordinator: create stream %s: %w", want.Name, err)
		}
		m.log.Info("stream created", "stream", want.Name)
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("coordinator: stream %s: %w", want.Name, err)
	}
	if err := checkStream(m.log, st.CachedInfo().Config, want); err != nil {
		return nil, err
	}
	return st, nil
}

// ensureBucket creates the leadership bucket if missing; one that exists
// is used as it is: updating a bucket's stream moves its leader, and
// members starting together would keep it from having one.
func (m *Member) ensureBucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := m.js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = m.js.KeyValue(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("coordinator: leadership bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// Done is closed once the member has stopped: after Stop, or by itself
// when its event log failed (Err says why).
func (m *Member) Done() <-chan struct{} { return m.done }

// Err returns why the member stopped by itself, once Done is closed.
func (m *Member) Err() error { return m.err }

// Active returns the Service while this member is the active coordinator,
// nil while it is a standby.
func (m *Member) Active() *Service {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.svc
}

// Role is intents.RoleActive or intents.RoleStandby.
func (m *Member) Role() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.role
}

// Stop stops the member: an active one decides what it has taken in,
// stops its Service and gives the leadership key up, so that a standby
// takes over at once rather than after the lease.
func (m *Member) Stop(ctx context.Context) error {
	m.cancel()
	select {
	case <-m.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (m *Member) setRole(role string, svc *Service) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.role != role {
		m.mu.since = time.Now()
	}
	m.mu.role, m.mu.svc = role, svc
}

// run alternates following and leading until ctx ends or the event log
// fails.
func (m *Member) run(ctx context.Context) {
	defer close(m.done)
	// A member that stopped, by Stop or by itself, answers no status: it
	// is no longer one of the cluster's coordinators.
	defer m.status.Unsubscribe()
	for ctx.Err() == nil {
		k, last, err := m.follow(ctx)
		if err == nil {
			err = m.lead(ctx, k, last)
		}
		if err == nil || ctx.Err() != nil {
			continue
		}
		if fatal(err) {
			m.log.Error("the coordinator stopped", "err", err)
			m.err = err
			return
		}
		m.log.Warn("following the replicated log again", "err", err)
		select {
		case <-time.After(m.opts.LeaseTTL / 4):
		case <-ctx.Done():
		}
	}
}

// fatal reports whether err ends the member rather than sends it back to
// following: a failure of its own event log (a damaged store, a full
// disk), which no other coordinator can mend, or a log that holds
// another history than the cluster's.
func fatal(err error) bool {
	var corrupt *eventlog.CorruptError
	var full *eventlog.DiskFullError
	return errors.As(err, &corrupt) || errors.As(err, &full) || errors.Is(err, eventlog.ErrLocked) ||
		errors.Is(err, ErrAhead) && !errors.Is(err, errLogEmpty)
}

// seed appends core's log to the replicated log if it is still empty.
func (m *Member) seed(ctx context.Context, core *Core) error {
	info, err := m.logs.Info(ctx)
	if err != nil {
		return fmt.Errorf("coordinator: read the replicated log: %w", err)
	}
	if info.State.Msgs > 0 {
		return nil // another seeded it, or wrote: following tells whether that is this history
	}
	began := time.Now()
	last, err := seed(ctx, m.js, m.subj.Log(), core.Log())
	if err != nil {
		return fmt.Errorf("coordinator: seed the replicated log: %w", err)
	}
	m.log.Warn("seeded the replicated log with this coordinator's log", "events", core.Log().LastSeq(), "messages", last,
		"took", time.Since(began).Round(time.Millisecond))
	return nil
}

// catchUp waits until the standby has folded the log's last message, as
// the stream has it now that this member holds the key, and returns that
// message's sequence.
func (m *Member) catchUp(ctx context.Context, folding chan error, lost chan error) (uint64, error) {
	// The log's stream may be electing a leader (the node that led it
	// died with the coordinator that led), which takes longer than a
	// lease: it is asked again for as long as this member holds the key
	// (keepLease renews it meanwhile). Giving up sooner hands the key to
	// another member that waits on the same election.
	var info *jetstream.StreamInfo
	for {
		infoCtx, cancel := context.WithTimeout(ctx, m.opts.LeaseTTL/4)
		var err error
		info, err = m.logs.Info(infoCtx)
		cancel()
		if err == nil {
			break
		}
		select {
		case err := <-lost:
			lost <- err // for lead, which is not reached: drop
			return 0, err
		case <-ctx.Done():
			return 0, fmt.Errorf("coordinator: read the replicated log's end: %w", err)
		case <-time.After(50 * time.Millisecond): // an error may come at once
		}
	}
	last := info.State.LastSeq
	m.catching.Store(true)
	defer m.catching.Store(false)
	for {
		m.mu.Lock()
		at := m.mu.logSeq
		m.mu.Unlock()
		if at >= last {
			return last, nil
		}
		select {
		case <-m.progress:
		case err := <-folding:
			folding <- err
			if err == nil {
				err = errors.New("the follower stopped")
			}
			return 0, err
		case err := <-lost:
			lost <- err // for lead, which is not reached: drop
			return 0, err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// lead runs the Service while this member holds the key, which k keeps
// renewing: it stops the Service when k loses the key, when the Service
// stops by itself (an append refused), or when ctx ends.
func (m *Member) lead(ctx context.Context, k *leaseKeeper, last uint64) error {
	lost := k.lost
	release := func() { m.drop(k) }
	// A stream the Service sets up may be electing a leader (its node
	// died with the coordinator that led), and a request sent to it
	// meanwhile is never answered: each step of the set-up is given a
	// quarter of a lease, and the start is tried again while the lease
	// holds (after eight tries, with twice the time each, up to two
	// leases), rather than the key handed to another member that would
	// wait the same.
	at := &activeAt{node: m.opts.Node, last: last, leased: k.leased, setup: m.opts.LeaseTTL / 4}
	svc, err := start(ctx, m.nc, m.dir, m.opts.Options, at)
	for try := 1; err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && k.leased(); try++ {
		m.log.Info("starting the service: a stream did not answer, trying again", "err", err)
		if try >= 8 { // past any election: JetStream is slow, not electing
			at.setup = min(2*at.setup, 2*m.opts.LeaseTTL)
		}
		svc, err = start(ctx, m.nc, m.dir, m.opts.Options, at)
	}
	if err != nil {
		release()
		return err
	}
	m.setRole(intents.RoleActive, svc)
	stopSnapshots := m.startSnapshots(ctx, svc)
	m.log.Info("active: this coordinator decides", "log_message", last, "events", svc.core.Log().LastSeq())
	if m.opts.OnActive != nil {
		if err := m.opts.OnActive(ctx, svc); err != nil {
			m.log.Error("on becoming active", "err", err)
		}
	}
	var why error
	select {
	case <-ctx.Done():
	case why = <-lost:
	case <-svc.Done():
		why = svc.Err()
	}
	stopSnapshots()
	// No longer active from here: a status asked while the Service drains
	// must not show two active coordinators.
	m.setRole(intents.RoleStandby, nil)
	if why != nil {
		m.log.Warn("stepping down", "err", why)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	if err := svc.Shutdown(stopCtx); err != nil && why == nil {
		why = err
	}
	m.log.Info("the service stopped", "took", time.Since(began).Round(time.Millisecond))
	release()
	if why != nil && !fatal(why) {
		m.log.Warn("stepped down: another coordinator may take over")
	}
	return why
}

// answerStatus answers a status request with this member's MemberStatus.
func (m *Member) answerStatus(req *nats.Msg) {
	// The lease and the log's end are read at once, each briefly: while a
	// node fails over one of them may not answer, and a status that comes
	// after the asker stopped gathering is no status at all.
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	st := intents.MemberStatus{Node: m.opts.Node}
	leased := make(chan string, 1)
	go func() {
		l, _, ok, err := m.readLease(ctx)
		if err != nil || !ok || !time.Now().Before(l.Until) {
			leased <- ""
			return
		}
		leased <- l.Node
	}()
	info, err := m.logs.Info(ctx)
	st.Leader = <-leased
	m.mu.Lock()
	st.Role, st.Since = m.mu.role, m.mu.since
	svc := m.mu.svc
	st.Seq, st.LogSeq = m.mu.seq, m.mu.logSeq
	folded := m.mu.folded
	m.mu.Unlock()
	if err == nil {
		st.LogLast = info.State.LastSeq
	}
	m.snapshotStatus(&st, info)
	if svc != nil {
		st.Seq, st.LogSeq = svc.core.Log().LastSeq(), st.LogLast
	}
	if st.LogLast > st.LogSeq {
		st.LagGroups = st.LogLast - st.LogSeq
		if !folded.IsZero() && info != nil {
			st.LagSeconds = max(0, info.State.LastTime.Sub(folded).Seconds())
		}
	}
	data, _ := json.Marshal(st)
	req.Respond(data)
}
