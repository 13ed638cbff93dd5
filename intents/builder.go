package intents

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Placeholders that let Build reuse Validate for everything but the two
// fields the SDK fills in when it sends.
const (
	builderID    = "00000000000000000000000000"
	builderAgent = "builder"
)

// Builder builds an intent step by step, so that Go code reads like the
// intent it sends:
//
//	in, err := intents.Apply("write_intro").
//		Read("outline").
//		Set("report.intro", text).
//		Post("state.report.intro != nil").
//		Build()
//
// Methods never fail, so a chain stays one expression: a problem is
// recorded and Build reports the first one. Values are marshalled to JSON
// when they are given, so changing a map or struct afterwards does not
// change the intent. A Builder can be reused as a template: each Build
// returns an intent that shares no memory with it, and later calls only
// affect later builds. A Builder is not safe for concurrent use.
type Builder struct {
	in   Intent                     // all fields but Meta; its slices are the builder's own
	meta map[string]json.RawMessage // marshalled when given; encoded (with sorted keys) by Build
	err  *ValidationError           // the first value that could not be used
}

// Apply starts a one-shot atomic intent labelled action.
func Apply(action string) *Builder {
	return &Builder{in: Intent{Kind: KindApply, Action: action}}
}

// Propose starts an intent that opens a transaction labelled action. Its
// writes need no values (see Write); the commit carries them.
func Propose(action string) *Builder {
	return &Builder{in: Intent{Kind: KindPropose, Action: action}}
}

// Read declares that the decision depends on path, so a conflicting write
// in flight is detected.
func (b *Builder) Read(path string) *Builder {
	b.in.Reads = append(b.in.Reads, Read{Path: path})
	return b
}

// ReadAt declares that the intent was computed from path at version; a
// newer version makes it a stale read instead of silently overwriting.
func (b *Builder) ReadAt(path string, version uint64) *Builder {
	b.in.Reads = append(b.in.Reads, Read{Path: path, Version: &version})
	return b
}

// Set writes v, marshalled with encoding/json, at path. A nil v writes a
// JSON null.
func (b *Builder) Set(path string, v any) *Builder { return b.write(path, OpSet, v) }

// Delete removes path and everything under it.
func (b *Builder) Delete(path string) *Builder {
	b.in.Writes = append(b.in.Writes, Write{Path: path, Op: OpDelete})
	return b
}

// Merge writes each key of v as a child of path, leaving other children
// alone. v must marshal to a JSON object (a map or a struct); anything
// else, including a nil map, makes Build fail.
func (b *Builder) Merge(path string, v any) *Builder { return b.write(path, OpMerge, v) }

// Append adds v as one element of the array at path. Concurrent appends
// commute, so they never conflict.
func (b *Builder) Append(path string, v any) *Builder { return b.write(path, OpAppend, v) }

// Incr adds n to the number at path. Concurrent increments commute, so
// they never conflict. A NaN or infinite n makes Build fail.
func (b *Builder) Incr(path string, n float64) *Builder { return b.write(path, OpIncr, n) }

// Write declares a write without a value: what a propose lists, since its
// commit carries the values. In an apply only delete and incr (which then
// adds 1) may go without one; Build reports the others.
func (b *Builder) Write(path string, op Op) *Builder {
	b.in.Writes = append(b.in.Writes, Write{Path: path, Op: op})
	return b
}

// write marshals v now, so that the error names the write that caused it
// and later changes to v do not leak into the intent.
func (b *Builder) write(path string, op Op, v any) *Builder {
	field := fmt.Sprintf("writes[%d].value", len(b.in.Writes))
	raw, err := marshal(v)
	switch {
	case err != nil:
		b.fail(invalid(field, "", "cannot be marshalled to JSON: %v", err))
		raw = nil
	case op == OpMerge && firstByte(raw) != '{':
		b.fail(invalid(field, quote(string(raw)), "merge needs a JSON object"))
	}
	// The write is kept even when its value failed, so the indexes of later
	// writes in error messages match the calls that made them.
	b.in.Writes = append(b.in.Writes, Write{Path: path, Op: op, Value: raw})
	return b
}

// Pre adds conditions that must all hold on the state before the writes;
// they are how an agent says "only if nobody got there first".
func (b *Builder) Pre(exprs ...string) *Builder {
	b.in.Pre = append(b.in.Pre, exprs...)
	return b
}

// Post adds conditions that must all hold on the state after the writes;
// if one fails nothing is written.
func (b *Builder) Post(exprs ...string) *Builder {
	b.in.Post = append(b.in.Post, exprs...)
	return b
}

// Priority sets the priority arbiters weigh when intents conflict; the
// default is 0.
func (b *Builder) Priority(p int64) *Builder {
	b.in.Priority = p
	return b
}

// Lease sets how long a propose's grant lives without a renew, rounded up
// to whole milliseconds so a short lease never becomes none. Zero leaves
// the coordinator's default; a negative d makes Build fail, as does a
// lease on an apply.
func (b *Builder) Lease(d time.Duration) *Builder {
	if ms, err := millis("lease_ms", d); err != nil {
		b.fail(err)
	} else {
		b.in.LeaseMS = ms
	}
	return b
}

// Fence sets the fencing token an apply carries when it writes a task
// this agent claimed under a board rule with a lease: the fence of the
// claim's decision. The coordinator refuses a write to the claimed task
// without it (fenced), and one with a fence no live claim of the agent
// has, so an owner whose lease ended cannot write over the next owner.
// agents.Claim's Apply and Release set it; zero (the default) carries
// none.
func (b *Builder) Fence(f uint64) *Builder {
	b.in.Fence = f
	return b
}

// OnConflict sets what the coordinator does when the intent conflicts
// with a transaction in flight; the default is OnConflictReject. Wait and
// Escalate are shorthands.
func (b *Builder) OnConflict(p OnConflict) *Builder {
	b.in.OnConflict = p
	return b
}

// Wait makes a conflicting intent wait up to d (rounded up to whole
// milliseconds) for the transaction in its way, instead of being rejected.
// Zero means the default bound, DefaultWaitMS, because the wire cannot
// express a zero wait; a negative d makes Build fail.
func (b *Builder) Wait(d time.Duration) *Builder {
	b.in.OnConflict = OnConflictWait
	if ms, err := millis("wait_ms", d); err != nil {
		b.fail(err)
	} else {
		b.in.WaitMS = ms
	}
	return b
}

// Escalate hands a conflicting intent to an arbiter instead of rejecting it.
func (b *Builder) Escalate() *Builder {
	b.in.OnConflict = OnConflictEscalate
	return b
}

// Meta records v, marshalled with encoding/json, under key in the meta
// object: context for people and audit (a trace id, a reason) that the
// coordinator never interprets. Setting a key again replaces it.
func (b *Builder) Meta(key string, v any) *Builder {
	raw, err := marshal(v)
	if err != nil {
		b.fail(invalid("meta."+key, "", "cannot be marshalled to JSON: %v", err))
		return b
	}
	if b.meta == nil {
		b.meta = make(map[string]json.RawMessage)
	}
	b.meta[key] = raw
	return b
}

// Build returns the intent with ID and Agent empty, for the SDK fills
// them when it sends. It checks everything else as Decode would, so a
// mistake shows up here and not as an `invalid` decision later. Every
// error is a *ValidationError naming the field; problems recorded while
// building (values that cannot be marshalled, a merge value that is not an
// object, negative durations) are reported first, in call order, then the
// first problem Intent.Validate finds. Build does not change the builder.
func (b *Builder) Build() (*Intent, error) {
	if b.err != nil {
		return nil, b.err
	}
	in := b.in
	in.ID, in.Agent = "", ""
	in.Reads = slices.Clone(b.in.Reads)
	for i, r := range in.Reads {
		if r.Version != nil {
			v := *r.Version
			in.Reads[i].Version = &v
		}
	}
	in.Writes = slices.Clone(b.in.Writes)
	for i, w := range in.Writes {
		in.Writes[i].Value = slices.Clone(w.Value)
	}
	in.Pre = slices.Clone(b.in.Pre)
	in.Post = slices.Clone(b.in.Post)
	if len(b.meta) > 0 {
		// Every entry is already valid JSON, so this cannot fail; a map
		// encodes with sorted keys, so equal builders give equal bytes.
		meta, err := json.Marshal(b.meta)
		if err != nil {
			return nil, invalid("meta", "", "cannot be marshalled to JSON: %v", err)
		}
		in.Meta = meta
	}
	check := in
	check.ID, check.Agent = builderID, builderAgent
	if err := check.Validate(); err != nil {
		return nil, err
	}
	return &in, nil
}

func (b *Builder) fail(err *ValidationError) {
	if b.err == nil {
		b.err = err
	}
}

// marshal is json.Marshal that turns a panicking MarshalJSON into an
// error: a bug in the caller's type should fail Build, not crash an agent.
func marshal(v any) (raw json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			raw, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	return json.Marshal(v)
}

// millis converts d to whole milliseconds, rounding up so that a positive
// duration never becomes zero, which the wire reads as "the default".
func millis(field string, d time.Duration) (int64, *ValidationError) {
	if d < 0 {
		return 0, invalid(field, d.String(), "negative duration")
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms, nil
}

// StateRef is the condition expression that reads path from the state:
// state.a.b, with state["a-1"] for a segment that is not an identifier
// (a-1, 7), as a precondition on a path names it.
func StateRef(path string) string {
	var b strings.Builder
	b.WriteString("state")
	for _, seg := range strings.Split(path, ".") {
		if isIdent(seg) {
			b.WriteString("." + seg)
		} else {
			b.WriteString("[" + strconv.Quote(seg) + "]")
		}
	}
	return b.String()
}

// isIdent reports whether seg can follow a dot in an expression.
func isIdent(seg string) bool {
	for i, r := range seg {
		if r != '_' && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return seg != ""
}
