package rules

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/intents"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// File is the rules file as written (JSON; schemas/rules.json).
type File struct {
	// Agents gives agents their roles.
	Agents map[string]Agent `json:"agents,omitempty"`
	// Rules apply per path pattern, in order.
	Rules []Rule `json:"rules,omitempty"`
	// Invariants must hold after every commit that touches their paths.
	Invariants []Invariant `json:"invariants,omitempty"`
	// Quotas per agent name, or per role as "role:NAME".
	Quotas map[string]Quota `json:"quotas,omitempty"`
	// Limits tighten the built-in bounds on what one intent may carry.
	Limits *Limits `json:"limits,omitempty"`
}

// Limits bound what one intent may carry, below the built-in maxima; 0
// keeps the built-in bound.
type Limits struct {
	IntentBytes int `json:"intent_bytes,omitempty"` // the intent's JSON (built in: 1 MiB)
	Writes      int `json:"writes,omitempty"`       // writes per intent (built in: 1024)
	Reads       int `json:"reads,omitempty"`        // declared reads per intent (built in: 1024)
	ExprLen     int `json:"expr_len,omitempty"`     // bytes of one condition (built in: 4096)
	ExprNodes   int `json:"expr_nodes,omitempty"`   // syntax nodes of one condition (built in: 1000)
	PathDepth   int `json:"path_depth,omitempty"`   // segments of a path the intent names (built in: 32)
}

// Agent is what the rules know of one agent.
type Agent struct {
	Roles []string `json:"roles,omitempty"`
}

// Rule governs the paths its pattern matches: `*` is one segment, a final
// `**` any number of segments (none included).
type Rule struct {
	Pattern string `json:"pattern"`
	// Mode is intents.ModeEnforce (or empty: the rule decides),
	// intents.ModeWarn or intents.ModeAudit: the rule is evaluated in the
	// shadow (Shadow) and decides nothing.
	Mode string `json:"mode,omitempty"`
	// Writers and Readers are agent names and "role:NAME"s; when set,
	// nobody else may write (read) a path the pattern covers, or above one.
	Writers []string `json:"writers,omitempty"`
	Readers []string `json:"readers,omitempty"`
	// Transitions is a state machine over string values: from a state, the
	// states it may go to. Initial lists the states a new value may take;
	// when empty, any state of the machine.
	Transitions map[string][]string `json:"transitions,omitempty"`
	Initial     []string            `json:"initial,omitempty"`
	// Schema is a JSON Schema (2020-12) every written value must satisfy.
	Schema json.RawMessage `json:"schema,omitempty"`
	// OnConflict is the policy of an intent that names none and writes
	// here.
	OnConflict intents.OnConflict `json:"on_conflict,omitempty"`
	// Preempt are agents and "role:NAME"s whose intents, on conflict with
	// transactions in flight on a path the pattern covers, preempt those
	// transactions (aborted, their fences dead) instead of being refused.
	Preempt []string `json:"preempt,omitempty"`
	// Kind makes every matched path a record of that kind (fact,
	// hypothesis, task, artifact, decision; see records.go) with its shape
	// and update rules. For a task, Transitions govern its status.
	Kind string `json:"kind,omitempty"`
	// Waiters orders the intents waiting on a transaction that writes a
	// path the pattern covers, once it ends: "priority" (the default) the
	// highest intent priority first and arrival order among equals,
	// "fifo" arrival order alone.
	Waiters string `json:"waiters,omitempty"`
	// Lease, on a task rule, makes claiming a task take a lease of that
	// long (a Go duration, "30s"): the claim carries a fencing token, its
	// owner renews it, and when it ends unrenewed the task is reclaimed —
	// its owner removed and its status set to ReclaimTo, when given.
	Lease     string `json:"lease,omitempty"`
	ReclaimTo string `json:"reclaim_to,omitempty"`
	// MaxRetries, on a task rule with a lease and a reclaim_to, bounds the
	// tries of a task: each claim that ends with the task back in the pool
	// (its lease ran out, or its owner gave it back with the status
	// ReclaimTo) counts one, in the task's field "tries"; the claim that
	// ends past MaxRetries leaves the task in DeadTo instead, and in the
	// dead letters. 0 counts nothing.
	MaxRetries int `json:"max_retries,omitempty"`
	// DeadTo is the status of a task past MaxRetries; DefaultDeadTo if
	// not given.
	DeadTo string `json:"dead_to,omitempty"`
	// WIP, on a task rule with a lease, bounds the tasks of one lane (the
	// tasks under one parent path) claimed at once: a claim past it is
	// refused, and a claim of the lane's next task that may wait waits for
	// a slot.
	WIP int `json:"wip,omitempty"`
	// Operators, on a task rule, are agents and "role:NAME"s who may
	// reassign a task to another agent or take it from its owner (cancel
	// it) whatever its owner: people and supervisors, where an agent may
	// only claim a task for itself and change its own. The writers rule
	// still applies to them.
	Operators []string `json:"operators,omitempty"`
	// Approve holds an intent that writes a path the pattern covers (or
	// above one) for approval by people or programs: it becomes an
	// approval case, and is decided from scratch once approved.
	Approve *Approve `json:"approve,omitempty"`
	// Review sends what would be refused for a logical reason, on a path
	// the pattern covers, to people instead: a review case, which applies
	// the intent with that check waived once approved.
	Review *Review `json:"review,omitempty"`
	// Arbiters asks a quorum of arbiters for a conflict an intent that
	// writes here escalates: the case is settled when Quorum of them (of
	// Of, when given) send resolutions that agree.
	Arbiters *intents.Panel `json:"arbiters,omitempty"`
}

// Review is a rule's review of refusals.
type Review struct {
	// By, Quorum and Timeout are as an Approve's.
	By      []string `json:"by"`
	Quorum  int      `json:"quorum,omitempty"`
	Timeout string   `json:"timeout,omitempty"`
	// On are the reasons reviewed: illegal_transition and
	// precondition_failed (the default, both).
	On []intents.Reason `json:"on,omitempty"`
}

// Reviewable are the reasons a rule's review may take.
var Reviewable = []intents.Reason{intents.ReasonIllegalTransition, intents.ReasonPreconditionFailed}

// Approve is a rule's approval gate.
type Approve struct {
	// By are the agents and "role:NAME"s who may approve or deny; an
	// agent never approves its own intent.
	By []string `json:"by"`
	// Quorum is how many of them must approve (default 1); one denial
	// rejects.
	Quorum int `json:"quorum,omitempty"`
	// Timeout is how long the case waits for a quorum (a Go duration;
	// default DefaultApproveTimeout).
	Timeout string `json:"timeout,omitempty"`
	// Exempt are agents and "role:NAME"s whose intents pass ungated.
	Exempt []string `json:"exempt,omitempty"`
	// Fallback is what the deadline does without a quorum:
	// intents.FallbackReject (the default) or intents.FallbackApply.
	Fallback string `json:"fallback,omitempty"`
}

// DefaultApproveTimeout is how long an approval case waits when its rule
// names no timeout; MaxApproveTimeout bounds a timeout, and MaxQuorum a
// quorum.
const (
	DefaultApproveTimeout = 30 * time.Minute
	MaxApproveTimeout     = 7 * 24 * time.Hour
	MaxQuorum             = 100
)

// Gate is the approval an intent's writes need: the gate recorded on its
// case, and how long the case waits.
type Gate struct {
	intents.Gate
	Timeout time.Duration
}

// MaxTaskLease bounds a task rule's lease: a task that takes longer is
// renewed by its owner while it works.
const MaxTaskLease = 24 * time.Hour

// TaskLease is what a task rule with a lease gives one task record.
type TaskLease struct {
	// Path is the task record's path.
	Path string
	// For is how long a claim holds unless its owner renews it.
	For time.Duration
	// ReclaimTo is the status a reclaimed task goes back to; "" leaves
	// its status as it is.
	ReclaimTo string
	// MaxRetries and DeadTo are the rule's (Rule.MaxRetries): 0 counts no
	// tries.
	MaxRetries int
	DeadTo     string
	// WIP is the rule's (Rule.WIP): 0 bounds nothing.
	WIP int
}

// MaxTaskWIP bounds a rule's wip.
const MaxTaskWIP = 1_000_000

// DefaultDeadTo is the status of a task past its rule's max_retries when
// the rule names none.
const DefaultDeadTo = "DEAD"

// MaxTaskRetries bounds a rule's max_retries.
const MaxTaskRetries = 1000

// The orders of Rule.Waiters.
const (
	WaitersPriority = "priority"
	WaitersFIFO     = "fifo"
)

// Invariant is a boolean expression over the state, in the language of
// intents' conditions.
type Invariant struct {
	Name string `json:"name"`
	Expr string `json:"expr"`
	Mode string `json:"mode,omitempty"` // as a Rule's
}

// Quota bounds one agent, or each agent of a role.
type Quota struct {
	// IntentsPerSecond and Burst make a token bucket over the intents
	// received; 0 means no rate limit.
	IntentsPerSecond float64 `json:"intents_per_second,omitempty"`
	Burst            int     `json:"burst,omitempty"`
	// MaxTxns caps the transactions in flight; 0 means the engine's limit.
	MaxTxns int `json:"max_txns,omitempty"`
}

// Set is a compiled rules file. It is immutable.
type Set struct {
	raw        []byte
	file       File
	rules      []compiled
	invariants []invariant
	// leases says a task rule has a lease: the engine asks it of every
	// change.
	leases bool
	// shadow says the file has rules or invariants in warn or audit mode,
	// which this Set leaves out (see Shadow); all says it is the Set that
	// keeps them.
	shadow, all bool
}

type compiled struct {
	Rule
	index   int
	pat     Pattern
	writers []string
	readers []string
	states  map[string]bool
	schema  *jsonschema.Schema
	lease   time.Duration
	approve time.Duration // the approval gate's timeout; 0 without one
	review  time.Duration // the review's timeout; 0 without one
}

type invariant struct {
	Invariant
	cond *cond.Condition
}

// Error is a rules file that does not compile: the field and what is
// wrong with it.
type Error struct {
	Field, Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("rules field %s: %s", e.Field, e.Reason) }

func bad(field, format string, args ...any) error {
	return &Error{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Compile checks and compiles a rules file. Conditions compile with comp,
// the engine's compiler, so invariants see the state exactly as intents'
// conditions do. An empty document (or "{}") is the empty Set: no rules.
func Compile(raw []byte, comp *cond.Compiler) (*Set, error) {
	return compileFile(raw, comp, false)
}

// CompileShadow compiles a rules file with every rule and invariant in
// force, whatever its mode: the rules as they would decide were the ones
// in warn or audit mode enforced. A shadow file (coagent rules set
// --shadow) is compiled so too.
func CompileShadow(raw []byte, comp *cond.Compiler) (*Set, error) {
	return compileFile(raw, comp, true)
}

// HasShadow says the file has rules or invariants in warn or audit mode,
// which Compile left out and CompileShadow keeps.
func (s *Set) HasShadow() bool { return s != nil && s.shadow }

// ModeOf is the mode of what ref names in the file ("rules[3]",
// "invariant wip"): ModeEnforce when it names nothing of the file or
// a rule without a mode.
func (s *Set) ModeOf(ref string) string {
	mode := ""
	var i int
	var name string
	switch {
	case s == nil:
	case fmtScan(ref, "rules[%d]", &i) && i >= 0 && i < len(s.file.Rules):
		mode = s.file.Rules[i].Mode
	case fmtScan(ref, "invariant %s", &name):
		for _, inv := range s.file.Invariants {
			if inv.Name == name {
				mode = inv.Mode
			}
		}
	}
	if mode == "" {
		return intents.ModeEnforce
	}
	return mode
}

// Ref is the first rule or invariant a decision's detail names
// ("rules[3]", "invariant wip"), "" when it names none. It is asked of
// every decision shadow rules change, so it scans rather than match a
// regular expression.
func Ref(detail string) string {
	best, at := "", len(detail)
	for from := 0; ; {
		i := strings.Index(detail[from:], "rules[")
		if i < 0 {
			break
		}
		i += from
		j := i + len("rules[")
		k := j
		for k < len(detail) && detail[k] >= '0' && detail[k] <= '9' {
			k++
		}
		if k > j && k < len(detail) && detail[k] == ']' {
			best, at = detail[i:k+1], i
			break
		}
		from = j
	}
	if i := strings.Index(detail[:at], "invariant "); i >= 0 {
		j := i + len("invariant ")
		k := j
		for k < len(detail) {
			r, size := utf8.DecodeRuneInString(detail[k:])
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '-' {
				break
			}
			k += size
		}
		if k > j {
			return detail[i:k]
		}
	}
	return best
}

func fmtScan(s, format string, args ...any) bool {
	n, err := fmt.Sscanf(s, format, args...)
	return err == nil && n == len(args)
}

// enforced says a rule or invariant of mode decides in a Set compiled
// as all says.
func enforced(mode string, all bool) bool {
	return all || mode == "" || mode == intents.ModeEnforce
}

func validMode(mode string) bool {
	return mode == "" || mode == intents.ModeEnforce || mode == intents.ModeWarn || mode == intents.ModeAudit
}

func compileFile(raw []byte, comp *cond.Compiler, all bool) (*Set, error) {
	s := &Set{raw: bytes.Clone(raw), all: all}
	if len(bytes.TrimSpace(raw)) == 0 {
		return s, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s.file); err != nil {
		return nil, bad("(document)", "%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("(document)", "something after the JSON object")
	}
	for name, a := range s.file.Agents {
		if !intents.ValidSegment(name) {
			return nil, bad("agents", "%q is not an agent name", name)
		}
		for i, r := range a.Roles {
			if !intents.ValidSegment(r) {
				return nil, bad(fmt.Sprintf("agents.%s.roles[%d]", name, i), "%q is not a role name", r)
			}
		}
	}
	for i, r := range s.file.Rules {
		c, err := compileRule(i, r)
		if err != nil {
			return nil, err
		}
		// A rule not enforced is compiled all the same, so a file is
		// refused for it whatever the modes.
		s.shadow = s.shadow || !enforced(r.Mode, false)
		if !enforced(r.Mode, all) {
			continue
		}
		s.rules = append(s.rules, c)
		s.leases = s.leases || c.lease > 0
	}
	seen := map[string]bool{}
	for i, inv := range s.file.Invariants {
		field := fmt.Sprintf("invariants[%d]", i)
		if !intents.ValidSegment(inv.Name) {
			return nil, bad(field+".name", "%q: want a name of letters, digits, '_' or '-'", inv.Name)
		}
		if seen[inv.Name] {
			return nil, bad(field+".name", "%q names another invariant too", inv.Name)
		}
		if len(inv.Expr) > intents.MaxExprLen {
			return nil, bad(field+".expr", "%d bytes: longer than %d", len(inv.Expr), intents.MaxExprLen)
		}
		seen[inv.Name] = true
		cond, err := comp.Compile("invariant "+inv.Name, inv.Expr, false)
		if err != nil {
			return nil, bad(field+".expr", "%v", err)
		}
		if len(cond.Paths) == 0 {
			return nil, bad(field+".expr", "%q reads no path of the state, so no commit would ever check it", inv.Expr)
		}
		if !validMode(inv.Mode) {
			return nil, bad(field+".mode", "%q: want enforce, warn or audit", inv.Mode)
		}
		s.shadow = s.shadow || !enforced(inv.Mode, false)
		if !enforced(inv.Mode, all) {
			continue
		}
		s.invariants = append(s.invariants, invariant{Invariant: inv, cond: cond})
	}
	if l := s.file.Limits; l != nil {
		for _, f := range []struct {
			name     string
			v, limit int
		}{{"intent_bytes", l.IntentBytes, intents.MaxIntentSize}, {"writes", l.Writes, intents.MaxWrites},
			{"reads", l.Reads, intents.MaxReads}, {"expr_len", l.ExprLen, intents.MaxExprLen},
			{"expr_nodes", l.ExprNodes, cond.DefaultMaxNodes}, {"path_depth", l.PathDepth, intents.MaxDepth}} {
			if f.v < 0 || f.v > f.limit {
				return nil, bad("limits."+f.name, "%d: want 0 (the built-in bound) to %d", f.v, f.limit)
			}
		}
	}
	for who, q := range s.file.Quotas {
		field := "quotas." + who
		if !validPrincipal(who) {
			return nil, bad(field, "want an agent name or role:NAME")
		}
		for _, f := range []struct {
			name string
			v    float64
		}{{"intents_per_second", q.IntentsPerSecond}, {"burst", float64(q.Burst)}, {"max_txns", float64(q.MaxTxns)}} {
			if f.v < 0 {
				return nil, bad(field+"."+f.name, "%g: want 0 or more", f.v)
			}
		}
		if q.IntentsPerSecond > 0 && q.Burst == 0 {
			return nil, bad(field+".burst", "a rate needs a burst of at least 1")
		}
	}
	return s, nil
}

func compileRule(i int, r Rule) (compiled, error) {
	field := fmt.Sprintf("rules[%d]", i)
	c := compiled{Rule: r, index: i}
	var err error
	if c.pat, err = ParsePattern(r.Pattern); err != nil {
		return c, bad(field+".pattern", "%v", err)
	}
	if !validMode(r.Mode) {
		return c, bad(field+".mode", "%q: want enforce, warn or audit", r.Mode)
	}
	for j, w := range r.Writers {
		if !validPrincipal(w) {
			return c, bad(fmt.Sprintf("%s.writers[%d]", field, j), "%q: want an agent name or role:NAME", w)
		}
	}
	for j, w := range r.Readers {
		if !validPrincipal(w) {
			return c, bad(fmt.Sprintf("%s.readers[%d]", field, j), "%q: want an agent name or role:NAME", w)
		}
	}
	for j, w := range r.Preempt {
		if !validPrincipal(w) {
			return c, bad(fmt.Sprintf("%s.preempt[%d]", field, j), "%q: want an agent name or role:NAME", w)
		}
	}
	for j, w := range r.Operators {
		if !validPrincipal(w) {
			return c, bad(fmt.Sprintf("%s.operators[%d]", field, j), "%q: want an agent name or role:NAME", w)
		}
	}
	if len(r.Operators) > 0 && r.Kind != KindTask {
		return c, bad(field+".operators", "only a task rule (kind task) has operators")
	}
	c.writers, c.readers = r.Writers, r.Readers
	if len(r.Transitions) > 0 {
		c.states = map[string]bool{}
		for from, tos := range r.Transitions {
			c.states[from] = true
			for _, to := range tos {
				c.states[to] = true
			}
		}
		for j, s := range r.Initial {
			if !c.states[s] {
				return c, bad(fmt.Sprintf("%s.initial[%d]", field, j), "%q is not a state of the machine", s)
			}
		}
	} else if len(r.Initial) > 0 {
		return c, bad(field+".initial", "initial states without transitions")
	}
	if len(r.Schema) > 0 {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.Schema))
		if err != nil {
			return c, bad(field+".schema", "%v", err)
		}
		comp := jsonschema.NewCompiler()
		// No loader: a rules file must not make the engine read files or
		// the network through a $ref.
		comp.UseLoader(jsonschema.SchemeURLLoader{})
		comp.DefaultDraft(jsonschema.Draft2020)
		url := fmt.Sprintf("urn:coagent:rules:%d", i)
		if err := comp.AddResource(url, doc); err != nil {
			return c, bad(field+".schema", "%v", err)
		}
		if c.schema, err = comp.Compile(url); err != nil {
			return c, bad(field+".schema", "%v", err)
		}
	}
	switch r.OnConflict {
	case "", intents.OnConflictReject, intents.OnConflictWait, intents.OnConflictEscalate:
	default:
		return c, bad(field+".on_conflict", "%q: want reject, wait or escalate", r.OnConflict)
	}
	switch r.Waiters {
	case "", WaitersPriority, WaitersFIFO:
	default:
		return c, bad(field+".waiters", "%q: want priority or fifo", r.Waiters)
	}
	if r.Lease != "" {
		if r.Kind != KindTask {
			return c, bad(field+".lease", "%q: only a task rule (kind task) has a lease", r.Lease)
		}
		d, err := time.ParseDuration(r.Lease)
		if err != nil || d <= 0 || d > MaxTaskLease {
			return c, bad(field+".lease", "%q: want a duration above 0 and at most %s, such as \"30s\"", r.Lease, MaxTaskLease)
		}
		c.lease = d
	}
	if r.ReclaimTo != "" {
		if r.Lease == "" {
			return c, bad(field+".reclaim_to", "%q: only a task rule with a lease reclaims", r.ReclaimTo)
		}
		if c.states != nil && !c.states[r.ReclaimTo] {
			return c, bad(field+".reclaim_to", "%q: not a state of the rule's transitions", r.ReclaimTo)
		}
	}
	if r.MaxRetries != 0 {
		if r.MaxRetries < 0 || r.MaxRetries > MaxTaskRetries {
			return c, bad(field+".max_retries", "%d: want 1 to %d (0 or none counts no tries)", r.MaxRetries, MaxTaskRetries)
		}
		if r.ReclaimTo == "" {
			return c, bad(field+".max_retries", "%d: only a task rule with a lease and a reclaim_to counts tries: the tries end when the task is back in the pool", r.MaxRetries)
		}
	}
	if r.WIP != 0 && (r.WIP < 0 || r.WIP > MaxTaskWIP || r.Lease == "") {
		return c, bad(field+".wip", "%d: want 1 to %d, on a task rule with a lease", r.WIP, MaxTaskWIP)
	}
	if r.DeadTo != "" {
		if r.MaxRetries == 0 {
			return c, bad(field+".dead_to", "%q: only a rule with max_retries has dead tasks", r.DeadTo)
		}
		if r.DeadTo == r.ReclaimTo {
			return c, bad(field+".dead_to", "%q: the same status as reclaim_to would put a dead task back in the pool", r.DeadTo)
		}
	}
	if r.MaxRetries != 0 && c.states != nil && !c.states[cmp.Or(r.DeadTo, DefaultDeadTo)] {
		return c, bad(field+".dead_to", "%q: not a state of the rule's transitions (a rule with max_retries and transitions names its dead status)", cmp.Or(r.DeadTo, DefaultDeadTo))
	}
	if a := r.Approve; a != nil {
		if c.approve, err = compileApprove(field+".approve", a); err != nil {
			return c, err
		}
	}
	if rv := r.Review; rv != nil {
		a := &Approve{By: rv.By, Quorum: rv.Quorum, Timeout: rv.Timeout}
		if c.review, err = compileApprove(field+".review", a); err != nil {
			return c, err
		}
		for j, reason := range rv.On {
			if !slices.Contains(Reviewable, reason) {
				return c, bad(fmt.Sprintf("%s.review.on[%d]", field, j), "%q: want %s or %s", reason, Reviewable[0], Reviewable[1])
			}
		}
	}
	if a := r.Arbiters; a != nil {
		if a.Quorum < 1 || a.Quorum > MaxQuorum {
			return c, bad(field+".arbiters.quorum", "%d: want 1 to %d", a.Quorum, MaxQuorum)
		}
		if a.Of != "" && !validPrincipal(a.Of) {
			return c, bad(field+".arbiters.of", "%q: want an agent name or role:NAME", a.Of)
		}
	}
	if r.Kind != "" && !slices.Contains(recordKinds, r.Kind) {
		return c, bad(field+".kind", "%q: want one of %s", r.Kind, strings.Join(recordKinds, ", "))
	}
	if r.Kind != "" && r.Kind != KindTask && len(r.Transitions) > 0 {
		return c, bad(field+".transitions", "a %s has no state machine; only a task's status has one", r.Kind)
	}
	return c, nil
}

func compileApprove(field string, a *Approve) (time.Duration, error) {
	if len(a.By) == 0 {
		return 0, bad(field+".by", "missing: name the agents or role:NAMEs who may approve")
	}
	for j, w := range a.By {
		if !validPrincipal(w) {
			return 0, bad(fmt.Sprintf("%s.by[%d]", field, j), "%q: want an agent name or role:NAME", w)
		}
	}
	for j, w := range a.Exempt {
		if !validPrincipal(w) {
			return 0, bad(fmt.Sprintf("%s.exempt[%d]", field, j), "%q: want an agent name or role:NAME", w)
		}
	}
	if a.Quorum < 0 || a.Quorum > MaxQuorum {
		return 0, bad(field+".quorum", "%d: want 1 to %d (none is 1)", a.Quorum, MaxQuorum)
	}
	switch a.Fallback {
	case "", intents.FallbackReject, intents.FallbackApply:
	default:
		return 0, bad(field+".fallback", "%q: want %s or %s", a.Fallback, intents.FallbackReject, intents.FallbackApply)
	}
	if a.Timeout == "" {
		return DefaultApproveTimeout, nil
	}
	d, err := time.ParseDuration(a.Timeout)
	if err != nil || d <= 0 || d > MaxApproveTimeout {
		return 0, bad(field+".timeout", "%q: want a duration above 0 and at most %s, such as \"30m\"", a.Timeout, MaxApproveTimeout)
	}
	return d, nil
}

// Gate returns the approval agent's writes need: that of the first rule,
// in order, with an approve that covers one of them (or lies under one)
// and does not exempt agent; false when none does.
func (s *Set) Gate(agent string, writes []string) (Gate, bool) {
	if s == nil {
		return Gate{}, false
	}
	for _, r := range s.rules {
		a := r.Approve
		if a == nil || s.allowed(agent, a.Exempt) {
			continue
		}
		for _, w := range writes {
			if r.pat.Overlaps(w) {
				return Gate{Gate: intents.Gate{Rule: r.index, Path: w, By: a.By, Quorum: max(a.Quorum, 1),
					Fallback: cmp.Or(a.Fallback, intents.FallbackReject)}, Timeout: r.approve}, true
			}
		}
	}
	return Gate{}, false
}

// Review returns the review a refusal for reason of agent's writes goes
// to: that of the first rule, in order, whose review takes reason and
// covers one of writes (or lies under one); false when none does.
func (s *Set) Review(agent string, writes []string, reason intents.Reason, refusal string) (Gate, bool) {
	if s == nil {
		return Gate{}, false
	}
	for _, r := range s.rules {
		rv := r.Review
		if rv == nil || len(rv.On) > 0 && !slices.Contains(rv.On, reason) {
			continue
		}
		for _, w := range writes {
			if r.pat.Overlaps(w) {
				return Gate{Gate: intents.Gate{Rule: r.index, Path: w, By: rv.By, Quorum: max(rv.Quorum, 1),
					Fallback: intents.FallbackReject, Review: reason, Refusal: intents.Clip(refusal, maxRefusal)}, Timeout: r.review}, true
			}
		}
	}
	return Gate{}, false
}

// Panel returns the panel of arbiters of the first rule, in order, with
// arbiters that covers one of writes (or lies under one); false when none
// does.
func (s *Set) Panel(writes []string) (intents.Panel, bool) {
	if s == nil {
		return intents.Panel{}, false
	}
	for _, r := range s.rules {
		if r.Arbiters == nil {
			continue
		}
		for _, w := range writes {
			if r.pat.Overlaps(w) {
				return *r.Arbiters, true
			}
		}
	}
	return intents.Panel{}, false
}

// maxRefusal bounds the refusal a review case keeps.
const maxRefusal = 1024

// Allowed reports whether agent is one of principals (agent names and
// "role:NAME"s) under the roles the set gives.
func (s *Set) Allowed(agent string, principals []string) bool {
	return s.allowed(agent, principals)
}

// Members returns the agents the set knows that are among principals:
// those named, and those the file's agents give a role named; sorted.
func (s *Set) Members(principals []string) []string {
	var out []string
	for _, p := range principals {
		if !strings.HasPrefix(p, "role:") {
			out = append(out, p)
		}
	}
	if s != nil {
		for name := range s.file.Agents {
			if s.allowed(name, principals) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func validPrincipal(p string) bool {
	if name, ok := strings.CutPrefix(p, "role:"); ok {
		return intents.ValidSegment(name)
	}
	return intents.ValidSegment(p)
}

// Raw is the file the Set was compiled from.
func (s *Set) Raw() []byte { return s.raw }

// Empty reports whether the set has no rules at all, and gives no agent
// a role: a file of roles alone (the agent registry's, with no --rules
// file) still says who observes and who administers.
func (s *Set) Empty() bool {
	return s == nil || len(s.rules) == 0 && len(s.invariants) == 0 && len(s.file.Quotas) == 0 && s.file.Limits == nil &&
		!slices.ContainsFunc(slices.Collect(maps.Values(s.file.Agents)), func(a Agent) bool { return len(a.Roles) > 0 })
}

// Roles returns the roles of agent.
func (s *Set) Roles(agent string) []string {
	if s == nil {
		return nil
	}
	return s.file.Agents[agent].Roles
}

// allowed reports whether agent is one of principals.
func (s *Set) allowed(agent string, principals []string) bool {
	for _, p := range principals {
		if role, ok := strings.CutPrefix(p, "role:"); ok {
			if slices.Contains(s.Roles(agent), role) {
				return true
			}
		} else if p == agent {
			return true
		}
	}
	return false
}

// Authorize checks that agent may read reads and write writes. The detail
// names the path, the pattern and who may.
func (s *Set) Authorize(agent string, reads, writes []string) (string, bool) {
	if s == nil {
		return "", true
	}
	for _, r := range s.rules {
		if len(r.writers) > 0 {
			for _, w := range writes {
				if r.pat.Overlaps(w) && !s.allowed(agent, r.writers) {
					return fmt.Sprintf("agent %s may not write %s: rules[%d] (%s) lets only %s write there",
						agent, w, r.index, r.Pattern, strings.Join(r.writers, ", ")), false
				}
			}
		}
		if len(r.readers) > 0 {
			for _, p := range reads {
				if r.pat.Overlaps(p) && !s.allowed(agent, r.readers) {
					return fmt.Sprintf("agent %s may not read %s: rules[%d] (%s) lets only %s read there",
						agent, p, r.index, r.Pattern, strings.Join(r.readers, ", ")), false
				}
			}
		}
	}
	return "", true
}

// MayPreempt reports whether agent may preempt a transaction in flight
// that it conflicts with on path, and names the rule that lets it.
func (s *Set) MayPreempt(agent, path string) (string, bool) {
	if s == nil {
		return "", false
	}
	for _, r := range s.rules {
		if len(r.Preempt) > 0 && r.pat.Overlaps(path) && s.allowed(agent, r.Preempt) {
			return fmt.Sprintf("rules[%d] (%s) lets %s preempt", r.index, r.Pattern, strings.Join(r.Preempt, ", ")), true
		}
	}
	return "", false
}

// OnConflict is the policy for an intent that names none and writes
// writes: that of the first rule covering one of them, or "" for the
// default.
func (s *Set) OnConflict(writes []string) intents.OnConflict {
	if s == nil {
		return ""
	}
	for _, r := range s.rules {
		if r.OnConflict == "" {
			continue
		}
		for _, w := range writes {
			if r.pat.Covers(w) {
				return r.OnConflict
			}
		}
	}
	return ""
}

// HasLeases reports whether a task rule has a lease.
func (s *Set) HasLeases() bool {
	return s != nil && s.leases
}

// Lanes returns the lanes of the task rules with a lease whose pattern is
// a lane's members ("tasks.*" makes the lane tasks), in the rules' order,
// each once.
func (s *Set) Lanes() []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, r := range s.rules {
		lane, ok := strings.CutSuffix(r.Pattern, ".*")
		if ok && r.lease > 0 && !strings.Contains(lane, "*") && !slices.Contains(out, lane) {
			out = append(out, lane)
		}
	}
	return out
}

// Leases returns the task records under a rule with a lease that writes
// reach, in the state before or after them (a write above a record
// reaches every record under it), in
// the rules' order and then the writes'. A record two rules match takes
// the first's lease.
func (s *Set) Leases(writes []string, before, after cond.Reader) []TaskLease {
	if s == nil {
		return nil
	}
	var out []TaskLease
	for _, r := range s.rules {
		if r.lease == 0 {
			continue
		}
		for _, w := range writes {
			if !r.pat.Overlaps(w) {
				continue
			}
			for _, p := range r.pat.concrete(w, before, after) {
				if !slices.ContainsFunc(out, func(l TaskLease) bool { return l.Path == p }) {
					l := TaskLease{Path: p, For: r.lease, ReclaimTo: r.ReclaimTo, MaxRetries: r.MaxRetries, WIP: r.WIP}
					if l.MaxRetries > 0 {
						l.DeadTo = cmp.Or(r.DeadTo, DefaultDeadTo)
					}
					out = append(out, l)
				}
			}
		}
	}
	return out
}

// FIFO reports whether the intents waiting on a transaction that writes
// writes are freed in arrival order alone: a rule covering one of them
// says "fifo". Otherwise the highest priority goes first.
func (s *Set) FIFO(writes []string) bool {
	if s == nil {
		return false
	}
	for _, r := range s.rules {
		if r.Waiters != WaitersFIFO {
			continue
		}
		for _, w := range writes {
			if r.pat.Covers(w) {
				return true
			}
		}
	}
	return false
}

// Invariants returns the invariants whose paths overlap one of writes:
// those a commit of writes must leave true. Their paths join the intent's
// read set, so that two transactions that could break an invariant
// together conflict instead.
func (s *Set) Invariants(writes []string) []Check {
	if s == nil {
		return nil
	}
	var out []Check
	for _, inv := range s.invariants {
		if slices.ContainsFunc(inv.cond.Paths, func(p string) bool {
			return slices.ContainsFunc(writes, func(w string) bool { return intents.Overlaps(p, w) })
		}) {
			out = append(out, Check{Name: inv.Name, Cond: inv.cond})
		}
	}
	return out
}

// AllInvariants returns every invariant in force, in the file's order.
func (s *Set) AllInvariants() []Check {
	if s == nil {
		return nil
	}
	out := make([]Check, 0, len(s.invariants))
	for _, inv := range s.invariants {
		out = append(out, Check{Name: inv.Name, Cond: inv.cond})
	}
	return out
}

// Check is a compiled invariant.
type Check struct {
	Name string
	Cond *cond.Condition
}

// QuotaOf returns the quota of agent: its own, or else that of the first of
// its roles (in name order) that has one.
func (s *Set) QuotaOf(agent string) (Quota, bool) {
	if s == nil {
		return Quota{}, false
	}
	if q, ok := s.file.Quotas[agent]; ok {
		return q, true
	}
	roles := slices.Clone(s.Roles(agent))
	sort.Strings(roles)
	for _, r := range roles {
		if q, ok := s.file.Quotas["role:"+r]; ok {
			return q, true
		}
	}
	return Quota{}, false
}

// CheckIntent checks an intent of size bytes, headers of them in the
// headers it came with, against the limits: an invalid decision naming
// the field, its value and the limit.
func (s *Set) CheckIntent(in *intents.Intent, size, headers int) *Violation {
	if s == nil || s.file.Limits == nil {
		return nil
	}
	l := s.file.Limits
	over := func(field string, v, limit int, what string) *Violation {
		return &Violation{Reason: intents.ReasonInvalid, Detail: fmt.Sprintf(
			"intent field %s = %d %s: above the rules' limit of %d", field, v, what, limit)}
	}
	switch {
	case l.IntentBytes > 0 && size > l.IntentBytes && headers > 0:
		return &Violation{Reason: intents.ReasonInvalid, Detail: fmt.Sprintf(
			"the intent is %d bytes, %d of them in its headers: above the rules' limit of %d", size, headers, l.IntentBytes)}
	case l.IntentBytes > 0 && size > l.IntentBytes:
		return &Violation{Reason: intents.ReasonInvalid, Detail: fmt.Sprintf(
			"the intent is %d bytes: above the rules' limit of %d", size, l.IntentBytes)}
	case l.Writes > 0 && len(in.Writes) > l.Writes:
		return over("writes", len(in.Writes), l.Writes, "writes")
	case l.Reads > 0 && len(in.Reads) > l.Reads:
		return over("reads", len(in.Reads), l.Reads, "reads")
	}
	for _, c := range []struct {
		field string
		exprs []string
	}{{"pre", in.Pre}, {"post", in.Post}} {
		for i, x := range c.exprs {
			if l.ExprLen > 0 && len(x) > l.ExprLen {
				return over(fmt.Sprintf("%s[%d]", c.field, i), len(x), l.ExprLen, "bytes")
			}
		}
	}
	if l.PathDepth > 0 {
		for i, r := range in.Reads {
			if d := strings.Count(r.Path, ".") + 1; d > l.PathDepth {
				return over(fmt.Sprintf("reads[%d].path", i), d, l.PathDepth, "segments")
			}
		}
		for i, w := range in.Writes {
			if d := strings.Count(w.Path, ".") + 1; d > l.PathDepth {
				return over(fmt.Sprintf("writes[%d].path", i), d, l.PathDepth, "segments")
			}
		}
	}
	return nil
}

// LimitsSize reports whether the rules bound an intent's size in bytes.
func (s *Set) LimitsSize() bool {
	return s != nil && s.file.Limits != nil && s.file.Limits.IntentBytes > 0
}

// CheckCondition checks a compiled condition against the limit on its
// size; field names it (pre[0]).
func (s *Set) CheckCondition(field string, c *cond.Condition) *Violation {
	if s == nil || s.file.Limits == nil || s.file.Limits.ExprNodes == 0 || c.Nodes <= s.file.Limits.ExprNodes {
		return nil
	}
	return &Violation{Reason: intents.ReasonInvalid, Detail: fmt.Sprintf(
		"intent field %s = %q has %d syntax nodes: above the rules' limit of %d", field, c.Source, c.Nodes, s.file.Limits.ExprNodes)}
}

// Violation is a change the rules refuse. A Contradiction (two facts on
// one subject) is not refused but sent to the arbiter.
type Violation struct {
	Reason        intents.Reason
	Detail        string
	Contradiction bool
	Path          string // the record contradicted
	// False says a condition evaluated false, rather than failing to
	// evaluate: what another agent's change may have made it.
	False bool
}

// CheckChange checks the values a change by agent leaves at the paths its
// writes touch against the state machines, the value schemas and the
// record kinds: before reads the state before the change, after the state
// after it.
//
// A contradiction is returned only when no check refuses the change, since
// the arbiter can settle a contradiction but not make an invalid value
// valid; and not at all when settled (an arbiter ruled on the change: its
// fact supersedes the one in force).
func (s *Set) CheckChange(agent string, writes []string, before, after cond.Reader, settled bool, waive intents.Reason) *Violation {
	if s == nil {
		return nil
	}
	var contra *Violation
	for _, r := range s.rules {
		if r.states == nil && r.schema == nil && r.Kind == "" {
			continue
		}
		for _, w := range writes {
			if !r.pat.Overlaps(w) {
				continue
			}
			operator := len(r.Operators) > 0 && s.allowed(agent, r.Operators)
			for _, p := range r.pat.concrete(w, before, after) {
				v := r.check(p, agent, operator, before, after, waive)
				switch {
				case v == nil:
				case !v.Contradiction:
					return v
				case contra == nil && !settled:
					contra = v
				}
			}
		}
	}
	return contra
}

// check checks the value at p. A contradiction does not end it: the
// value's schema is checked too, and refuses it first.
func (r *compiled) check(p, agent string, operator bool, before, after cond.Reader, waive intents.Reason) *Violation {
	nv, nok := after.Get(p)
	ov, ook := before.Get(p)
	if nok == ook && (!nok || equalJSON(ov, nv)) {
		return nil // unchanged
	}
	var contra *Violation
	if r.Kind != "" {
		contra = r.checkRecord(p, ov, ook, nv, nok, agent, operator, before)
		if contra != nil && !contra.Contradiction {
			if contra.Reason != waive {
				return contra
			}
			contra = nil // a person let it through on review
		}
	} else if r.states != nil {
		if v := r.transition(p, ov, ook, nv, nok); v != nil && v.Reason != waive {
			return v
		}
	}
	if nok && r.schema != nil {
		if err := r.schema.Validate(nv); err != nil {
			return &Violation{Reason: intents.ReasonInvalid, Detail: fmt.Sprintf(
				"%s = %s does not satisfy the schema of rules[%d] (%s): %s",
				p, intents.Clip(format(nv), 200), r.index, r.Pattern, schemaMessage(err))}
		}
	}
	return contra
}

// transition checks a value of the state machine going from ov (ook: it
// existed) to nv (nok: it exists after). Removing a value is not a
// transition.
func (r *compiled) transition(p string, ov any, ook bool, nv any, nok bool) *Violation {
	if !nok || ook && equalJSON(ov, nv) {
		return nil
	}
	to, isStr := nv.(string)
	if !isStr || !r.states[to] {
		return &Violation{Reason: intents.ReasonIllegalTransition, Detail: fmt.Sprintf(
			"%s = %s is not a state of rules[%d] (%s): want one of %s",
			p, format(nv), r.index, r.Pattern, strings.Join(slices.Sorted(maps.Keys(r.states)), ", "))}
	}
	if !ook {
		if len(r.Initial) > 0 && !slices.Contains(r.Initial, to) {
			return &Violation{Reason: intents.ReasonIllegalTransition, Detail: fmt.Sprintf(
				"%s: a new value must start in %s, not %s (rules[%d], %s)",
				p, strings.Join(r.Initial, " or "), to, r.index, r.Pattern)}
		}
		return nil
	}
	from, _ := ov.(string)
	if !slices.Contains(r.Transitions[from], to) {
		next := r.Transitions[from]
		allowed := "none: it is a final state"
		if len(next) > 0 {
			allowed = strings.Join(next, ", ")
		}
		return &Violation{Reason: intents.ReasonIllegalTransition, Detail: fmt.Sprintf(
			"%s: %s → %s is not a legal transition of rules[%d] (%s); from %s: %s",
			p, format(ov), to, r.index, r.Pattern, format(ov), allowed)}
	}
	return nil
}

func format(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	return format(a) == format(b)
}

// schemaMessage is a validation error without the library's preamble
// ("jsonschema validation failed with 'urn:…#' - "), which names our
// internal resource and not the rule.
func schemaMessage(err error) string {
	msg := intents.OneLine(err.Error())
	if _, rest, ok := strings.Cut(msg, "' - "); ok {
		return rest
	}
	return msg
}
