package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A member's jobs are in files of their own: the leadership key in
// lease.go, following the replicated log in follow.go, taking over and
// leading in lead.go, appending to the replicated log in replog.go, its
// snapshots in snapshot.go and snapshotapi.go, and readiness in
// health.go. A standby's reads are the API's, in package coordinator
// (coordinator.Standby); the asking side
// of the members' status, for any client, is coordinator/clusterstatus.go.

// Options configures a Member: the coordinator's Options, and its
// part in the cluster.
type Options struct {
	coordinator.Options
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
	OnActive func(ctx context.Context, svc *coordinator.Service) error

	// followStall replaces DefaultFollowStall in tests; wrapFollow, if
	// set, wraps each reader of the replicated log a standby opens (a
	// test makes one stall).
	followStall time.Duration
	wrapFollow  func(jetstream.MessagesContext) jetstream.MessagesContext
}

// DefaultLeaseTTL is Options.LeaseTTL's default.
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
	opts Options
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
		svc    *coordinator.Service // while active
		seq    uint64               // the last event of the local log, as a standby
		logSeq uint64               // the log message folded last, as a standby
		folded time.Time
	}
	progress chan struct{} // a standby folded a message
	// catching is set while the member holds the key and waits to fold
	// the log's end (catchUp): its reader is then replaced after a short
	// stall, not DefaultFollowStall.
	catching atomic.Bool
	snaps    memberSnapshots // snapshots of the replicated log (snapshot.go)
}

// Start creates the replicated log and the leadership bucket if missing
// and starts the member as a standby; it returns at once, and the member
// runs until Stop, or until its event log fails (Done, Err).
func Start(ctx context.Context, nc *nats.Conn, dir string, opts Options) (*Member, error) {
	if !opts.SyncLocal {
		// The replicated log is the record; see SyncLocal.
		opts.Core.Log.NoSync = true
	}
	if opts.Bugs != nil {
		// The Core a standby follows with is the one it decides with once
		// it takes over (coordinator.StartActive): planted as the
		// Service's would be.
		opts.Core.Engine.Bugs = *opts.Bugs
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
		return nil, fmt.Errorf("cluster: start member: %w", err)
	}
	m := &Member{nc: nc, dir: dir, opts: opts, subj: intents.Subjects{Prefix: opts.Prefix},
		log: opts.Logger.With("node", opts.Node), done: make(chan struct{}), progress: make(chan struct{}, 1)}
	m.snaps.now = make(chan chan snapshotResult)
	var err error
	if m.js, err = jetstream.New(nc); err != nil {
		return nil, fmt.Errorf("cluster: jetstream: %w", err)
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
		if err == nil || errors.Is(err, coordinator.ErrStreamMismatch) || ctx.Err() != nil {
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
		return nil, fmt.Errorf("cluster: subscribe %s: %w", m.subj.Status(), err)
	}
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		m.status.Unsubscribe()
		return nil, fmt.Errorf("cluster: flush: %w", err)
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
			return nil, fmt.Errorf("cluster: create stream %s: %w", want.Name, err)
		}
		m.log.Info("stream created", "stream", want.Name)
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: stream %s: %w", want.Name, err)
	}
	if err := coordinator.CheckStream(m.log, st.CachedInfo().Config, want); err != nil {
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
		return nil, fmt.Errorf("cluster: leadership bucket %s: %w", cfg.Bucket, err)
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
func (m *Member) Active() *coordinator.Service {
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

func (m *Member) setRole(role string, svc *coordinator.Service) {
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
		k, last, core, err := m.follow(ctx)
		if err == nil {
			err = m.lead(ctx, k, last, core)
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
		errors.Is(err, coordinator.ErrAhead) && !errors.Is(err, errLogEmpty)
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
		st.Seq, st.LogSeq = svc.Core().Log().LastSeq(), st.LogLast
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
