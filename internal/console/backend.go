package console

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// backend answers the page's JSON requests from the coordinator's API and
// streams.
type backend struct {
	cfg     Config
	subj    intents.Subjects
	conn    atomic.Pointer[conn]
	hub     *hub
	waiters *waiters
	// whatifs holds a token while a what-if runs: one at a time.
	whatifs chan struct{}
}

// conn is the connection the console reads through, which SetNATS
// replaces.
type conn struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func newConn(nc *nats.Conn) *conn {
	// jetstream.New fails only for a nil connection, which the callers
	// refuse.
	js, _ := jetstream.New(nc)
	return &conn{nc: nc, js: js}
}

func newBackend(cfg Config) *backend {
	b := &backend{cfg: cfg, subj: intents.Subjects{Prefix: cfg.Prefix}, whatifs: make(chan struct{}, 1)}
	b.conn.Store(newConn(cfg.NATS))
	b.hub = newHub(cfg.NATS, b.subj.AllEvents(), cfg.MaxStreams, cfg.StreamBuffer)
	b.waiters = newWaiters(b)
	return b
}

// httpError is an answer other than 200, with the sentence the page shows.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

// clipped is how an answer quotes a parameter: never more of it than a
// sentence needs, whatever was sent.
func clipped(s string) string { return intents.Clip(s, 80) }

func badRequest(format string, args ...any) error {
	// Clipped whole as well: a library's error may quote the input too.
	return &httpError{status: http.StatusBadRequest, msg: intents.Clip(fmt.Sprintf(format, args...), 300)}
}

// apiError is an error reply of the coordinator's API: the micro error
// code (a SPEC §3 reason, unavailable, internal, not_found) and its text.
type apiError struct{ code, description string }

func (e *apiError) Error() string { return e.code + ": " + e.description }

// json wraps a JSON endpoint: fn's value is the 200 answer, its error an
// {"error": …} answer whose status says whose fault it is.
func (b *backend) json(fn func(context.Context, *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := fn(r.Context(), r)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err != nil {
			w.WriteHeader(statusOf(err))
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		if err := json.NewEncoder(w).Encode(v); err != nil {
			b.cfg.Logger.Warn("console: encode an answer", "path", r.URL.Path, "err", err)
		}
	}
}

func statusOf(err error) int {
	var he *httpError
	var ae *apiError
	switch {
	case errors.As(err, &he):
		return he.status
	case errors.As(err, &ae) && ae.code == "not_found":
		return http.StatusNotFound
	case errors.As(err, &ae) && ae.code == string(intents.ReasonInvalid):
		return http.StatusBadRequest
	case errors.As(err, &ae) && ae.code == string(intents.ReasonUnauthorized):
		return http.StatusForbidden
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusBadGateway
}

// request calls an API endpoint with a JSON body and decodes the reply
// into out, through the connection the console reads through.
func (b *backend) request(ctx context.Context, endpoint string, body, out any) error {
	return b.actionRequest(ctx, b.conn.Load().nc, endpoint, body, out)
}

// logQuery is a log.query request. Trace is sent only when set, so that a
// coordinator whose log.query has no trace filter is asked it only when
// the page searches by trace id (and then says so, invalid).
type logQuery struct {
	Agent  string            `json:"agent,omitempty"`
	Path   string            `json:"path,omitempty"`
	Type   intents.EventType `json:"type,omitempty"`
	Txn    string            `json:"txn,omitempty"`
	Trace  string            `json:"trace,omitempty"`
	Intent string            `json:"intent,omitempty"`
	From   uint64            `json:"from,omitempty"`
	Limit  int               `json:"limit,omitempty"`
}

// logPageMax is the most events one log.query answers.
const logPageMax = 1000

// logPage asks one page of q: its events and the seq to go on from, 0 at
// the end of the log.
func (b *backend) logPage(ctx context.Context, q logQuery) ([]*intents.Event, uint64, error) {
	if q.Limit == 0 {
		q.Limit = logPageMax
	}
	var page struct {
		Events []*intents.Event `json:"events"`
		Next   uint64           `json:"next"`
	}
	if err := b.request(ctx, intents.APILogQuery, q, &page); err != nil {
		return nil, 0, err
	}
	return page.Events, page.Next, nil
}

// scanLog calls fn with every event of q from q.From on, a page after
// another, until the log ends, fn returns false, or maxPages pages were
// read; it returns whether the end of the log was reached.
func (b *backend) scanLog(ctx context.Context, q logQuery, maxPages int, fn func(*intents.Event) bool) (bool, error) {
	for range maxPages {
		evs, next, err := b.logPage(ctx, q)
		if err != nil {
			return false, err
		}
		for _, ev := range evs {
			if !fn(ev) {
				return true, nil
			}
		}
		if next == 0 {
			return true, nil
		}
		q.From = next
	}
	return false, nil
}

// stateEntry is one path as state.get answers it.
type stateEntry struct {
	Exists   bool            `json:"exists"`
	Value    json.RawMessage `json:"value,omitempty"`
	Version  uint64          `json:"version"`
	ModRev   uint64          `json:"mod_rev,omitempty"`
	Redacted []string        `json:"redacted,omitempty"`
}

type stateAnswer struct {
	Rev    uint64                `json:"rev"`
	Values map[string]stateEntry `json:"values"`
}

func (b *backend) stateGet(ctx context.Context, paths ...string) (*stateAnswer, error) {
	out := &stateAnswer{}
	if paths == nil {
		paths = []string{}
	}
	if err := b.request(ctx, intents.APIStateGet, map[string][]string{"paths": paths}, out); err != nil {
		return nil, err
	}
	return out, nil
}

// overview is the header of every view: the coordinator's revision and
// how much waits where.
func (b *backend) overview(ctx context.Context, _ *http.Request) (any, error) {
	st, err := b.stateGet(ctx)
	if err != nil {
		return nil, err
	}
	var txns struct {
		Txns []json.RawMessage `json:"txns"`
	}
	if err := b.request(ctx, intents.APITxnList, struct{}{}, &txns); err != nil {
		return nil, err
	}
	w, err := b.waiters.list(ctx)
	if err != nil {
		return nil, err
	}
	queue, err := b.readCases(ctx, intents.StreamArbiter)
	if err != nil {
		return nil, err
	}
	dead, err := b.readCases(ctx, intents.StreamDLQ)
	if err != nil {
		return nil, err
	}
	var rules map[string]any
	if err := b.request(ctx, intents.APIRulesGet, struct{}{}, &rules); err != nil {
		return nil, err
	}
	info := b.shardInfo(ctx)
	return map[string]any{"rev": st.Rev, "prefix": b.subj.Prefix, "now": b.cfg.Now(), "txns": len(txns.Txns),
		"waiters": len(w), "arbiter_queue": len(queue.Cases), "dead_letters": len(dead.Cases),
		"rules": map[string]any{"hash": rules["hash"], "source": rules["source"]},
		"shard": info.Shard, "owners": info.Owners}, nil
}

// shardInfo is the shard of the coordinator the console reads, and the
// boards its log gave away or took (docs/sharding.md); the default shard
// and none from a coordinator that does not say.
func (b *backend) shardInfo(ctx context.Context) intents.ShardInfo {
	info := intents.ShardInfo{Shard: intents.DefaultShard}
	if err := b.request(ctx, intents.APIShardInfo, struct{}{}, &info); err != nil {
		return intents.ShardInfo{Shard: intents.DefaultShard}
	}
	return info
}

// value is the live state.get of one path: what the coordinator answers
// now, next to the tree the page shows.
func (b *backend) value(ctx context.Context, r *http.Request) (any, error) {
	path := r.URL.Query().Get("path")
	if err := intents.CheckPath(path); err != nil {
		return nil, badRequest("path %q: %v", clipped(path), err)
	}
	st, err := b.stateGet(ctx, path)
	if err != nil {
		return nil, err
	}
	return map[string]any{"rev": st.Rev, "path": path, "entry": st.Values[path]}, nil
}

// stateFoldPages bounds the log a state fold reads: a million changes.
const stateFoldPages = 1000

// state answers the state tree at a revision (?rev=N; the latest without
// it): every node, its value when a leaf, its version and mod_rev. It is
// the fold of the log's change events up to that revision, with package
// state, as `coagent replay` folds the log: log.query has no snapshot, so a
// log compacted past its first event is refused with a sentence saying so.
func (b *backend) state(ctx context.Context, r *http.Request) (any, error) {
	var rev uint64
	if s := r.URL.Query().Get("rev"); s != "" {
		var err error
		if rev, err = strconv.ParseUint(s, 10, 64); err != nil || rev == 0 {
			return nil, badRequest("rev %q: want a revision, a whole number from 1", clipped(s))
		}
	}
	head, err := b.stateGet(ctx)
	if err != nil {
		return nil, err
	}
	if rev > head.Rev {
		return nil, badRequest("rev %d: the state is at rev %d", rev, head.Rev)
	}
	until := rev
	if until == 0 {
		until = head.Rev
	}
	first, _, err := b.logPage(ctx, logQuery{Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(first) > 0 && first[0].Seq > 1 {
		return nil, &httpError{status: http.StatusConflict, msg: fmt.Sprintf(
			"the log was compacted: it starts at seq %d, and the console rebuilds a state from the log's changes alone; "+
				"`coagent replay --until %d` rebuilds it from the data directory's snapshot", first[0].Seq, until)}
	}
	// A board that left this shard or came to it (docs/sharding.md) is a
	// board event, not a change: they are few, read first, and folded in
	// their place among the changes.
	var boards []*intents.Event
	if _, err := b.scanLog(ctx, logQuery{Type: intents.EventBoard}, stateFoldPages, func(ev *intents.Event) bool {
		if ev.Seq > until {
			return false
		}
		boards = append(boards, ev)
		return true
	}); err != nil {
		return nil, err
	}
	f := newFolder()
	var foldErr error
	boardsUpTo := func(seq uint64) error {
		for len(boards) > 0 && boards[0].Seq <= seq {
			if err := f.board(boards[0]); err != nil {
				return err
			}
			boards = boards[1:]
		}
		return nil
	}
	complete, err := b.scanLog(ctx, logQuery{Type: intents.EventChange}, stateFoldPages, func(ev *intents.Event) bool {
		if ev.Seq > until {
			return false
		}
		if foldErr = boardsUpTo(ev.Seq); foldErr == nil {
			foldErr = f.apply(ev)
		}
		return foldErr == nil
	})
	if err == nil && foldErr == nil {
		foldErr = boardsUpTo(until)
	}
	switch {
	case err != nil:
		return nil, err
	case foldErr != nil:
		return nil, foldErr
	case !complete:
		return nil, &httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf(
			"rev %d is more than %d changes into the log; `coagent replay --until %d` rebuilds it", until, stateFoldPages*logPageMax, until)}
	}
	return map[string]any{"rev": until, "head": head.Rev, "latest": rev == 0, "nodes": f.tree.Export(), "redacted": f.redactedPaths(),
		"shard": b.shardInfo(ctx)}, nil
}

// folder folds the log's change events into a tree as the console's
// reader sees them. A write whose value the readers rules keep from it
// (its own path in the change's Redacted: the value is gone) is folded as
// a set of null, so that the fold never fails on it and the versions stay
// the log's; such paths, and those taken out of a value under them, are
// listed as redacted until a later write of theirs is seen whole.
type folder struct {
	tree     *state.Tree
	redacted map[string]bool
}

func newFolder() *folder { return &folder{tree: state.New(), redacted: map[string]bool{}} }

// apply folds ev, a change event.
func (f *folder) apply(ev *intents.Event) error {
	if ev.Change == nil {
		return fmt.Errorf("change event %d has no change", ev.Seq)
	}
	writes := ev.Change.Writes
	hidden := ev.Change.Redacted
	if len(hidden) > 0 {
		writes = slices.Clone(writes)
	}
	for i, w := range writes {
		for p := range f.redacted {
			if p == w.Path || strings.HasPrefix(p, w.Path+".") {
				delete(f.redacted, p)
			}
		}
		for _, p := range hidden {
			switch {
			case p == w.Path && w.Op != intents.OpDelete:
				writes[i].Op, writes[i].Value = intents.OpSet, json.RawMessage("null")
				f.redacted[p] = true
			case strings.HasPrefix(p, w.Path+"."):
				f.redacted[p] = true
			}
		}
	}
	if err := f.tree.ApplyAt(ev.Seq, state.Stamp{Time: ev.Time, Agent: ev.Agent}, writes); err != nil {
		return fmt.Errorf("fold change event %d: %w", ev.Seq, err)
	}
	return nil
}

// board folds ev, a board event: a board leaving the shard is deleted,
// one coming to it takes the state its release carried.
func (f *folder) board(ev *intents.Event) error {
	h := ev.Handoff
	if h == nil {
		return fmt.Errorf("board event %d has no handoff", ev.Seq)
	}
	stamp := state.Stamp{Time: ev.Time, Agent: ev.Agent}
	var err error
	switch h.Kind {
	case intents.HandoffRelease:
		err = f.tree.Cut(ev.Seq, stamp, h.Board)
	case intents.HandoffAdopt:
		var nodes []state.Node
		if len(h.Nodes) > 0 {
			err = json.Unmarshal(h.Nodes, &nodes)
		}
		if err == nil {
			err = f.tree.Graft(ev.Seq, stamp, h.Board, nodes)
		}
	}
	if err != nil {
		return fmt.Errorf("fold board event %d: %w", ev.Seq, err)
	}
	return nil
}

// redactedPaths lists the paths kept from the reader, in order.
func (f *folder) redactedPaths() []string {
	out := slices.Sorted(maps.Keys(f.redacted))
	if out == nil {
		out = []string{}
	}
	return out
}

// txns is txn.list, with the console's clock, so that the page counts the
// leases down from the server's time rather than its own.
func (b *backend) txns(ctx context.Context, _ *http.Request) (any, error) {
	var out struct {
		Txns []map[string]any `json:"txns"`
	}
	if err := b.request(ctx, intents.APITxnList, struct{}{}, &out); err != nil {
		return nil, err
	}
	if out.Txns == nil {
		out.Txns = []map[string]any{}
	}
	return map[string]any{"now": b.cfg.Now(), "txns": out.Txns}, nil
}

// boardTask is one task of a lane, as the board shows it.
type boardTask struct {
	Task     string   `json:"task"`
	Name     string   `json:"name"`
	Status   any      `json:"status,omitempty"`
	Owner    string   `json:"owner,omitempty"`
	Priority any      `json:"priority,omitempty"`
	Pending  []string `json:"pending_effects,omitempty"`
	Tries    any      `json:"tries,omitempty"`
	// Dead says the task is a dead letter: its status is its rule's
	// dead_to, past its max_retries.
	Dead    bool      `json:"dead,omitempty"`
	Lease   string    `json:"txn,omitempty"`
	Expires time.Time `json:"lease_expires,omitzero"`
}

// board is the tasks of every lane — the parent of a task rule with a
// lease whose pattern ends in ".*", such as tasks for tasks.* — with their
// owners, the leases of their claims and their pending effects.
func (b *backend) board(ctx context.Context, _ *http.Request) (any, error) {
	var rec struct {
		File json.RawMessage `json:"file"`
	}
	if err := b.request(ctx, intents.APIRulesGet, struct{}{}, &rec); err != nil {
		return nil, err
	}
	var file struct {
		Rules []struct {
			Pattern    string `json:"pattern"`
			Kind       string `json:"kind"`
			Lease      string `json:"lease"`
			MaxRetries int    `json:"max_retries"`
			DeadTo     string `json:"dead_to"`
		} `json:"rules"`
	}
	_ = json.Unmarshal(rec.File, &file) // no rules in force: no lane
	var lanes []string
	deadTo := map[string]string{} // by lane, for a rule with max_retries
	for _, r := range file.Rules {
		lane, ok := strings.CutSuffix(r.Pattern, ".*")
		if ok && r.Kind == "task" && r.Lease != "" && !strings.Contains(lane, "*") && !slices.Contains(lanes, lane) {
			lanes = append(lanes, lane)
			if r.MaxRetries > 0 {
				deadTo[lane] = cmp.Or(r.DeadTo, rules.DefaultDeadTo)
			}
		}
	}
	out := map[string]any{"now": b.cfg.Now(), "lanes": []any{}}
	if len(lanes) == 0 {
		return out, nil
	}
	st, err := b.stateGet(ctx, lanes...)
	if err != nil {
		return nil, err
	}
	var list struct {
		Claims []struct {
			Task    string    `json:"task"`
			Txn     string    `json:"txn"`
			Expires time.Time `json:"lease_expires"`
		} `json:"claims"`
	}
	if err := b.request(ctx, intents.APITxnList, map[string]bool{"claims": true}, &list); err != nil {
		return nil, err
	}
	var cols []any
	for _, lane := range lanes {
		tasks := []boardTask{}
		var members map[string]any
		_ = json.Unmarshal(st.Values[lane].Value, &members) // an absent lane has no tasks
		for _, name := range slices.Sorted(maps.Keys(members)) {
			rec, _ := members[name].(map[string]any)
			if rec == nil {
				continue
			}
			t := boardTask{Task: lane + "." + name, Name: name, Status: rec["status"], Priority: rec["priority"], Tries: rec["tries"]}
			t.Dead = deadTo[lane] != "" && rec["status"] == deadTo[lane]
			t.Owner, _ = rec["owner"].(string)
			effects, _ := rec["effects"].(map[string]any)
			for _, key := range slices.Sorted(maps.Keys(effects)) {
				if e, _ := effects[key].(map[string]any); e["status"] == "pending" {
					t.Pending = append(t.Pending, key)
				}
			}
			for _, c := range list.Claims {
				if c.Task == t.Task {
					t.Lease, t.Expires = c.Txn, c.Expires
				}
			}
			tasks = append(tasks, t)
		}
		cols = append(cols, map[string]any{"lane": lane, "tasks": tasks})
	}
	out["lanes"] = cols
	return out, nil
}

// conflicts is conflicts.top: the page groups the spots by board,
// document and pair of agents.
func (b *backend) conflicts(ctx context.Context, _ *http.Request) (any, error) {
	var out struct {
		Spots []json.RawMessage `json:"spots"`
	}
	if err := b.request(ctx, intents.APIConflictsTop, map[string]int{"limit": 100}, &out); err != nil {
		return nil, err
	}
	if out.Spots == nil {
		out.Spots = []json.RawMessage{}
	}
	return out, nil
}

// maxCases is how many messages of the arbiter or dead-letter stream a
// view reads.
const maxCases = 200

// caseRow is one message of the arbiter or dead-letter stream.
type caseRow struct {
	Seq  uint64              `json:"seq"`
	Time time.Time           `json:"time"`
	Held bool                `json:"held"` // delivered to an arbiter, not yet settled (the arbiter queue only)
	Case *intents.Escalation `json:"case"`
}

type casesAnswer struct {
	Stream  string    `json:"stream"`
	Cases   []caseRow `json:"cases"`
	More    bool      `json:"more,omitempty"`
	Pending uint64    `json:"pending"` // the arbiters' consumer: not yet delivered
	Held    int       `json:"held"`    // the arbiters' consumer: delivered, not acknowledged
}

// readCases reads the cases of the arbiter queue (kind StreamArbiter) or
// the dead letters (StreamDLQ) by sequence, as `coagent dlq list` does:
// direct gets, which leave the work queue as it is.
func (b *backend) readCases(ctx context.Context, kind string) (*casesAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	name := b.subj.Stream(kind)
	out := &casesAnswer{Stream: name, Cases: []caseRow{}}
	stream, err := b.conn.Load().js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	var delivered uint64
	if kind == intents.StreamArbiter {
		c, err := stream.Consumer(ctx, intents.ArbitersConsumer)
		if err != nil {
			return nil, fmt.Errorf("stream %s, consumer %s: %w", name, intents.ArbitersConsumer, err)
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("stream %s, consumer %s: %w", name, intents.ArbitersConsumer, err)
		}
		delivered, out.Pending, out.Held = ci.Delivered.Stream, ci.NumPending, ci.NumAckPending
	}
	if info.State.Msgs == 0 {
		return out, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		if len(out.Cases) == maxCases {
			out.More = true
			break
		}
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // settled, or retried
		}
		if err != nil {
			return nil, fmt.Errorf("stream %s, message %d: %w", name, seq, err)
		}
		var c intents.Escalation
		if err := json.Unmarshal(m.Data, &c); err != nil {
			return nil, fmt.Errorf("stream %s, message %d: %w", name, seq, err)
		}
		out.Cases = append(out.Cases, caseRow{Seq: seq, Time: m.Time, Held: kind == intents.StreamArbiter && seq <= delivered, Case: &c})
	}
	return out, nil
}

// arbiter answers both queues of cases.
func (b *backend) arbiter(ctx context.Context, _ *http.Request) (any, error) {
	queue, err := b.readCases(ctx, intents.StreamArbiter)
	if err != nil {
		return nil, err
	}
	dead, err := b.readCases(ctx, intents.StreamDLQ)
	if err != nil {
		return nil, err
	}
	return map[string]any{"now": b.cfg.Now(), "queue": queue, "dead_letters": dead}, nil
}

// eventPaths returns the paths an event concerns, for the feed's path
// filter: what it wrote, what its intent read and wrote, what conflicted.
func eventPaths(ev *intents.Event) []string {
	var out []string
	intent := func(in *intents.Intent) {
		if in == nil {
			return
		}
		for _, w := range in.Writes {
			out = append(out, w.Path)
		}
		for _, r := range in.Reads {
			out = append(out, r.Path)
		}
	}
	if ev.Change != nil {
		for _, w := range ev.Change.Writes {
			out = append(out, w.Path)
		}
	}
	if ev.Received != nil {
		intent(ev.Received.Intent)
	}
	if ev.Wait != nil {
		intent(ev.Wait.Intent)
		for _, c := range ev.Wait.Conflicts {
			out = append(out, c.Path)
		}
	}
	if ev.Grant != nil {
		intent(ev.Grant.Propose)
		for _, r := range ev.Grant.Reads {
			out = append(out, r.Path)
		}
	}
	if ev.Decision != nil {
		for _, c := range ev.Decision.Conflicts {
			out = append(out, c.Path)
		}
		for p := range ev.Decision.Versions {
			out = append(out, p)
		}
	}
	if ev.Resolution != nil {
		intent(ev.Resolution.Replacement)
	}
	return out
}

// feedFilter is the live feed's filter: every set criterion must match.
type feedFilter struct {
	agent, path string
	typ         intents.EventType
}

func parseFilter(r *http.Request) (feedFilter, error) {
	q := r.URL.Query()
	f := feedFilter{agent: q.Get("agent"), path: q.Get("path"), typ: intents.EventType(q.Get("type"))}
	if f.agent != "" && !intents.ValidSegment(f.agent) {
		return f, badRequest("agent %q: not an agent name", clipped(f.agent))
	}
	if f.path != "" {
		if err := intents.CheckPath(f.path); err != nil {
			return f, badRequest("path %q: %v", clipped(f.path), err)
		}
	}
	if f.typ != "" && !slices.Contains(intents.EventTypes, f.typ) {
		return f, badRequest("type %q: not an event type", clipped(string(f.typ)))
	}
	return f, nil
}

func (f feedFilter) matches(ev *intents.Event) bool {
	switch {
	case f.agent != "" && ev.Agent != f.agent:
		return false
	case f.typ != "" && ev.Type != f.typ:
		return false
	case f.path != "":
		return slices.ContainsFunc(eventPaths(ev), func(p string) bool { return intents.Overlaps(p, f.path) })
	}
	return true
}
