package coordinator

import (
	"context"
	"fmt"
	"sync"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go/micro"
)

// standbyReads is a standby member's share of the API: the read-only
// endpoints (state.get, log.query, txn.list), answered on the member's own
// subjects (intents.Subjects.NodeAPI) from the log and engine its follower
// folds into, at the revision it has reached, each answer stamped with
// the node, the role standby and that revision. They are served by a
// micro service "coagent" of their own, whose metadata names the node and
// the role, so that `nats micro ls` and `nats micro info coagent` show
// every coordinator and which one is active. Nothing is answered on the
// API's shared subjects, where the active coordinator alone answers: a
// standby's answer there would be a stale answer to a read that follows a
// write.
//
// The zero value serves nothing; Member.serveReads starts it with the
// Core of a follow, and the stop it returns ends it before that Core
// closes.
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

// follow folds evs, a message of the replicated log, into core under the
// readers' lock (see Core.Follow).
func (r *standbyReads) follow(core *Core, evs []*intents.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := core.Follow(evs)
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

// serveReads answers the read-only API on this member's own subjects from
// core, which its follower folds into (through m.reads.follow), until
// stop, which must be called before core closes.
func (m *Member) serveReads(core *Core) (stop func(), err error) {
	r := &m.reads
	r.mu.Lock()
	r.mu.core, r.auth = core, m.opts.Auth
	r.mu.Unlock()
	end := func() {
		r.mu.Lock()
		r.mu.core = nil
		r.mu.Unlock()
		r.logs.Wait()
	}
	svc, err := micro.AddService(m.nc, micro.Config{
		Name:        "coagent",
		Version:     Version,
		Description: "CoAgent coordinator, standby: reads at the revision it has followed the log to",
		Metadata:    map[string]string{"node": m.opts.Node, "role": intents.RoleStandby},
	})
	if err != nil {
		end()
		return nil, fmt.Errorf("coordinator: standby api: %w", err)
	}
	stamp := stampOf(m.opts.Node, intents.RoleStandby)
	if err := addNodeEndpoints(svc, r, m.subj, m.opts.Node, stamp); err != nil {
		svc.Stop()
		end()
		return nil, err
	}
	if m.opts.Bugs != nil && m.opts.Bugs.StandbyReads {
		err := svc.AddEndpoint("state_get", micro.HandlerFunc(func(req micro.Request) { answerStateGet(r, stamp, req) }),
			micro.WithEndpointSubject(m.subj.API(intents.APIStateGet)))
		if err != nil {
			svc.Stop()
			end()
			return nil, fmt.Errorf("coordinator: api endpoint state_get: %w", err)
		}
	}
	return func() {
		svc.Stop()
		end()
	}, nil
}
