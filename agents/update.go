package agents

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/coagent/coagent/intents"
)

// Update is a read-modify-write of one path: it reads the value and its
// version, calls fn with the value (nil when the path does not exist), and
// applies fn's result as a set that reads the path at that version. When
// another writer got there first (a stale read or a conflict with a
// transaction in flight) it tries again, up to the client's retries,
// pausing with exponential backoff and full jitter between attempts so
// that agents that collided spread out instead of colliding again in step.
// A rejection names the path's current version: when it is still the one
// fn saw (a transaction holds the path but has not written it), the same
// write is sent again without a read; otherwise Update reads again and
// calls fn again. Nothing is lost: a write lands only on the version fn
// saw. fn may be called several times and must not have side effects; an
// error from fn ends Update with that error.
func (c *Client) Update(ctx context.Context, path string, fn func(old any) (any, error)) (*intents.Decision, error) {
	return UpdateJSON(ctx, c, path, func(old any, _ bool) (any, error) { return fn(old) })
}

// UpdateJSON is Update for a typed value: fn gets the current value
// decoded into a T (its zero value when the path does not exist, with
// exists false) and returns the new one.
func UpdateJSON[T any](ctx context.Context, c *Client, path string, fn func(old T, exists bool) (T, error)) (*intents.Decision, error) {
	if err := intents.CheckPath(path); err != nil {
		return nil, fmt.Errorf("agents: update %q: %w", path, err)
	}
	var version uint64 // the version fn saw
	var next T         // what fn made of it
	reread := true
	for attempt := 0; ; attempt++ {
		if reread {
			st, err := c.Read(ctx, path)
			if err != nil {
				return nil, err
			}
			cur := st.Values[path]
			var old T
			if err := cur.Decode(&old); err != nil {
				return nil, fmt.Errorf("agents: update %q: value %s: %w", path, intents.Clip(string(cur.Value), 200), err)
			}
			if next, err = fn(old, cur.Exists); err != nil {
				return nil, err
			}
			version = cur.Version
		}
		d, err := c.Apply(ctx, intents.Apply("update").ReadAt(path, version).Set(path, next))
		if err == nil {
			return d, nil
		}
		if !errors.Is(err, ErrStaleRead) && !errors.Is(err, ErrConflict) || attempt >= c.cfg.retries {
			return d, err
		}
		// The same version is the same value: fn's result for it stands.
		// (A path the board rules' readers keep from the agent has no
		// version in the decision, and is read again.)
		now, named := d.Versions[path]
		reread = !named || now != version
		if !sleep(ctx, c.backoff(attempt)) {
			return d, fmt.Errorf("agents: update %q: %w (after %w)", path, context.Cause(ctx), err)
		}
	}
}

// backoff is the pause before attempt+1: a random duration below
// base·2^attempt, capped at the maximum.
func (c *Client) backoff(attempt int) time.Duration {
	bound := c.cfg.backoffMax
	if attempt < 30 {
		bound = min(bound, c.cfg.backoffBase<<attempt)
	}
	return rand.N(bound) + 1
}
