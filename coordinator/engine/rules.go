package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
)

// SetRules puts a rules file in force from now on (package rules): it is
// compiled first, and a file that does not compile is an error that changes
// nothing. Otherwise a rules event records the whole file, so that a replay
// decides every intent with the rules that were in force. An empty file
// removes every rule. Timers due by now fire first.
func (e *Engine) SetRules(now time.Time, file []byte, source string, out []*intents.Event) (Ready, error) {
	if _, err := rules.Compile(file, e.comp); err != nil {
		return Ready{Events: out}, err
	}
	norm, err := normalize(file)
	if err != nil {
		return Ready{Events: out}, err
	}
	r := &intents.Rules{File: norm, Hash: hashOf(norm), Source: source}
	if prev := e.rulesEvent; prev != nil {
		// The shadow rules stay in force: they change on their own.
		r.Shadow, r.ShadowHash, r.ShadowMode = prev.Shadow, prev.ShadowHash, prev.ShadowMode
	}
	return e.putRules(now, r, out)
}

// SetShadowRules puts file in force in the shadow from now on (coagent
// rules set --shadow): every intent is decided under it too, each
// decision it would change recorded as a shadow event, in mode
// (intents.ModeAudit, the default, or ModeWarn: the agent's decision
// carries a warning). The enforced rules stay as they are. An empty file
// removes the shadow file. A file that does not compile, or a mode that
// is neither, is an error that changes nothing.
func (e *Engine) SetShadowRules(now time.Time, file []byte, mode, source string, out []*intents.Event) (Ready, error) {
	if mode != "" && mode != intents.ModeAudit && mode != intents.ModeWarn {
		return Ready{Events: out}, &rules.Error{Field: "mode", Reason: fmt.Sprintf("%q: want audit or warn", mode)}
	}
	norm, err := normalize(file)
	if err != nil {
		return Ready{Events: out}, err
	}
	r := &intents.Rules{Source: source, Hash: hashOf(nil)}
	if prev := e.rulesEvent; prev != nil {
		r.File, r.Hash = prev.File, prev.Hash
	}
	if norm != nil {
		r.Shadow, r.ShadowHash, r.ShadowMode = norm, hashOf(norm), mode
	}
	return e.putRules(now, r, out)
}

// putRules records the rules event r, once the shadow rules it puts in
// force compile. Timers due by now fire first.
func (e *Engine) putRules(now time.Time, r *intents.Rules, out []*intents.Event) (Ready, error) {
	shadow := r.File
	if len(r.Shadow) > 0 {
		shadow = r.Shadow
	}
	if _, err := rules.CompileShadow(shadow, e.comp); err != nil {
		return Ready{Events: out}, err
	}
	for _, file := range [][]byte{r.File, r.Shadow} {
		if err := e.spansShards(file); err != nil {
			return Ready{Events: out}, err
		}
	}
	e.begin(now, out)
	e.advance()
	e.emit(intents.Event{Type: intents.EventRules, Rules: r})
	return e.end(), nil
}

// normalize is the file as a rules event records it: as encoding/json
// writes it (compact, HTML characters escaped), so that the hash a client
// computes over the published event's file is the recorded one; no rules
// is no file.
func normalize(file []byte) ([]byte, error) {
	t := bytes.TrimSpace(file)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil, nil
	}
	norm, err := json.Marshal(json.RawMessage(t))
	if err != nil {
		return nil, &rules.Error{Field: "(document)", Reason: err.Error()}
	}
	return norm, nil
}

func hashOf(norm []byte) string {
	sum := sha256.Sum256(norm)
	return hex.EncodeToString(sum[:])
}

// RulesHash is the hash SetRules records for file.
func RulesHash(file []byte) string {
	norm, _ := normalize(file)
	return hashOf(norm)
}

// Rules returns the rules in force and the event that set them: its hash
// and source. A nil Rules is no rules.
func (e *Engine) Rules() (*intents.Rules, *rules.Set) { return e.rulesEvent, e.rules }

// foldRules applies a rules event.
func (e *Engine) foldRules(r *intents.Rules) error {
	set, err := rules.Compile(r.File, e.comp)
	if err != nil {
		return err
	}
	if err := e.setShadow(r, set); err != nil {
		return err
	}
	e.rulesEvent = r
	e.rules = set
	if set.Empty() {
		e.rules = nil
	}
	return nil
}

// bucket is one agent's token bucket for its rate quota. It changes only in
// the fold of the intents the agent sends, at their event times, so a replay
// rebuilds it exactly.
type bucket struct {
	tokens float64
	at     time.Time
}

// refill brings b up to now under quota q and returns it (a fresh bucket
// starts full).
func (e *Engine) refill(agent string, q rules.Quota, now time.Time) *bucket {
	b := e.buckets[agent]
	if b == nil {
		b = &bucket{tokens: float64(q.Burst), at: now}
	}
	if d := now.Sub(b.at).Seconds(); d > 0 {
		b.tokens = math.Min(float64(q.Burst), b.tokens+d*q.IntentsPerSecond)
		b.at = now
	}
	b.tokens = math.Min(b.tokens, float64(q.Burst)) // the burst may have shrunk
	return b
}

// admit reports whether agent may send one more intent now under its rate
// quota, and if not, how long until it may. It changes nothing.
func (e *Engine) admit(agent string, now time.Time) (bool, time.Duration) {
	q, ok := e.rules.QuotaOf(agent)
	if !ok || q.IntentsPerSecond <= 0 {
		return true, 0
	}
	b := *e.refill(agent, q, now)
	if b.tokens >= 1 {
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / q.IntentsPerSecond * float64(time.Second))
	return false, max(wait, time.Millisecond)
}

// take spends a token of agent's bucket, when it has one, as the fold of an
// intent it sent: of its bucket under the shadow rules' quota too.
func (e *Engine) take(agent string, now time.Time) {
	e.takeOf(agent, now)
	if e.shadow != nil {
		live, liveBuckets := e.rules, e.buckets
		e.rules, e.buckets = e.shadow, e.shadowBuckets
		e.takeOf(agent, now)
		e.rules, e.buckets = live, liveBuckets
	}
}

func (e *Engine) takeOf(agent string, now time.Time) {
	q, ok := e.rules.QuotaOf(agent)
	if !ok || q.IntentsPerSecond <= 0 {
		delete(e.buckets, agent)
		return
	}
	b := e.refill(agent, q, now)
	if b.tokens >= 1 {
		b.tokens--
	}
	e.buckets[agent] = b
}

// maxTxns is how many transactions agent may hold in flight.
func (e *Engine) maxTxns(agent string) int {
	if q, ok := e.rules.QuotaOf(agent); ok && q.MaxTxns > 0 {
		return q.MaxTxns
	}
	return e.cfg.MaxTxnsPerAgent
}

// policy is the intent's conflict policy: its own, else the rules' for
// what it writes, else reject.
func (e *Engine) policy(in *intents.Intent) intents.OnConflict {
	if in.OnConflict == "" {
		if p := e.rules.OnConflict(writePaths(in.Writes)); p != "" {
			return p
		}
	}
	return in.Policy()
}

func writePaths(ws []intents.Write) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Path
	}
	return out
}

func appliedPaths(ws []intents.Applied) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Path
	}
	return out
}

// authorize checks the rules' writers and readers for an intent that reads
// reads and writes writes, rejecting it when it may not.
func (e *Engine) authorize(in *intents.Intent, reads []string, writes []string) bool {
	if detail, ok := e.rules.Authorize(in.Agent, reads, writes); !ok {
		e.reject(in, intents.ReasonUnauthorized, detail, nil)
		return false
	}
	return true
}

// invariantReads are the paths of the invariants a write set must keep:
// they join the intent's read set.
func invariantReads(checks []rules.Check) []string {
	var out []string
	for _, c := range checks {
		out = append(out, c.Cond.Paths...)
	}
	return out
}

func rateDetail(agent string, q rules.Quota, wait time.Duration) string {
	return fmt.Sprintf("agent %s is over its quota of %g intents/s (burst %d); retry in %s",
		agent, q.IntentsPerSecond, q.Burst, wait.Round(time.Millisecond))
}

// spansShards refuses an invariant whose paths are of boards of two
// shards, as far as this shard's log knows: no shard could check it
// (docs/sharding.md).
func (e *Engine) spansShards(file []byte) error {
	if e.owners == nil && e.shard == "" || len(file) == 0 {
		return nil
	}
	set, err := rules.CompileShadow(file, e.comp)
	if err != nil {
		return err
	}
	for _, inv := range set.AllInvariants() {
		var parts []string
		shards := map[string]bool{}
		for _, b := range intents.Boards(inv.Cond.Paths) {
			o := e.owner(b)
			shards[o] = true
			parts = append(parts, fmt.Sprintf("%s (shard %s)", b, o))
		}
		if len(shards) > 1 {
			return &rules.Error{Field: "invariants " + inv.Name,
				Reason: fmt.Sprintf("it reads %s; an invariant reads one shard's boards", strings.Join(parts, " and "))}
		}
	}
	return nil
}
