package coordinator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Standby is a standby member's share of the API: the read-only
// endpoints (state.get, log.query, txn.list), answered on the member's own
// subjects (intents.Subjects.NodeAPI) from the Core it follows the log of
// record with, at the revision it has reached, each answer stamped with
// the node, the role standby and that revision. They are served by a
// micro service "coagent" of their own, whose metadata names the node and
// the role, so that `nats micro ls` and `nats micro info coagent` show
// every coordinator and which one is active. Nothing is answered on the
// API's shared subjects, where the active coordinator alone answers: a
// standby's answer there would be a stale answer to a read that follows a
// write.
//
// ServeStandby starts one; the member folds each group through Follow,
// and Stop ends it before the Core closes.
type Standby struct {
	core  *Core
	reads standbyReads
	svc   micro.Service
	end   func()
}

// standbyReads is the readSource of a Standby.
type standbyReads struct {
	// mu is held while the follower folds a group into the Core and while
	// a read reads its engine: the engine is not safe for concurrent use.
	// The follower's Core.Follow does its IO under it (it enqueues the
	// group to the log's committer, and once every SnapshotEvery events
	// waits for the log and saves a snapshot), so a read may wait for one
	// group's fold; a read holds it only while it copies out of the engine
	// what it answers.
	mu struct {
		sync.Mutex
		core *Core // the follower's, while it follows; nil otherwise
	}
	// logs counts the log.query reads under way, which stop waits for
	// before the log may close; they read the log without mu.
	logs sync.WaitGroup
	auth bool
}

var _ readSource = (*standbyReads)(nil)

// Follow folds evs, a group of the log of record, into the Core under
// the readers' lock (see Core.Follow). It is called from one goroutine;
// reads may run meanwhile.
func (s *Standby) Follow(evs []*intents.Event) error {
	r := &s.reads
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := s.core.Follow(evs)
	return err
}

// readEngine runs read with the follower's engine, unless there is none
// or it failed part way through a group (then it must be rebuilt before
// it says anything). Nothing a standby folds is in flight: it folds only
// what the replicated log has stored, which is the cluster's durable
// record.
func (r *standbyReads) readEngine(_ context.Context, read func(*engine.Engine, *unsynced) uint64, answer func(ok bool)) {
	r.mu.Lock()
	ok := r.mu.core != nil && r.mu.core.failed == nil
	if ok {
		eng := r.mu.core.eng
		read(eng, &unsynced{seq: eng.Seq(), rev: eng.State().Rev()})
	}
	r.mu.Unlock()
	answer(ok)
}

// xended is a moment from now: a standby folds what the replicated log
// stored, and a reader waiting for a part to end looks again.
func (r *standbyReads) xended() <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(20*time.Millisecond, func() { close(ch) })
	return ch
}

func (r *standbyReads) readLog(fn func(*eventlog.Log)) bool {
	r.mu.Lock()
	core := r.mu.core
	if core != nil {
		r.logs.Add(1)
	}
	r.mu.Unlock()
	if core == nil {
		return false
	}
	defer r.logs.Done()
	fn(core.Log())
	return true
}

// viewerOf answers as the active Service does, under the rules in force
// as of the last group folded.
func (r *standbyReads) viewerOf(reply string) viewer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.core == nil {
		return viewerOf(nil, r.auth, reply)
	}
	_, set := r.mu.core.eng.Rules()
	return viewerOf(set, r.auth, reply)
}

// ServeStandby answers the read-only API on the own subjects of node
// from core, which the caller folds into through Follow, until Stop,
// which must be called before core closes. Of opts it reads Prefix, Auth
// and Bugs.
func ServeStandby(nc *nats.Conn, core *Core, node string, opts Options) (*Standby, error) {
	sb := &Standby{core: core}
	r := &sb.reads
	r.mu.core, r.auth = core, opts.Auth
	end := func() {
		r.mu.Lock()
		r.mu.core = nil
		r.mu.Unlock()
		r.logs.Wait()
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        "coagent",
		Version:     Version,
		Description: "CoAgent coordinator, standby: reads at the revision it has followed the log to",
		Metadata:    map[string]string{"node": node, "role": intents.RoleStandby},
	})
	if err != nil {
		end()
		return nil, fmt.Errorf("coordinator: standby api: %w", err)
	}
	subj := intents.Subjects{Prefix: opts.Prefix}
	stamp := stampOf(node, intents.RoleStandby)
	if err := addNodeEndpoints(svc, r, subj, node, stamp); err != nil {
		svc.Stop()
		end()
		return nil, err
	}
	if opts.Bugs != nil && opts.Bugs.StandbyReads {
		err := svc.AddEndpoint("state_get", micro.HandlerFunc(func(req micro.Request) { answerStateGet(r, stamp, req) }),
			micro.WithEndpointSubject(subj.API(intents.APIStateGet)))
		if err != nil {
			svc.Stop()
			end()
			return nil, fmt.Errorf("coordinator: api endpoint state_get: %w", err)
		}
	}
	sb.svc = svc
	sb.end = end
	return sb, nil
}

// Stop stops answering, and returns once no read uses the Core.
func (s *Standby) Stop() {
	s.svc.Stop()
	s.end()
}
