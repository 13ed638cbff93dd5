package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The blackboard CoAgent replaces is Redis with a Lua compare-and-set: a
// hash per key holding its value and version, read with HMGET, written by
// a script that sets both only if the version is still the one read, and
// HINCRBY for an increment. RedisBaseline runs the rmw and incr workloads
// against it with the coordinator's agents, keys and retry policy, so that
// `coagent bench` can say how the coordinator compares on the
// blackboard's own ground.

// casScript sets the key's value and version (KEYS[1]) if its version is
// still ARGV[1], returning 1, or returns the version it has instead as a
// negative number (-0 is 0: a key that does not exist has version 0).
var casScript = redis.NewScript(`
local v = tonumber(redis.call('HGET', KEYS[1], 'ver') or '0')
if v ~= tonumber(ARGV[1]) then return -v - 1 end
redis.call('HSET', KEYS[1], 'ver', v + 1, 'val', ARGV[2])
return 1
`)

// RedisResult is what one Redis baseline run measured.
type RedisResult struct {
	// Fsync is the AOF's appendfsync setting the server ran with.
	Fsync            string
	Updates, Tries   int
	GaveUp, Reads    int
	UpdateThroughput float64 // successful updates per second
	TriesPerUpdate   float64
	UpdateLatency    Latency
	// Lost is the lost-update check's: the sum over keys of the updates
	// the agents saw succeed less the key's version (rmw) or value (incr).
	Lost int64
}

// RedisBaseline runs cfg's workload (rmw or incr) against the Redis server
// at addr for cfg.Duration: cfg.Agents agents, each on its own connection,
// on cfg.Keys keys of a prefix of its own, with the retry policy of the
// coordinator's agents (backoff with full jitter, MaxTries tries; a
// failed compare-and-set's answer carries the current version, as a
// rejection does, and the next try uses it). fsync names the server's
// appendfsync, for the result.
func RedisBaseline(ctx context.Context, cfg Config, addr, fsync string) (*RedisResult, error) {
	cfg.EnsureDefaults()
	if cfg.Workload != WorkloadRMW && cfg.Workload != WorkloadIncr {
		return nil, fmt.Errorf("loadgen: the Redis baseline runs rmw and incr, not %s", cfg.Workload)
	}
	run := "bench" + strconv.FormatInt(time.Now().UnixNano(), 36)
	keys := make([]string, max(cfg.Keys, 1))
	for k := range keys {
		keys[k] = run + ".k" + strconv.Itoa(k)
	}
	type agentCount struct {
		updates, tries, gaveUp, reads int
		applied                       map[string]int
		lat                           []time.Duration
		known                         map[string]uint64 // as the coordinator's agent's versions
	}
	counts := make([]agentCount, cfg.Agents)
	clients := make([]*redis.Client, cfg.Agents)
	for i := range clients {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MinIdleConns: 1,
			ReadTimeout: maxRequestTimeout, WriteTimeout: maxRequestTimeout})
		defer clients[i].Close()
		if err := clients[i].Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("loadgen: redis %s: agent %d: %w", addr, i, err)
		}
	}
	if err := casScript.Load(ctx, clients[0]).Err(); err != nil {
		return nil, fmt.Errorf("loadgen: redis %s: load the compare-and-set script: %w", addr, err)
	}
	errs := make([]error, cfg.Agents)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	for i, rc := range clients {
		c := &counts[i]
		c.applied = map[string]int{}
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				key := keys[rng.IntN(len(keys))]
				began := time.Now()
				ok, err := redisUpdate(ctx, rc, cfg.Workload, key, rng, deadline, &c.known, &c.tries, &c.reads)
				if err != nil {
					errs[i] = err
					return
				}
				if ok {
					c.updates++
					c.applied[key]++
					c.lat = append(c.lat, time.Since(began))
				} else {
					c.gaveUp++
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("loadgen: redis %s: %w", addr, err)
	}
	res := &RedisResult{Fsync: fsync}
	applied := map[string]int{}
	var lats [][]time.Duration
	for _, c := range counts {
		res.Updates += c.updates
		res.Tries += c.tries
		res.GaveUp += c.gaveUp
		res.Reads += c.reads
		lats = append(lats, c.lat)
		for k, n := range c.applied {
			applied[k] += n
		}
	}
	res.UpdateThroughput = float64(res.Updates) / elapsed.Seconds()
	if res.Updates > 0 {
		res.TriesPerUpdate = float64(res.Tries) / float64(res.Updates)
	}
	res.UpdateLatency = summarize(slices.Concat(lats...))
	for _, k := range keys {
		vals, err := clients[0].HMGet(ctx, k, "val", "ver").Result()
		if err != nil {
			return nil, fmt.Errorf("loadgen: redis %s: read back %s: %w", addr, k, err)
		}
		val, ver := redisInt(vals[0]), redisInt(vals[1])
		n := int64(applied[k])
		if cfg.Workload == WorkloadIncr {
			res.Lost += abs(n - val)
		} else {
			// Each compare-and-set that succeeded wrote its version as the
			// value: a value behind the version is a set made over a stale
			// read.
			res.Lost += abs(n-ver) + abs(ver-val)
		}
	}
	return res, nil
}

// redisUpdate makes one update of key: an increment, or compare-and-sets
// until one succeeds, MaxTries have failed or the measurement is over,
// with the coordinator agents' backoff between tries. As the coordinator's
// agent does (see agent.rmw), the first try reads the key unless the last
// update's answer (known) gave its version, and each later one uses the
// version the failed one's answer gave.
func redisUpdate(ctx context.Context, rc *redis.Client, w Workload, key string, rng *rand.Rand, deadline time.Time,
	known *map[string]uint64, tries, reads *int) (bool, error) {
	if w == WorkloadIncr {
		*tries++
		return true, rc.HIncrBy(ctx, key, "val", 1).Err()
	}
	ver, ok := (*known)[key]
	if !ok {
		*reads++
		vals, err := rc.HMGet(ctx, key, "val", "ver").Result()
		if err != nil {
			return false, err
		}
		if s, ok := vals[1].(string); ok {
			if ver, err = strconv.ParseUint(s, 10, 64); err != nil {
				return false, fmt.Errorf("version of %s: %q", key, s)
			}
		}
	}
	for try := 1; ; try++ {
		*tries++
		n, err := casScript.Run(ctx, rc, []string{key}, ver, ver+1).Int64()
		if err != nil {
			return false, err
		}
		if n == 1 {
			*known = map[string]uint64{key: ver + 1}
			return true, nil
		}
		if try == MaxTries || !time.Now().Before(deadline) {
			*known = nil
			return false, nil
		}
		ver = uint64(-n - 1)
		if !pause(ctx, backoff(try, rng)) {
			return false, ctx.Err()
		}
	}
}

// redisInt is an HMGET field as a number, 0 when absent.
func redisInt(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func abs(n int64) int64 { return max(n, -n) }
