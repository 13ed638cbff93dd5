package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// shards is the client's copy of where boards went (docs/sharding.md):
// the default shard's own account of the boards it gave away, each with
// the shard it went to (its shard.info). A deployment that never moved a
// board has none, and the client then speaks to the default shard alone,
// as before shards. The copy is read at the first intent, again in the
// background every shardsRecheck, and at once whenever a coordinator
// refuses an intent as another shard's; a board moved on since is found
// by the coordinators, which send an intent on to the shard their log
// names, hop by hop.
//
// It is the default shard's log, not the map bucket that coagent shards
// keeps for people, that the client reads: it needs no JetStream
// permission, and it is never ahead of the shards (a board is in it from
// its release on).
type shards struct {
	mu      sync.Mutex
	boards  map[string]string // board → the shard it went to
	first   chan struct{}     // closed once the first read ended
	loading bool              // a read in the background is under way
	next    time.Time         // when the copy is read again
	subs    map[string][]*nats.Subscription
	txns    map[string]string // transaction id → its shard, for its commit, abort and renew
}

// maxRedirects bounds how many times one intent is sent again as
// another shard's (a board moved twice in a row, a move in progress).
const maxRedirects = 8

// shardsRecheck is how long a client goes on with the copy it has before
// it reads it again, in the background; shardsBackoff how long after a
// read that failed (a server that forbids it, a coordinator from before
// shards), the copy it had kept meanwhile.
const (
	shardsRecheck = 10 * time.Second
	shardsBackoff = 5 * time.Minute
)

// shardsTimeout bounds a read: the default shard then takes every intent,
// and sends on what another shard owns.
const shardsTimeout = 2 * time.Second

// loadShards reads the copy the first time (every caller waits for that
// read), then in the background once it is due, and at once with force.
func (c *Client) loadShards(ctx context.Context, force bool) {
	s := &c.shards
	s.mu.Lock()
	switch {
	case s.first == nil:
		first := make(chan struct{})
		s.first = first
		s.mu.Unlock()
		c.readShards(ctx)
		close(first)
		return
	case force:
		s.mu.Unlock()
		c.readShards(ctx)
		return
	case s.loading || time.Now().Before(s.next):
		first := s.first
		s.mu.Unlock()
		select {
		case <-first:
		case <-ctx.Done():
		}
		return
	}
	s.loading = true
	s.mu.Unlock()
	go c.readShards(c.closing)
}

// readShards asks the default shard where its boards went.
func (c *Client) readShards(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, shardsTimeout)
	defer cancel()
	var info intents.ShardInfo
	err := c.requestOn(ctx, c.subj, intents.APIShardInfo, nil, &info)
	s := &c.shards
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loading = false
	if err != nil {
		s.next = time.Now().Add(shardsBackoff)
		c.log.Debug("the default shard did not say where its boards went", "err", err)
		return
	}
	boards := map[string]string{}
	for b, sh := range info.Owners {
		if sh != intents.DefaultShard {
			boards[b] = sh
		}
	}
	s.boards, s.next = boards, time.Now().Add(shardsRecheck)
}

// shardOf is the shard of the boards of paths, as the map says: the
// first one's owner. An intent of boards of two shards goes there, to be
// refused with the detail naming them.
func (c *Client) shardOf(paths ...string) string {
	s := &c.shards
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range paths {
		if sh, ok := s.boards[intents.Board(p)]; ok {
			return sh
		}
	}
	return intents.DefaultShard
}

// route is the shard an intent is sent to: its transaction's, for a
// commit, abort or renew of one this client was granted, else its paths'
// boards'.
func (c *Client) route(ctx context.Context, in *intents.Intent, lane string) string {
	c.loadShards(ctx, false)
	c.shards.mu.Lock()
	sh, ok := c.shards.txns[in.Txn]
	c.shards.mu.Unlock()
	if ok && in.Txn != "" {
		return sh
	}
	paths := make([]string, 0, len(in.Writes)+len(in.Reads)+1)
	if lane != "" {
		paths = append(paths, lane)
	}
	for _, w := range in.Writes {
		paths = append(paths, w.Path)
	}
	for _, r := range in.Reads {
		paths = append(paths, r.Path)
	}
	return c.shardOf(paths...)
}

// shardSubjects are the subjects of shard, whose decisions and notices of
// this agent the client then listens to as well: a waiting intent's final
// decision comes on them.
func (c *Client) shardSubjects(ctx context.Context, shard string) (intents.Subjects, error) {
	subj := c.subj.Shard(shard)
	if shard == intents.DefaultShard {
		return subj, nil
	}
	s := &c.shards
	s.mu.Lock()
	_, ok := s.subs[shard]
	s.mu.Unlock()
	if ok {
		return subj, nil
	}
	dec, err := c.nc.Subscribe(subj.Decisions(c.name), c.onDecision)
	if err != nil {
		return subj, fmt.Errorf("agents: subscribe to %s: %w", subj.Decisions(c.name), err)
	}
	not, err := c.nc.Subscribe(subj.Notices(c.name), c.onNotice)
	if err != nil {
		dec.Unsubscribe()
		return subj, fmt.Errorf("agents: subscribe to %s: %w", subj.Notices(c.name), err)
	}
	s.mu.Lock()
	if _, raced := s.subs[shard]; raced {
		s.mu.Unlock()
		dec.Unsubscribe()
		not.Unsubscribe()
		return subj, nil
	}
	if s.subs == nil {
		s.subs = map[string][]*nats.Subscription{}
	}
	s.subs[shard] = []*nats.Subscription{dec, not}
	s.mu.Unlock()
	return subj, flush(ctx, c.nc)
}

// maxRoutes bounds how many transactions' and claims' shards a client
// remembers: past it they are forgotten at once, and a commit, abort or
// renew of one goes to the default shard, which sends it round the
// shards to the one that knows it.
const maxRoutes = 4096

// granted notes the shard of the transaction or claim lease d names, for
// the commit, abort and renew that follow, and forgets that of a
// transaction the decision of in ended.
func (c *Client) granted(in *intents.Intent, d *intents.Decision, shard string) {
	c.shards.mu.Lock()
	defer c.shards.mu.Unlock()
	switch {
	case in.Kind.Transactional() && (d.Outcome == intents.OutcomeCommitted || d.Outcome == intents.OutcomeAborted):
		delete(c.shards.txns, in.Txn)
	case d.Txn != "" && (d.Outcome == intents.OutcomeGranted || d.Outcome == intents.OutcomeApplied):
		if c.shards.txns == nil || len(c.shards.txns) >= maxRoutes {
			c.shards.txns = map[string]string{}
		}
		c.shards.txns[d.Txn] = shard
	}
}

// closeShards ends the subscriptions to other shards' subjects.
func (c *Client) closeShards() error {
	c.shards.mu.Lock()
	defer c.shards.mu.Unlock()
	var errs []error
	for _, sh := range slices.Sorted(maps.Keys(c.shards.subs)) {
		for _, sub := range c.shards.subs[sh] {
			errs = append(errs, sub.Unsubscribe())
		}
	}
	c.shards.subs = nil
	return errors.Join(errs...)
}

// MoveBoard moves board, with its state and versions, from shard from to
// shard to of the deployment whose default shard speaks under subj, as
// `coagent shards move` does (docs/sharding.md): from releases it, then
// to adopts what the release carried. It answers the adoption. Under auth
// it takes an agent with the role admin. It leaves the map bucket that
// clients route by as it is: coagent shards move writes it.
func MoveBoard(ctx context.Context, nc *nats.Conn, subj intents.Subjects, board, from, to string) (*intents.HandoffReply, error) {
	ask := func(subject string, req intents.HandoffRequest) (*intents.HandoffReply, error) {
		body, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		m, err := nc.RequestWithContext(ctx, subject, body)
		if err != nil {
			return nil, fmt.Errorf("agents: %s: %w", subject, err)
		}
		if err := apiError(m); err != nil {
			return nil, err
		}
		var out intents.HandoffReply
		if err := json.Unmarshal(m.Data, &out); err != nil || out.Handoff == nil {
			return nil, fmt.Errorf("agents: %s answered %q: %v", subject, intents.Clip(string(m.Data), 200), err)
		}
		return &out, nil
	}
	rel, err := ask(subj.Shard(from).API(intents.APIShardRelease), intents.HandoffRequest{Board: board, Shard: to})
	if err != nil {
		return nil, err
	}
	return ask(subj.Shard(to).API(intents.APIShardAdopt), intents.HandoffRequest{Board: board, Shard: from, From: rel.Handoff, Seq: rel.Seq})
}
