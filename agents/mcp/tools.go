package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// WriteOp is one change to the shared state.
type WriteOp struct {
	Path  string `json:"path" jsonschema:"dot-separated path into the shared JSON tree, e.g. tasks.t1.status (segments: letters, digits, _ or -)"`
	Op    string `json:"op,omitempty" jsonschema:"set (the default), merge (object keys become child paths), append (one element to an array), incr (add a number) or delete"`
	Value any    `json:"value,omitempty" jsonschema:"the JSON value: for set the new value, for merge an object, for append the element, for incr the number to add (default 1); leave out for delete"`
}

// Expect is the version a path must still have.
type Expect struct {
	Path    string `json:"path" jsonschema:"a path you read"`
	Version uint64 `json:"version" jsonschema:"the version read returned for it (0: the path must not exist); a newer version rejects the request as stale_read"`
}

// ReadInput is the input of read.
type ReadInput struct {
	Paths []string `json:"paths" jsonschema:"the paths to read, all at one revision, e.g. [\"tasks\", \"report.title\"]"`
}

// ReadValue is one path as read.
type ReadValue struct {
	Exists  bool   `json:"exists"`
	Value   any    `json:"value,omitempty" jsonschema:"the JSON value (absent when the path does not exist)"`
	Version uint64 `json:"version" jsonschema:"how many commits changed the path or anything under it: pass it as expect.version to write only if nobody changed it since"`
	ModRev  uint64 `json:"mod_rev" jsonschema:"the revision of the last commit that changed it"`
	// Redacted names what the board rules' readers keep from this agent.
	Redacted []string `json:"redacted,omitempty" jsonschema:"paths the board rules keep from this agent"`
}

// ReadOutput is the output of read.
type ReadOutput struct {
	Rev    uint64               `json:"rev" jsonschema:"the revision all values were read at"`
	Values map[string]ReadValue `json:"values" jsonschema:"each path's value, by path"`
}

// WriteInput is the input of write.
type WriteInput struct {
	Writes     []WriteOp `json:"writes" jsonschema:"the changes, applied all together or not at all"`
	Expect     []Expect  `json:"expect,omitempty" jsonschema:"compare-and-set: paths that must still be at the version you read"`
	Pre        []string  `json:"pre,omitempty" jsonschema:"conditions (expr-lang) that must all be true before, e.g. state.tasks.t1.status == \"open\"; a missing path reads as nil"`
	Post       []string  `json:"post,omitempty" jsonschema:"conditions that must all be true after the writes, e.g. state.stats.done <= 10 (old is the state before)"`
	OnConflict string    `json:"on_conflict,omitempty" jsonschema:"when another agent's transaction holds a path: reject (the default), wait (queue until it ends, at most wait_ms) or escalate (an arbiter decides)"`
	WaitMS     int64     `json:"wait_ms,omitempty" jsonschema:"with on_conflict wait: how long to wait, in milliseconds (default 30000)"`
	Action     string    `json:"action,omitempty" jsonschema:"a short label for the history, e.g. mark_done"`
}

// ClaimInput is the input of claim and release.
type ClaimInput struct {
	Path string `json:"path" jsonschema:"the task's path, e.g. tasks.t1: claim sets <path>.owner to this agent if nobody holds it, release deletes it if this agent does"`
	// Set are fields written under the task in the claim's or release's
	// own write.
	Set map[string]any `json:"set,omitempty" jsonschema:"fields to set under the task in the same write, by path relative to it (not owner): e.g. {\"status\": \"RUNNING\"} with claim, {\"status\": \"DONE\"} with release to complete the task"`
}

// ClaimNextInput is the input of claim_next.
type ClaimNextInput struct {
	Lane string         `json:"lane" jsonschema:"the lane: the path whose members are the tasks, e.g. tasks"`
	Set  map[string]any `json:"set,omitempty" jsonschema:"fields to set under the task in the claim's write, by path relative to it (not owner): e.g. {\"status\": \"RUNNING\"}"`
}

// BeginInput is the input of begin.
type BeginInput struct {
	Writes     []WriteOp `json:"writes" jsonschema:"the paths the transaction will write and how (op; no values yet): nobody else may write them until it ends"`
	Reads      []Expect  `json:"reads,omitempty" jsonschema:"paths the work depends on, at the version you read: nobody else may write them until it ends"`
	Pre        []string  `json:"pre,omitempty" jsonschema:"conditions that must be true to begin"`
	LeaseMS    int64     `json:"lease_ms,omitempty" jsonschema:"how long the transaction outlives this session, in milliseconds (the server renews it while the session lives; default 30000)"`
	OnConflict string    `json:"on_conflict,omitempty" jsonschema:"when another transaction holds a path: reject (the default), wait or escalate"`
	WaitMS     int64     `json:"wait_ms,omitempty" jsonschema:"with on_conflict wait: how long to wait, in milliseconds"`
	Action     string    `json:"action,omitempty" jsonschema:"a short label for the history"`
}

// CommitInput is the input of commit.
type CommitInput struct {
	Txn    string    `json:"txn" jsonschema:"the txn id begin returned"`
	Writes []WriteOp `json:"writes" jsonschema:"the writes with their values, inside the paths given to begin"`
	Post   []string  `json:"post,omitempty" jsonschema:"conditions that must be true after the writes"`
	Action string    `json:"action,omitempty" jsonschema:"a short label for the history"`
}

// AbortInput is the input of abort.
type AbortInput struct {
	Txn string `json:"txn" jsonschema:"the txn id begin returned"`
}

// HistoryInput is the input of history.
type HistoryInput struct {
	Path  string `json:"path,omitempty" jsonschema:"only events touching this path or anything under it"`
	Mine  bool   `json:"mine,omitempty" jsonschema:"only this agent's own events (its intents, decisions, transactions)"`
	Txn   string `json:"txn,omitempty" jsonschema:"only the events of this transaction"`
	Type  string `json:"type,omitempty" jsonschema:"only events of this type: intent, decision, change, grant, renew, expire, release, wait, escalate, notice, resolve or rules"`
	From  uint64 `json:"from,omitempty" jsonschema:"start at this log position (a revision); next in the answer continues"`
	Limit int    `json:"limit,omitempty" jsonschema:"at most this many events (default 50, at most 500)"`
}

// HistoryEvent is one event of the log, summarized.
type HistoryEvent struct {
	Seq    uint64    `json:"seq" jsonschema:"the log position (for a change, its revision)"`
	Time   time.Time `json:"time"`
	Type   string    `json:"type"`
	Agent  string    `json:"agent,omitempty"`
	Intent string    `json:"intent,omitempty"`
	Txn    string    `json:"txn,omitempty"`
	What   string    `json:"what" jsonschema:"what happened, in one line"`
}

// HistoryOutput is the output of history.
type HistoryOutput struct {
	Events []HistoryEvent `json:"events"`
	Next   uint64         `json:"next,omitempty" jsonschema:"pass as from to see the events after these (absent: no more)"`
}

var (
	opEnum       = []any{"set", "merge", "append", "incr", "delete"}
	conflictEnum = []any{"reject", "wait", "escalate"}
	typeEnum     = func() []any {
		var out []any
		for _, t := range intents.EventTypes {
			out = append(out, string(t))
		}
		return out
	}()
)

// typeSchemas are the schemas of the types jsonschema infers wrongly for
// this wire: a json.RawMessage holds any JSON value, not an array of bytes.
var typeSchemas = map[reflect.Type]*jsonschema.Schema{reflect.TypeFor[json.RawMessage](): {}}

// plainSchema is the schema of T with one type per node: jsonschema says
// ["null", "array"] of a slice (["null", "object"] of a map or a pointer),
// which some hosts refuse. A field that may be left out is one the
// schema does not require, not one that may be null.
func plainSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: typeSchemas})
	if err != nil {
		panic(fmt.Sprintf("mcp: schema of %T: %v", *new(T), err)) // a bug in this package's types
	}
	var walk func(*jsonschema.Schema)
	walk = func(s *jsonschema.Schema) {
		if s == nil {
			return
		}
		if ts := slices.DeleteFunc(slices.Clone(s.Types), func(t string) bool { return t == "null" }); len(s.Types) > 0 && len(ts) == 1 {
			s.Type, s.Types = ts[0], nil
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.AdditionalProperties)
	}
	walk(s)
	return s
}

// schemaFor is the input schema of T, with the enums and bounds its tags
// cannot say.
func schemaFor[T any]() *jsonschema.Schema {
	s := plainSchema[T]()
	var walk func(*jsonschema.Schema)
	walk = func(s *jsonschema.Schema) {
		if s == nil {
			return
		}
		for name, p := range s.Properties {
			switch name {
			case "op":
				p.Enum = opEnum
			case "on_conflict":
				p.Enum = conflictEnum
			case "type":
				p.Enum = typeEnum
			case "writes", "paths":
				p.MinItems = jsonschema.Ptr(1)
			case "lease_ms":
				p.Minimum = jsonschema.Ptr(float64(minLease.Milliseconds()))
			case "limit":
				p.Minimum, p.Maximum = jsonschema.Ptr(0.0), jsonschema.Ptr(500.0)
			case "replacement":
				// resolve fills them in when left out.
				p.Required = slices.DeleteFunc(p.Required, func(f string) bool { return f == "id" || f == "agent" || f == "kind" })
			}
			walk(p)
		}
		walk(s.Items)
	}
	walk(s)
	return s
}

// addTool adds tool t with handler h, its input schema that of In and its
// output schema that of Out, and keeps the input schema for
// checkArguments. A handler that returns no Out (an argument it refused
// itself) gives a result with no structured content, rather than a null
// the output schema would refuse.
func addTool[In, Out any](s *Server, t *sdk.Tool, h func(context.Context, *sdk.CallToolRequest, In) (*sdk.CallToolResult, *Out, error)) {
	in := schemaFor[In]()
	t.InputSchema, t.OutputSchema = in, plainSchema[Out]()
	_, result := any(new(Out)).(*Result)
	s.inputs[t.Name] = toolInput{schema: in, result: result}
	sdk.AddTool(s.mcp, t, func(ctx context.Context, req *sdk.CallToolRequest, args In) (*sdk.CallToolResult, any, error) {
		res, out, err := h(ctx, req, args)
		if out == nil {
			return res, nil, err
		}
		return res, out, err
	})
}

func (s *Server) addTools() {
	name := s.c.Name()
	addTool(s, &sdk.Tool{Name: "read", Title: "Read shared state",
		Description: "Read paths of the shared state, all at one revision: each path's value, version and mod_rev. " +
			"Read before you write: the versions let a write check that nobody changed what you read (expect).",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, s.read)
	addTool(s, &sdk.Tool{Name: "write", Title: "Write shared state",
		Description: "Change the shared state as agent " + name + ": one atomic request the coordinator applies all together or not at all. " +
			"ops: set, merge, append, incr, delete. Guard it with expect (the versions you read), pre and post conditions. " +
			"A rejection is a tool error whose result has ok false, the reason, the detail and what to do next; nothing was written then.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: jsonschema.Ptr(true)}}, s.write)
	addTool(s, &sdk.Tool{Name: "claim", Title: "Claim a task",
		Description: "Claim a task for agent " + name + ": sets <path>.owner to " + name + " only if nobody holds it (and the fields of set). " +
			"Of agents claiming at once exactly one wins; a lost claim says who holds the task (held_by): pick another then. " +
			"Where the board gives claims a lease (the result has txn, fence and lease_expires), it is renewed for you while this session lives, " +
			"and your writes to the task carry its fence for you; if the session ends, the lease runs out and the task goes back to the board. " +
			"Release the task when done."}, s.claim)
	addTool(s, &sdk.Tool{Name: "claim_next", Title: "Claim the next task of a lane",
		Description: "Claim for agent " + name + " the next task of a lane (a path whose members are tasks the board gives leases, e.g. tasks): " +
			"the coordinator picks the claimable one of the highest priority, then the one waiting longest, so agents asking at once get different tasks " +
			"and none races for the same. The result names the task (task); it is renewed and released as a claim is. " +
			"When nothing is claimable the result says so: wait, or do something else."}, s.claimNext)
	addTool(s, &sdk.Tool{Name: "release", Title: "Release a task",
		Description: "Release a task this agent claimed: deletes <path>.owner if it is " + name + ", and sets the fields of set in the same write " +
			"(set {\"status\": \"DONE\"} to complete it, or the status it should go back to). This ends the claim's lease."}, s.release)
	addTool(s, &sdk.Tool{Name: "begin", Title: "Begin a transaction",
		Description: "Begin a transaction for work that takes several steps: name the paths you will write (and those you depend on); " +
			"until you commit or abort, no other agent writes them, and one that tries is rejected or waits. " +
			"The lease is renewed for you while this session lives; if the session ends, it runs out and the paths are free again. " +
			"Returns the txn id for commit and abort."}, s.begin)
	addTool(s, &sdk.Tool{Name: "commit", Title: "Commit a transaction",
		Description: "Commit a transaction begun with begin: the writes with their values (only paths given to begin), atomically. " +
			"A commit rejected for a post condition or a path outside the transaction leaves it open: fix and commit again, or abort.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: jsonschema.Ptr(true)}}, s.commit)
	addTool(s, &sdk.Tool{Name: "abort", Title: "Abort a transaction",
		Description: "Abort a transaction begun with begin: nothing is written and its paths are free again."}, s.abort)
	addTool(s, &sdk.Tool{Name: "history", Title: "History of the shared state",
		Description: "The coordinator's log, oldest first: who changed a path and when (path), what happened to this agent's own requests (mine), " +
			"or to one transaction (txn). Every intent, decision, change, grant, renewal and expiry is there.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, s.history)
}

func (s *Server) read(ctx context.Context, _ *sdk.CallToolRequest, in ReadInput) (*sdk.CallToolResult, *ReadOutput, error) {
	for i, p := range in.Paths {
		if err := intents.CheckPath(p); err != nil {
			return errorResult(fmt.Sprintf("paths[%d] = %q: %v", i, p, err)), nil, nil
		}
	}
	st, err := s.c.Read(ctx, in.Paths...)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", strings.Join(in.Paths, ", "), err)
	}
	out := &ReadOutput{Rev: st.Rev, Values: map[string]ReadValue{}}
	var lines []string
	for _, p := range in.Paths {
		v := st.Values[p]
		rv := ReadValue{Exists: v.Exists, Version: v.Version, ModRev: v.ModRev, Redacted: v.Redacted}
		if v.Exists && len(v.Value) > 0 {
			if err := json.Unmarshal(v.Value, &rv.Value); err != nil {
				return nil, nil, fmt.Errorf("read %s: value: %w", p, err)
			}
		}
		out.Values[p] = rv
		if kept(p, v.Redacted) {
			lines = append(lines, p+" is kept from this agent by the board rules (redacted)")
		} else if v.Exists {
			lines = append(lines, fmt.Sprintf("%s = %s (version %d)", p, intents.Clip(string(v.Value), 200), v.Version))
		} else {
			lines = append(lines, p+" does not exist (version 0)")
		}
	}
	return toolResult(fmt.Sprintf("at rev %d: %s", st.Rev, strings.Join(lines, "; ")), out), out, nil
}

func (s *Server) write(ctx context.Context, req *sdk.CallToolRequest, in WriteInput) (*sdk.CallToolResult, *Result, error) {
	b := intents.Apply(in.Action)
	for _, e := range in.Expect {
		b.ReadAt(e.Path, e.Version)
	}
	if r := addWrites(b, "writes", in.Writes, true); r != nil {
		return toolResult(r.summary("write"), r), r, nil
	}
	b.Pre(in.Pre...).Post(in.Post...)
	if r := policy(b, in.OnConflict, in.WaitMS); r != nil {
		return toolResult(r.summary("write"), r), r, nil
	}
	// A write to a task this session claimed under a lease carries the
	// claim's fence, which the coordinator asks of its owner.
	st := s.sessionOf(req.Session)
	built, err := b.Build()
	if err != nil {
		r := invalid(err.Error())
		return toolResult(r.summary("write"), r), r, nil
	}
	if cl := st.claimOf(built.Writes); cl != nil {
		d, err := cl.Apply(ctx, b)
		if cl.Err() != nil {
			st.forgetClaim(cl)
		}
		return s.decided("write", d, err)
	}
	d, err := s.c.Apply(ctx, b)
	return s.decided("write", d, err)
}

// decided is the tool result of an intent that got decision d, or failed
// with err.
func (s *Server) decided(what string, d any, err error) (*sdk.CallToolResult, *Result, error) {
	var r *Result
	if err != nil {
		if r = fromError(err); r == nil {
			return nil, nil, fmt.Errorf("%s: %w", what, err)
		}
	} else if dec, ok := d.(*intents.Decision); ok && dec != nil {
		r = fromDecision(dec)
	}
	if r == nil {
		return nil, nil, fmt.Errorf("%s: no decision", what)
	}
	return toolResult(r.summary(what), r), r, nil
}

// errorResult is a tool error for a bad argument caught before anything
// was sent.
func errorResult(detail string) *sdk.CallToolResult {
	r := invalid(detail)
	res := toolResult(r.summary("request"), r)
	res.IsError = true
	return res
}

// addWrites adds ws to b; withValues says the values are given (write,
// commit) rather than only the ops (begin). A bad op or value is the
// Result naming it.
func addWrites(b *intents.Builder, field string, ws []WriteOp, withValues bool) *Result {
	if len(ws) == 0 {
		return invalid(field + " is empty: give at least one {path, op, value}")
	}
	for i, w := range ws {
		op := intents.Op(w.Op)
		if op == "" {
			op = intents.OpSet
		}
		where := fmt.Sprintf("%s[%d]", field, i)
		if !withValues {
			if w.Value != nil {
				return invalid(where + ".value: begin takes no values; give them to commit")
			}
			b.Write(w.Path, op)
			continue
		}
		switch op {
		case intents.OpSet:
			if w.Value == nil {
				return invalid(where + ".value is missing: set needs a value (to remove a path use op delete)")
			}
			b.Set(w.Path, w.Value)
		case intents.OpMerge:
			b.Merge(w.Path, w.Value)
		case intents.OpAppend:
			b.Append(w.Path, w.Value)
		case intents.OpIncr:
			n := 1.0
			if w.Value != nil {
				f, ok := w.Value.(float64)
				if !ok {
					return invalid(fmt.Sprintf("%s.value = %v: incr adds a number", where, w.Value))
				}
				n = f
			}
			b.Incr(w.Path, n)
		case intents.OpDelete:
			if w.Value != nil {
				return invalid(where + ".value: delete takes no value")
			}
			b.Delete(w.Path)
		default:
			return invalid(fmt.Sprintf("%s.op = %q: want set, merge, append, incr or delete", where, w.Op))
		}
	}
	return nil
}

// policy sets b's on_conflict and wait; a bad value is the Result naming
// it.
func policy(b *intents.Builder, onConflict string, waitMS int64) *Result {
	switch p := intents.OnConflict(onConflict); p {
	case "":
	case intents.OnConflictReject, intents.OnConflictWait, intents.OnConflictEscalate:
		b.OnConflict(p)
	default:
		return invalid(fmt.Sprintf("on_conflict = %q: want reject, wait or escalate", onConflict))
	}
	if waitMS < 0 {
		return invalid(fmt.Sprintf("wait_ms = %d: want a positive number of milliseconds", waitMS))
	}
	if waitMS > 0 {
		b.Wait(time.Duration(waitMS) * time.Millisecond)
	}
	return nil
}

func (s *Server) claim(ctx context.Context, req *sdk.CallToolRequest, in ClaimInput) (*sdk.CallToolResult, *Result, error) {
	if err := intents.CheckPath(in.Path); err != nil {
		return errorResult(fmt.Sprintf("path = %q: %v", in.Path, err)), nil, nil
	}
	what := "claim " + in.Path
	st := s.sessionOf(req.Session)
	if cl := st.claim(in.Path); cl != nil && cl.Err() == nil {
		r := claimResult(cl)
		return toolResult(fmt.Sprintf("%s: yours already, claimed in this session%s", what, leaseNote(cl)), r), r, nil
	}
	cl, err := s.c.Claim(ctx, in.Path, in.Set)
	var taken *agents.TakenError
	switch {
	case errors.As(err, &taken):
		owner := in.Path + ".owner"
		holder, rev := s.holder(ctx, owner)
		r := fromDecision(taken.Rejected.Decision)
		r.HeldBy = holder
		if holder == s.c.Name() {
			// Claimed before, outside this session (or by it before a
			// restart): the agent's still.
			r = &Result{OK: true, Outcome: string(intents.OutcomeApplied), HeldBy: holder, Intent: taken.Rejected.Decision.Intent}
			return toolResult(fmt.Sprintf("%s: yours already (claimed at rev %d, not in this session: its lease, if any, is not renewed here)", what, rev), r), r, nil
		}
		r.Next = fmt.Sprintf("%s is held by %s (claimed at rev %d): leave it and claim another task.", in.Path, holder, rev)
		return toolResult(fmt.Sprintf("%s: lost, held by %s (claimed at rev %d). %s", what, holder, rev, r.Next), r), r, nil
	case err != nil:
		return s.decided(what, nil, err)
	}
	if !st.addClaim(cl) {
		return nil, nil, fmt.Errorf("%s: the session ended; the claim's lease will run out", what)
	}
	r := claimResult(cl)
	return toolResult(fmt.Sprintf("%s: yours (%s.owner at rev %d)%s", what, in.Path, r.Rev, leaseNote(cl)), r), r, nil
}

func (s *Server) claimNext(ctx context.Context, req *sdk.CallToolRequest, in ClaimNextInput) (*sdk.CallToolResult, *Result, error) {
	if err := intents.CheckPath(in.Lane); err != nil {
		return errorResult(fmt.Sprintf("lane = %q: %v", in.Lane, err)), nil, nil
	}
	what := "claim the next task of " + in.Lane
	cl, err := s.c.ClaimNext(ctx, in.Lane, in.Set)
	switch {
	case errors.Is(err, agents.ErrNothingClaimable):
		r := &Result{Outcome: "none", Next: "no task of " + in.Lane + " is claimable now: wait and ask again, or do something else."}
		return toolResult(fmt.Sprintf("%s: nothing claimable. %s", what, r.Next), r), r, nil
	case err != nil:
		return s.decided(what, nil, err)
	}
	if !s.sessionOf(req.Session).addClaim(cl) {
		return nil, nil, fmt.Errorf("%s: the session ended; the claim's lease will run out", what)
	}
	r := claimResult(cl)
	r.Task = cl.Task()
	return toolResult(fmt.Sprintf("%s: yours, %s (%s.owner at rev %d)%s", what, cl.Task(), cl.Task(), r.Rev, leaseNote(cl)), r), r, nil
}

// claimResult is the Result of the session's claim cl.
func claimResult(cl *agents.Claim) *Result {
	r := fromDecision(cl.Decision())
	r.HeldBy = cl.Decision().Agent
	if cl.Fence() != 0 {
		expires := cl.LeaseExpires()
		r.Txn, r.Fence, r.LeaseExpires = cl.ID(), cl.Fence(), &expires
	}
	return r
}

// leaseNote says, after a claim's summary, what its lease means for the
// model; nothing without a lease.
func leaseNote(cl *agents.Claim) string {
	if cl.Fence() == 0 {
		return ""
	}
	return fmt.Sprintf("; lease %s (fence %d) renewed while this session lives: write the task with write (the fence is added for you) and release it when done",
		cl.ID(), cl.Fence())
}

// holder is who holds a task now (the value of its owner path) and the
// revision they took it at; "" when nobody does or it cannot be read.
func (s *Server) holder(ctx context.Context, owner string) (string, uint64) {
	st, err := s.c.Read(ctx, owner)
	if err != nil {
		s.log.Warn("reading who holds a task failed", "path", owner, "err", err)
		return "", 0
	}
	var who string
	v := st.Values[owner]
	if err := v.Decode(&who); err != nil {
		return intents.Clip(string(v.Value), 100), v.ModRev
	}
	return who, v.ModRev
}

func (s *Server) release(ctx context.Context, req *sdk.CallToolRequest, in ClaimInput) (*sdk.CallToolResult, *Result, error) {
	if err := intents.CheckPath(in.Path); err != nil {
		return errorResult(fmt.Sprintf("path = %q: %v", in.Path, err)), nil, nil
	}
	what := "release " + in.Path
	st := s.sessionOf(req.Session)
	if cl := st.claim(in.Path); cl != nil {
		// The session's claim: its release carries the fence and ends
		// the lease.
		d, err := cl.Release(ctx, in.Set)
		if cl.Err() != nil {
			st.forgetClaim(cl)
		}
		res, r, err := s.decided(what, d, err)
		if r == nil {
			return res, r, err
		}
		if cl.Fence() != 0 {
			r.Txn, r.Fence = cl.ID(), cl.Fence()
		}
		if !r.OK && cl.Err() != nil && !errors.Is(cl.Err(), agents.ErrClaimEnded) {
			r.Next = in.Path + " is no longer yours: its lease ended and it was reclaimed (or it was taken over), so nothing was written. " +
				"Read it again, and claim it anew if it is still to do."
			return toolResult(fmt.Sprintf("%s: not yours any more. %s", what, r.Next), r), r, nil
		}
		return res, r, err
	}
	owner := in.Path + ".owner"
	b := intents.Apply("release").Delete(owner).Pre(intents.StateRef(owner) + " == agent")
	for _, k := range slices.Sorted(maps.Keys(in.Set)) {
		if k == "owner" || strings.HasPrefix(k, "owner.") {
			return errorResult(fmt.Sprintf("set[%q]: release itself removes the owner", k)), nil, nil
		}
		b.Set(in.Path+"."+k, in.Set[k])
	}
	d, err := s.c.Apply(ctx, b)
	_, r, err := s.decided(what, d, err)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case !r.OK && r.Reason == string(intents.ReasonPreconditionFailed):
		holder, _ := s.holder(ctx, owner)
		r.HeldBy = holder
		if holder == "" {
			r.Next = in.Path + " is not held by anyone: there is nothing to release."
		} else {
			r.Next = fmt.Sprintf("%s is held by %s, not by %s: only its holder releases it.", in.Path, holder, s.c.Name())
		}
		return toolResult(fmt.Sprintf("%s: not yours. %s", what, r.Next), r), r, nil
	case !r.OK && r.Reason == string(intents.ReasonFenced):
		r.Next = fmt.Sprintf("%s is claimed by %s under a lease this session does not hold (it was claimed in another session): "+
			"release it there, or let its lease run out.", in.Path, s.c.Name())
		return toolResult(fmt.Sprintf("%s: rejected (fenced). %s", what, r.Next), r), r, nil
	}
	return toolResult(r.summary(what), r), r, nil
}

func (s *Server) begin(ctx context.Context, req *sdk.CallToolRequest, in BeginInput) (*sdk.CallToolResult, *Result, error) {
	b := intents.Propose(in.Action)
	for _, e := range in.Reads {
		b.ReadAt(e.Path, e.Version)
	}
	if r := addWrites(b, "writes", in.Writes, false); r != nil {
		return toolResult(r.summary("begin"), r), r, nil
	}
	lease := s.opts.Lease
	if in.LeaseMS != 0 {
		lease = time.Duration(in.LeaseMS) * time.Millisecond
		if lease < minLease {
			r := invalid(fmt.Sprintf("lease_ms = %d: want at least %d", in.LeaseMS, minLease.Milliseconds()))
			return toolResult(r.summary("begin"), r), r, nil
		}
	}
	b.Pre(in.Pre...).Lease(lease)
	if r := policy(b, in.OnConflict, in.WaitMS); r != nil {
		return toolResult(r.summary("begin"), r), r, nil
	}
	t, err := s.c.Propose(ctx, b)
	if err != nil {
		return s.decided("begin", nil, err)
	}
	r := fromDecision(t.Grant())
	if !s.sessionOf(req.Session).add(t) {
		return nil, nil, errors.New("begin: the session ended; the transaction's lease will run out")
	}
	return toolResult(fmt.Sprintf("begin: granted txn %s (lease renewed while this session lives; commit or abort it)", t.ID()), r), r, nil
}

// noTxn is the Result for a txn id this session has no open transaction
// under.
func noTxn(id string) *Result {
	r := invalid(fmt.Sprintf("txn = %q: this session has no open transaction with that id (begin returns it; commit, abort or an expired lease end it)", id))
	r.Txn = id
	return r
}

func (s *Server) commit(ctx context.Context, req *sdk.CallToolRequest, in CommitInput) (*sdk.CallToolResult, *Result, error) {
	st := s.sessionOf(req.Session)
	t := st.txn(in.Txn)
	if t == nil {
		r := noTxn(in.Txn)
		return toolResult(r.summary("commit"), r), r, nil
	}
	b := intents.Apply(in.Action)
	if r := addWrites(b, "writes", in.Writes, true); r != nil {
		return toolResult(r.summary("commit"), r), r, nil
	}
	b.Post(in.Post...)
	d, err := t.Commit(ctx, b)
	if t.Err() != nil {
		st.forget(t.ID())
	}
	res, r, err := s.decided("commit "+t.ID(), d, err)
	if r != nil && r.Txn == "" {
		r.Txn = t.ID()
	}
	return res, r, err
}

func (s *Server) abort(ctx context.Context, req *sdk.CallToolRequest, in AbortInput) (*sdk.CallToolResult, *Result, error) {
	st := s.sessionOf(req.Session)
	t := st.txn(in.Txn)
	if t == nil {
		r := noTxn(in.Txn)
		return toolResult(r.summary("abort"), r), r, nil
	}
	err := t.Abort(ctx)
	if t.Err() != nil {
		st.forget(t.ID())
	}
	if err != nil {
		res, r, err := s.decided("abort "+t.ID(), nil, err)
		if r != nil && r.Txn == "" {
			r.Txn = t.ID()
		}
		return res, r, err
	}
	r := &Result{OK: true, Outcome: string(intents.OutcomeAborted), Txn: t.ID()}
	return toolResult("abort "+t.ID()+": aborted, nothing written", r), r, nil
}

func (s *Server) history(ctx context.Context, _ *sdk.CallToolRequest, in HistoryInput) (*sdk.CallToolResult, *HistoryOutput, error) {
	q := map[string]any{}
	if in.Path != "" {
		if err := intents.CheckPath(in.Path); err != nil {
			return errorResult(fmt.Sprintf("path = %q: %v", in.Path, err)), nil, nil
		}
		q["path"] = in.Path
	}
	if in.Mine {
		q["agent"] = s.c.Name()
	}
	if in.Txn != "" {
		q["txn"] = in.Txn
	}
	if in.Type != "" {
		q["type"] = in.Type
	}
	if in.From > 0 {
		q["from"] = in.From
	}
	limit := in.Limit
	if limit <= 0 {
		limit = 50
	}
	q["limit"] = min(limit, 500)
	var page struct {
		Events []*intents.Event `json:"events"`
		Next   uint64           `json:"next"`
	}
	if err := s.api(ctx, intents.APILogQuery, q, &page); err != nil {
		if r := apiResult(err); r != nil {
			res := toolResult(r.summary("history"), r)
			res.IsError = true
			return res, nil, nil
		}
		return nil, nil, fmt.Errorf("history: %w", err)
	}
	out := &HistoryOutput{Events: []HistoryEvent{}, Next: page.Next}
	var lines []string
	for _, ev := range page.Events {
		if ev = visible(ev); ev == nil {
			continue
		}
		h := HistoryEvent{Seq: ev.Seq, Time: ev.Time, Type: string(ev.Type), Agent: ev.Agent, Intent: ev.Intent, Txn: ev.Txn, What: describe(ev)}
		out.Events = append(out.Events, h)
		lines = append(lines, fmt.Sprintf("%d %s %s: %s", h.Seq, h.Type, h.Agent, h.What))
	}
	summary := fmt.Sprintf("%d events", len(out.Events))
	if len(lines) > 0 {
		summary += ":\n" + strings.Join(lines, "\n")
	}
	return toolResult(summary, out), out, nil
}

// visible is ev without the writes of paths the board rules keep whole
// from this agent (named in its change's Redacted), or nil when nothing
// is left: log.query takes out such a write's value but keeps its path,
// writer, revision and version, which state.get does not show.
func visible(ev *intents.Event) *intents.Event {
	if ev.Change == nil || len(ev.Change.Redacted) == 0 {
		return ev
	}
	var writes []intents.Applied
	for _, a := range ev.Change.Writes {
		if !kept(a.Path, ev.Change.Redacted) {
			writes = append(writes, a)
		}
	}
	if len(writes) == 0 {
		return nil
	}
	cp, ch := *ev, *ev.Change
	ch.Writes = writes
	cp.Change = &ch
	return &cp
}

// describe says in one line what event ev records.
func describe(ev *intents.Event) string {
	switch {
	case ev.Received != nil && ev.Received.Intent != nil:
		in := ev.Received.Intent
		s := string(in.Kind)
		if in.Action != "" {
			s += " " + in.Action
		}
		var paths []string
		for _, w := range in.Writes {
			paths = append(paths, string(w.Op)+" "+w.Path)
		}
		if len(paths) > 0 {
			s += ": " + strings.Join(paths, ", ")
		}
		return s
	case ev.Received != nil:
		return "an intent that does not decode: " + ev.Received.Error
	case ev.Decision != nil:
		d := ev.Decision
		s := string(d.Outcome)
		if d.Reason != "" {
			s += " (" + string(d.Reason) + ")"
		}
		if d.Rev > 0 {
			s += fmt.Sprintf(" at rev %d", d.Rev)
		}
		if d.Detail != "" {
			s += ": " + d.Detail
		}
		return s
	case ev.Change != nil:
		var ws []string
		for _, a := range ev.Change.Writes {
			w := string(a.Op) + " " + a.Path
			if len(a.Value) > 0 {
				w += " = " + intents.Clip(string(a.Value), 120)
			}
			ws = append(ws, fmt.Sprintf("%s (v%d)", w, a.NewVersion))
		}
		return strings.Join(ws, "; ")
	case ev.Grant != nil && ev.Type == intents.EventRenew:
		return fmt.Sprintf("lease of %s renewed until %s", ev.Grant.Txn, ev.Grant.Expires.Format(time.RFC3339Nano))
	case ev.Grant != nil:
		return fmt.Sprintf("transaction %s granted to %s (fence %d, lease %d ms)", ev.Grant.Txn, ev.Grant.Agent, ev.Grant.Fence, ev.Grant.LeaseMS)
	case ev.Release != nil:
		return fmt.Sprintf("transaction %s of %s ended: %s", ev.Release.Txn, ev.Release.Agent, ev.Release.Cause)
	case ev.Wait != nil:
		return fmt.Sprintf("waits until %s on %d conflicts", ev.Wait.Deadline.Format(time.RFC3339), len(ev.Wait.Conflicts))
	case ev.Notice != nil:
		return string(ev.Notice.Kind) + ": " + ev.Notice.Detail
	case ev.Resolution != nil:
		return fmt.Sprintf("case %s settled by %s: %s", ev.Resolution.Escalation, ev.Resolution.Arbiter, ev.Resolution.Rationale)
	case ev.Rules != nil:
		return "board rules " + intents.Clip(ev.Rules.Hash, 12) + " in force"
	}
	return string(ev.Type)
}
