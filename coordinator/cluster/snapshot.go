package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go/jetstream"
)

// Snapshots of the replicated log (SPEC §10), so that COAGENT_LOG does not
// grow for ever and a coordinator that joins need not fold it from its
// first message, as etcd's members load a snapshot and the raft log's
// tail:
//
//   - The active coordinator stores a snapshot every TrimEvery events (and
//     on Member.Snapshot) in the object store bucket COAGENT_LOG_SNAPSHOTS,
//     replicated as the log is: an export of its own event log
//     (eventlog.Export) as of a moment, which holds the engine's snapshot
//     it takes then (the format a coordinator alone compacts to), the
//     state and the idempotency records, with the event it ends at and the
//     message of the replicated log that holds that event.
//   - Then it trims the log: every message before the lowest of the
//     snapshot's message and the message each member that answers the
//     status request within statusWait has folded last. Those messages
//     stay, so that each member can check its history against the log's
//     (logPosition) and go on.
//   - A member that did not answer (stopped, cut off) does not hold the
//     trim back: once its place is gone from the log it loads the snapshot
//     instead, as one with an empty data directory does.

// DefaultTrimEvery is Options.TrimEvery's default.
const DefaultTrimEvery = 100000

// ErrNotActive is returned by what only the active coordinator does, on
// a standby.
var ErrNotActive = errors.New("cluster: not the active coordinator")

// errNoSnapshot is loadSnapshot's when the bucket holds none.
var errNoSnapshot = errors.New("no snapshot of the replicated log is stored")

// snapshotObject is the one object of the bucket: each snapshot replaces
// the one before.
const snapshotObject = "latest"

// The metadata of the stored snapshot.
const (
	metaSnapshotSeq  = "seq"     // the last event it holds
	metaSnapshotLog  = "log-seq" // the log message that holds that event
	metaSnapshotFrom = "from"    // the event its engine snapshot is taken after
)

// statusWait is how long the active coordinator gathers the members'
// positions before it trims: a member answers within 400ms (answerStatus).
const statusWait = 600 * time.Millisecond

// memberSnapshots is a Member's part in the snapshots.
type memberSnapshots struct {
	// now takes the requests of Member.Snapshot to the active member's
	// snapshot loop.
	now chan chan snapshotResult
	mu  struct {
		sync.Mutex
		obs  jetstream.ObjectStore
		last *intents.SnapshotStatus // stored or loaded last
	}
}

type snapshotResult struct {
	st  intents.SnapshotStatus
	err error
}

// snapshotBucket is the name of the bucket of the snapshots of the
// replicated log.
func snapshotBucket(subj intents.Subjects) string {
	return subj.Stream(intents.StreamLog) + "_SNAPSHOTS"
}

// snapshotStore opens the snapshot bucket, creating it if missing.
func (m *Member) snapshotStore(ctx context.Context) (jetstream.ObjectStore, error) {
	m.snaps.mu.Lock()
	defer m.snaps.mu.Unlock()
	if m.snaps.mu.obs != nil {
		return m.snaps.mu.obs, nil
	}
	cfg := jetstream.ObjectStoreConfig{Bucket: snapshotBucket(m.subj), Description: "snapshots of the replicated log (SPEC §10)",
		Replicas: m.opts.Replicas, Storage: jetstream.FileStorage}
	obs, err := m.js.CreateObjectStore(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		obs, err = m.js.ObjectStore(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: snapshot bucket %s: %w", cfg.Bucket, err)
	}
	m.snaps.mu.obs = obs
	return obs, nil
}

// snapshotStatus fills in st what this member knows of the snapshots and
// the trim; info is the log's stream, nil if it did not answer.
func (m *Member) snapshotStatus(st *intents.MemberStatus, info *jetstream.StreamInfo) {
	if info != nil {
		st.LogFirst = info.State.FirstSeq
	}
	m.snaps.mu.Lock()
	defer m.snaps.mu.Unlock()
	if last := m.snaps.mu.last; last != nil {
		s := *last
		st.Snapshot = &s
	}
}

func (m *Member) setSnapshot(st intents.SnapshotStatus) {
	m.snaps.mu.Lock()
	defer m.snaps.mu.Unlock()
	m.snaps.mu.last = &st
}

// storedSnapshot reads what the bucket says of its snapshot; ok is false
// when it holds none.
func (m *Member) storedSnapshot(ctx context.Context) (st intents.SnapshotStatus, ok bool, err error) {
	obs, err := m.snapshotStore(ctx)
	if err != nil {
		return st, false, err
	}
	info, err := obs.GetInfo(ctx, snapshotObject)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("cluster: read the stored snapshot: %w", err)
	}
	st, err = snapshotMeta(info)
	return st, err == nil, err
}

// snapshotMeta reads the snapshot's metadata.
func snapshotMeta(info *jetstream.ObjectInfo) (intents.SnapshotStatus, error) {
	seq, err1 := strconv.ParseUint(info.Metadata[metaSnapshotSeq], 10, 64)
	logSeq, err2 := strconv.ParseUint(info.Metadata[metaSnapshotLog], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return intents.SnapshotStatus{}, fmt.Errorf("cluster: the stored snapshot's metadata %v: %w", info.Metadata, err)
	}
	return intents.SnapshotStatus{Seq: seq, LogSeq: logSeq, Stored: info.ModTime}, nil
}

// Snapshot stores a snapshot of the replicated log now and trims the log
// below it (see TrimEvery), and returns what it stored. Only the active
// coordinator takes one: on a standby it is ErrNotActive.
func (m *Member) Snapshot(ctx context.Context) (intents.SnapshotStatus, error) {
	if m.Role() != intents.RoleActive {
		return intents.SnapshotStatus{}, ErrNotActive
	}
	reply := make(chan snapshotResult, 1)
	select {
	case m.snaps.now <- reply:
	case <-m.done:
		return intents.SnapshotStatus{}, ErrNotActive
	case <-ctx.Done():
		return intents.SnapshotStatus{}, ctx.Err()
	}
	select {
	case r := <-reply:
		return r.st, r.err
	case <-ctx.Done():
		return intents.SnapshotStatus{}, ctx.Err()
	}
}

// startSnapshots runs the active member's snapshot loop for svc, and
// answers the requests for a snapshot (answerSnapshots); stop ends both
// and waits, which lead does before the Service stops (the loop reads its
// log).
func (m *Member) startSnapshots(ctx context.Context, svc *coordinator.Service) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.snapshotLoop(ctx, svc)
	}()
	unsubscribe, err := m.answerSnapshots(ctx, svc)
	if err != nil {
		m.log.Warn("snapshots are taken only every TrimEvery events", "err", err)
		unsubscribe = func() {}
	}
	return func() {
		unsubscribe()
		cancel()
		<-done
	}
}

// snapshotLoop stores a snapshot each time TrimEvery events were
// appended since the last, and whenever Snapshot asks, until ctx ends or
// svc stops.
func (m *Member) snapshotLoop(ctx context.Context, svc *coordinator.Service) {
	var since uint64 // the last event of the stored snapshot
	readCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if st, ok, err := m.storedSnapshot(readCtx); err != nil {
		m.log.Warn("read the stored snapshot", "err", err)
	} else if ok {
		since = st.Seq
		m.setSnapshot(st)
	}
	cancel()
	tick := time.NewTicker(m.opts.LeaseTTL)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-svc.Done():
			return
		case reply := <-m.snaps.now:
			st, err := m.storeSnapshot(ctx, svc)
			if err == nil {
				since = st.Seq
			}
			reply <- snapshotResult{st, err}
		case <-tick.C:
			if m.opts.TrimEvery < 0 || svc.Core().Log().LastSeq() < since+uint64(m.opts.TrimEvery) {
				continue
			}
			st, err := m.storeSnapshot(ctx, svc)
			if err != nil {
				if ctx.Err() == nil {
					m.log.Warn("snapshot of the replicated log", "err", err)
				}
				continue
			}
			since = st.Seq
		}
	}
}

// storeSnapshot takes the engine's snapshot on svc's loop, exports the
// log as of then into the bucket, and trims the replicated log below it.
func (m *Member) storeSnapshot(ctx context.Context, svc *coordinator.Service) (intents.SnapshotStatus, error) {
	began := time.Now()
	// What was decided is committed and durable first, so that the
	// engine's snapshot is of the log's last event: the export then holds
	// no event after it but those decided while it is written.
	if err := svc.SaveSnapshot(ctx); err != nil {
		return intents.SnapshotStatus{}, err
	}
	exp, err := svc.Core().Log().Export()
	if err != nil {
		return intents.SnapshotStatus{}, fmt.Errorf("cluster: snapshot: %w", err)
	}
	defer exp.Close()
	if exp.From > exp.Last {
		// Compacted to its end: a joiner would have no event to check
		// against the replicated log's (logPosition).
		return intents.SnapshotStatus{}, fmt.Errorf("cluster: snapshot: the log holds no event (it ends at %d); try again after the next", exp.Last)
	}
	// The local log is never ahead of the stream: its last event is the
	// last of a message the stream holds.
	ev, err := svc.Core().Log().Event(exp.Last)
	if err != nil {
		return intents.SnapshotStatus{}, fmt.Errorf("cluster: snapshot: %w", err)
	}
	pos, err := logPosition(ctx, m.logs, link{seq: exp.Last, id: ev.ID})
	if err != nil {
		return intents.SnapshotStatus{}, fmt.Errorf("cluster: snapshot: find event %d in the replicated log: %w", exp.Last, err)
	}
	st := intents.SnapshotStatus{Seq: exp.Last, LogSeq: pos - 1}
	obs, err := m.snapshotStore(ctx)
	if err != nil {
		return intents.SnapshotStatus{}, err
	}
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		_, err := exp.WriteTo(pw)
		pw.CloseWithError(err)
		written <- err
	}()
	info, err := obs.Put(ctx, jetstream.ObjectMeta{Name: snapshotObject,
		Description: fmt.Sprintf("the coordinator's state after event %d, message %d of %s", st.Seq, st.LogSeq, m.subj.Stream(intents.StreamLog)),
		Metadata: map[string]string{metaSnapshotSeq: strconv.FormatUint(st.Seq, 10), metaSnapshotLog: strconv.FormatUint(st.LogSeq, 10),
			metaSnapshotFrom: strconv.FormatUint(exp.Snapshot, 10)}}, pr)
	pr.CloseWithError(errors.New("the snapshot bucket stopped reading"))
	if werr := <-written; err == nil {
		err = werr
	}
	if err != nil {
		return intents.SnapshotStatus{}, fmt.Errorf("cluster: store the snapshot at event %d: %w", st.Seq, err)
	}
	st.Stored = info.ModTime
	m.setSnapshot(st)
	trimmed, err := m.trim(ctx, st.LogSeq)
	if err != nil {
		m.log.Warn("trim the replicated log", "err", err)
	}
	m.log.Info("snapshot of the replicated log stored", "event", st.Seq, "log_message", st.LogSeq, "bytes", info.Size,
		"log_first", trimmed, "took", time.Since(began).Round(time.Millisecond))
	return st, nil
}

// trim purges the replicated log's messages before keep and before the
// last each member that answers has folded, and returns the log's first
// message after it.
func (m *Member) trim(ctx context.Context, keep uint64) (uint64, error) {
	members, err := m.positions(ctx)
	if err != nil {
		return 0, err
	}
	for _, st := range members {
		keep = min(keep, st.LogSeq)
	}
	info, err := m.logs.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the replicated log: %w", err)
	}
	if keep <= info.State.FirstSeq {
		return info.State.FirstSeq, nil
	}
	if err := m.logs.Purge(ctx, jetstream.WithPurgeSequence(keep)); err != nil {
		return 0, fmt.Errorf("purge the replicated log below message %d: %w", keep, err)
	}
	return keep, nil
}

// positions gathers the status of every member that answers within
// statusWait, as `coagent status` does; none is an error, since then no
// position says what may be trimmed.
func (m *Member) positions(ctx context.Context) ([]intents.MemberStatus, error) {
	g, err := coordinator.AskStatus(ctx, m.nc, m.subj.Status(), statusWait)
	if err != nil {
		return nil, fmt.Errorf("gather the members' positions: %w", err)
	}
	if len(g.Members) == 0 {
		return nil, errors.New("gather the members' positions: no member answered")
	}
	return g.Members, nil
}

// openFollowing opens the local log and finds the message of the
// replicated log that continues it, as logPosition does. A log the
// replicated log was trimmed past (the member was away), and an empty log
// when a snapshot is stored, are replaced by the stored snapshot first.
func (m *Member) openFollowing(ctx context.Context) (*coordinator.Core, link, uint64, error) {
	core, err := coordinator.OpenCore(m.dir, m.opts.Core)
	if err != nil {
		return nil, link{}, 0, err
	}
	findCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	position := func() (link, uint64, error) {
		tip, err := logTip(core.Log())
		if err != nil {
			return tip, 0, err
		}
		pos, err := logPosition(findCtx, m.logs, tip)
		return tip, pos, err
	}
	tip, pos, err := position()
	if ahead := (*aheadError)(nil); errors.As(err, &ahead) {
		return m.setAside(ctx, core, ahead)
	}
	had := core.Log().LastSeq()
	if !errors.Is(err, eventlog.ErrCompacted) && !(had == 0 && err == nil && m.snapshotAhead(findCtx)) {
		return core, tip, pos, err
	}
	if err := core.Close(); err != nil {
		return nil, link{}, 0, err
	}
	st, lerr := m.loadSnapshot(findCtx, had > 0)
	switch {
	case errors.Is(lerr, errNoSnapshot) && err == nil:
		// Nothing to load: fold the log from its first message.
	case lerr != nil:
		return nil, link{}, 0, errors.Join(err, fmt.Errorf("cluster: load the snapshot of the replicated log: %w", lerr))
	default:
		m.log.Info("loaded the snapshot of the replicated log", "event", st.Seq, "log_message", st.LogSeq, "had_events", had)
	}
	if core, err = coordinator.OpenCore(m.dir, m.opts.Core); err != nil {
		return nil, link{}, 0, err
	}
	tip, pos, err = position()
	return core, tip, pos, err
}

// setAside takes core's log, which ends past the replicated log's last
// event. If it holds that event, the stream lost the tail after it (its
// nodes had not synced it and their power went, say), and with it
// decisions that were answered: the log is kept aside, the loss logged
// with what it was, and the member follows the replicated log from an
// empty log, the log of record being the stream. If it holds another
// event there, it holds another history, which stops the member.
func (m *Member) setAside(ctx context.Context, core *coordinator.Core, ahead *aheadError) (*coordinator.Core, link, uint64, error) {
	ev, err := core.Log().Event(ahead.last)
	if err != nil || ev.ID != ahead.lastID {
		return core, link{}, 0, fmt.Errorf("%w: it holds another history (its event %d is not the replicated log's); give it an empty data directory to join", ahead, ahead.last)
	}
	if err := core.Close(); err != nil {
		return nil, link{}, 0, err
	}
	aside := m.dir + ".ahead-" + time.Now().UTC().Format("20060102T150405.000Z")
	if err := os.Rename(m.dir, aside); err != nil {
		return nil, link{}, 0, fmt.Errorf("cluster: keep aside the event log the replicated log lost the tail of: %w", err)
	}
	m.log.Error("the replicated log lost the tail of this coordinator's log: events it answered are not in it (its nodes had not synced them, and lost them: serve --sync always keeps them); this log is kept aside, and the coordinator follows the replicated log",
		"lost_from_event", ahead.last+1, "lost_to_event", ahead.local, "lost_events", ahead.local-ahead.last, "kept_in", aside)
	return m.openFollowing(ctx)
}

// snapshotAhead reports whether a snapshot is stored of a message the
// replicated log holds: an empty log loads it rather than fold the log up
// to it. A snapshot of a log of the past (the stream was made anew) is not
// loaded.
func (m *Member) snapshotAhead(ctx context.Context) bool {
	st, ok, err := m.storedSnapshot(ctx)
	if err != nil {
		m.log.Info("no snapshot to join from; folding the replicated log from its start", "err", err)
		return false
	}
	if !ok {
		return false
	}
	info, err := m.logs.Info(ctx)
	return err == nil && info.State.Msgs > 0 && st.LogSeq >= info.State.FirstSeq && st.LogSeq <= info.State.LastSeq
}

// loadSnapshot replaces the local log with the stored snapshot. A log
// that held events is kept beside it, in dir.replaced, until the next
// load: a log the replicated log no longer holds the place of cannot be
// checked against it.
func (m *Member) loadSnapshot(ctx context.Context, keepOld bool) (intents.SnapshotStatus, error) {
	obs, err := m.snapshotStore(ctx)
	if err != nil {
		return intents.SnapshotStatus{}, err
	}
	res, err := obs.Get(ctx, snapshotObject)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return intents.SnapshotStatus{}, errNoSnapshot
	}
	if err != nil {
		return intents.SnapshotStatus{}, err
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return intents.SnapshotStatus{}, err
	}
	st, err := snapshotMeta(info)
	if err != nil {
		return st, err
	}
	tmp := m.dir + ".restore"
	if err := os.RemoveAll(tmp); err != nil {
		return st, err
	}
	_, last, err := eventlog.Restore(tmp, res, &m.opts.Core.Log)
	if err == nil {
		// The rest, if any, is read for the bucket's digest, which it
		// checks at the end.
		_, err = io.Copy(io.Discard, res)
	}
	if err == nil && last != st.Seq {
		err = fmt.Errorf("the snapshot ends at event %d, and its metadata says %d", last, st.Seq)
	}
	if err != nil {
		return st, errors.Join(err, os.RemoveAll(tmp))
	}
	if keepOld {
		old := m.dir + ".replaced"
		if err := os.RemoveAll(old); err != nil {
			return st, err
		}
		if err := os.Rename(m.dir, old); err != nil {
			return st, err
		}
		m.log.Warn("the event log was behind the replicated log's first message; it is kept aside", "dir", old)
	} else if err := os.RemoveAll(m.dir); err != nil {
		return st, err
	}
	if err := os.Rename(tmp, m.dir); err != nil {
		return st, err
	}
	m.setSnapshot(st)
	return st, nil
}
