package agents

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// shards is the client's copy of the shard map (docs/sharding.md): which
// shard owns each board moved off the default shard. A deployment that
// never moved a board has no bucket, and the client then speaks to the
// default shard alone, as before shards. The copy is read at the first
// intent and again whenever a coordinator refuses an intent as another
// shard's, so a client with a stale map is routed right on its next try.
type shards struct {
	mu      sync.Mutex
	kv      jetstream.KeyValue // nil until the bucket was found
	boards  map[string]string  // board → shard, of the boards in the bucket
	checked time.Time          // when the bucket was last looked for
	subs    map[string][]*nats.Subscription
	txns    map[string]string // transaction id → its shard, for its commit, abort and renew
}

// maxRedirects bounds how many times one intent is sent again as
// another shard's (a board moved twice in a row, a move in progress).
const maxRedirects = 8

// shardsRecheck is how long a client that found no shard map goes on
// without looking again, unless an intent is refused as another shard's.
const shardsRecheck = 10 * time.Second

// load reads the whole map, binding the bucket if it was not yet;
// without force, a bucket found missing is looked for again only after
// shardsRecheck.
func (c *Client) loadShards(ctx context.Context, force bool) error {
	s := &c.shards
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv == nil {
		if !force && !s.checked.IsZero() && time.Since(s.checked) < shardsRecheck {
			return nil
		}
		s.checked = time.Now()
		kv, err := c.js.KeyValue(ctx, c.subj.ShardsBucket())
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("agents: the shard map %s: %w", c.subj.ShardsBucket(), err)
		}
		s.kv = kv
	} else if !force && s.boards != nil {
		return nil
	}
	boards := map[string]string{}
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("agents: the shard map: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	for _, k := range keys {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("agents: the shard map: board %s: %w", k, err)
		}
		boards[k] = string(e.Value())
	}
	s.boards = boards
	return nil
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
	if err := c.loadShards(ctx, false); err != nil {
		c.log.Debug("no shard map; the default shard decides", "err", err)
	}
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

// granted notes the shard of a transaction the client was granted.
func (c *Client) granted(d *intents.Decision, shard string) {
	if d.Txn == "" || d.Outcome != intents.OutcomeGranted {
		return
	}
	c.shards.mu.Lock()
	defer c.shards.mu.Unlock()
	if c.shards.txns == nil {
		c.shards.txns = map[string]string{}
	}
	c.shards.txns[d.Txn] = shard
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
