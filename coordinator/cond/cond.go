package cond

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/checker"
	"github.com/expr-lang/expr/compiler"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/optimizer"
	"github.com/expr-lang/expr/vm"
)

// Reader is the state as a condition sees it: values and versions by path.
// A missing path is (nil, false) and version 0 unless it once existed.
type Reader interface {
	Get(path string) (any, bool)
	Version(path string) uint64
	// ModTime is when path last changed (mod_time), the zero time when
	// it does not exist or the time is not known.
	ModTime(path string) time.Time
}

// Condition is a compiled pre- or postcondition. It is immutable and safe to
// share between goroutines; evaluate it with an Evaluator.
type Condition struct {
	Source string
	// Nodes is the size of its syntax tree, which board rules may bound.
	Nodes int
	// Paths are the state paths the expression touches, sorted: the members
	// it reads (`state.a.b` → a.b, `old.a.b` → a.b) and the arguments of
	// has() and version(). They join the intent's read set.
	Paths []string
	// State and Old split Paths by how the expression reads them: from the
	// state it is evaluated on, or (postconditions) from before the writes.
	State, Old []string

	usesIntent bool
	slots      int // distinct paths read, each memoized in its own slot
	prog       *vm.Program
}

// DefaultMaxNodes is the default of Options.MaxNodes, the size of an
// expression's syntax tree.
const DefaultMaxNodes = 1000

// Options bound what a condition may cost.
type Options struct {
	// CacheSize is how many compiled conditions are kept, least recently used
	// first out. The default is 4096.
	CacheSize int
	// MaxNodes bounds the size of an expression's syntax tree. The default is 1000.
	MaxNodes uint
	// MemoryBudget bounds what one evaluation may allocate, in expr's units.
	// The default is 100000.
	MemoryBudget uint
	// Budget bounds the work of evaluating one intent's conditions, all of
	// them together, in the abstract units of cost.go: about one VM step,
	// one byte a string operation touches, one element a loop visits. It
	// is counted from what the expressions do and read, so the same intent
	// against the same state always gets the same decision. The default is
	// DefaultBudget (1,000,000).
	Budget int64
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.CacheSize <= 0 {
		o.CacheSize = 4096
	}
	if o.MaxNodes == 0 {
		o.MaxNodes = DefaultMaxNodes
	}
	if o.MemoryBudget == 0 {
		o.MemoryBudget = 100000
	}
	if o.Budget <= 0 {
		o.Budget = DefaultBudget
	}
}

// Compiler compiles conditions and caches them by text. It is safe for
// concurrent use.
type Compiler struct {
	opts     Options
	fns      []expr.Option // the functions patched expressions call
	builtins []expr.Option // expr's builtins as an allow-list (builtins())
	// uncosted compiles without the cost patcher: the tests compare the two
	// forms, which must decide alike.
	uncosted bool
	mu       struct {
		sync.Mutex
		lru   *list.List // of *cacheEntry, most recent first
		byKey map[cacheKey]*list.Element
	}
}

type cacheKey struct {
	post bool
	src  string
}

type cacheEntry struct {
	key  cacheKey
	cond *Condition
	err  error
}

// NewCompiler returns a compiler with the given options (zero fields take
// their defaults).
func NewCompiler(opts Options) *Compiler {
	opts.EnsureDefaults()
	c := &Compiler{opts: opts, fns: append(stateFunctions(), costFunctions()...), builtins: builtins()}
	c.mu.lru = list.New()
	c.mu.byKey = make(map[cacheKey]*list.Element)
	return c
}

// Compile returns the compiled form of src. A postcondition (post) may also
// refer to `old`, the state before the writes. field names the expression in
// the intent ("pre[0]") for the error, which is an *intents.ValidationError
// when the expression does not compile, is not boolean, or reads something
// it may not.
// Errors are cached like programs, keyed by text; field is not part of the
// key, so the cached error is re-labelled.
func (c *Compiler) Compile(field, src string, post bool) (*Condition, error) {
	key := cacheKey{post, src}
	c.mu.Lock()
	if el, ok := c.mu.byKey[key]; ok {
		c.mu.lru.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		c.mu.Unlock()
		return e.cond, relabel(e.err, field)
	}
	c.mu.Unlock()

	cond, err := c.compile(src, post)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.mu.byKey[key]; !ok {
		c.mu.byKey[key] = c.mu.lru.PushFront(&cacheEntry{key, cond, err})
		for c.mu.lru.Len() > c.opts.CacheSize {
			last := c.mu.lru.Back()
			c.mu.lru.Remove(last)
			delete(c.mu.byKey, last.Value.(*cacheEntry).key)
		}
	}
	return cond, relabel(err, field)
}

// invalid is the error of a condition src that does not compile: an
// *intents.ValidationError, as the decoder's, so an intent's bad
// condition is refused like any other bad field (Compile sets the field).
func invalid(src, format string, args ...any) *intents.ValidationError {
	return &intents.ValidationError{Value: strconv.Quote(intents.Clip(src, 80)), Reason: fmt.Sprintf(format, args...)}
}

func relabel(err error, field string) error {
	var ve *intents.ValidationError
	if errors.As(err, &ve) {
		cp := *ve
		cp.Field = field
		return &cp
	}
	return err
}

// Len returns how many compiled conditions are cached.
func (c *Compiler) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.lru.Len()
}

func (c *Compiler) compile(src string, post bool) (cond *Condition, err error) {
	defer func() {
		// expr recovers its own panics; this guards the patchers and any that
		// escape, so a hostile expression is an error, never a crash.
		if r := recover(); r != nil {
			cond, err = nil, invalid(src, "does not compile: %v", r)
		}
	}()
	// expr.Compile's steps, with the cost patcher between the check and the
	// optimizer: an expression compiles, or fails, exactly as it would
	// without it, and only a checked tree, whose types are known, is
	// rewritten to charge for its costs.
	p := &patcher{post: post, paths: map[pathRef]int{}}
	config := conf.CreateNew()
	for _, op := range c.fns {
		op(config)
	}
	for _, op := range c.builtins {
		op(config)
	}
	for _, op := range []expr.Option{
		expr.Env(&env{}),
		expr.MaxNodes(c.opts.MaxNodes),
		expr.Patch(p),
	} {
		op(config)
	}
	for name := range config.Disabled {
		delete(config.Builtins, name)
	}
	p.builtins = config.Builtins
	config.Check()
	tree, err := checker.ParseCheck(src, config)
	if p.err != nil {
		return nil, invalid(src, "%v", p.err)
	}
	if err != nil {
		return nil, invalid(src, "does not compile: %s", firstLine(err.Error()))
	}
	cp := &costPatcher{slots: map[pathRef]int{}, slotsOnly: c.uncosted}
	ast.Walk(&tree.Node, cp)
	if cp.err != nil {
		return nil, invalid(src, "does not compile: %s", cp.err)
	}
	if _, err := checker.Check(tree, config); err != nil {
		return nil, invalid(src, "does not compile once costed: %s", firstLine(err.Error()))
	}
	if err := optimizer.Optimize(&tree.Node, config); err != nil {
		return nil, invalid(src, "does not compile: %s", firstLine(err.Error()))
	}
	prog, err := compiler.Compile(tree, config)
	if err != nil {
		return nil, invalid(src, "does not compile: %s", firstLine(err.Error()))
	}
	// A result type known at compile time must be bool; one known only at
	// run time (a state value) is checked after each run.
	if t := prog.Node().Type(); t != nil && t.Kind() != reflect.Bool && t.Kind() != reflect.Interface {
		return nil, invalid(src, "is %s, not boolean", t)
	}
	cond = &Condition{Source: src, Nodes: p.nodes, usesIntent: p.usesIntent, slots: len(cp.slots), prog: prog}
	for ref := range p.paths {
		if ref.old {
			cond.Old = append(cond.Old, ref.path)
		} else {
			cond.State = append(cond.State, ref.path)
		}
		if !slices.Contains(cond.Paths, ref.path) {
			cond.Paths = append(cond.Paths, ref.path)
		}
	}
	slices.Sort(cond.Paths)
	slices.Sort(cond.State)
	slices.Sort(cond.Old)
	return cond, nil
}

// stateFunctions are the expr functions that read the state: each takes
// the environment and the path, which the cost patcher turns into a
// *readRef (the path and its memo slot) once the tree is checked.
func stateFunctions() []expr.Option {
	return []expr.Option{
		expr.Function(fnCur, func(a ...any) (any, error) {
			e := a[0].(*env)
			v, _ := e.read(e.cur, "state.", a[1].(*readRef))
			return v, nil
		}, new(func(*env, string) any), new(func(*env, *readRef) any)),
		expr.Function(fnOld, func(a ...any) (any, error) {
			e := a[0].(*env)
			v, _ := e.read(e.old, "old.", a[1].(*readRef))
			return v, nil
		}, new(func(*env, string) any), new(func(*env, *readRef) any)),
		expr.Function(fnHas, func(a ...any) (any, error) {
			e := a[0].(*env)
			return e.has(e.cur, a[1].(*readRef)), nil
		}, new(func(*env, string) bool), new(func(*env, *readRef) bool)),
		expr.Function(fnVersion, func(a ...any) (any, error) {
			e := a[0].(*env)
			e.spend(1, false, func() string { return "version()" })
			return int(e.cur.Version(a[1].(string))), nil
		}, new(func(*env, string) int)),
		expr.Function(fnModTime, func(a ...any) (any, error) {
			e := a[0].(*env)
			e.spend(1, false, func() string { return "mod_time()" })
			return e.cur.ModTime(a[1].(string)), nil
		}, new(func(*env, string) time.Time)),
	}
}

// firstLine is the first line of an expr error: the lines after it repeat
// the source with a caret under the fault, which the error quotes already.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// The functions that patched expressions call. Users cannot call them
// directly: the patcher rejects every name with their prefix, so every
// state access goes through a path it has seen and counted as read.
const (
	fnCur     = "CoagentCur"
	fnOld     = "CoagentOld"
	fnHas     = "CoagentHas"
	fnVersion = "CoagentVersion"
	fnModTime = "CoagentModTime"
	fnPrefix  = "Coagent"
)

// patcher rewrites every member chain rooted at `state` or `old` with static
// segments (`state.a.b`, `state.a["b"]`) into one call CoagentCur("a.b"), so a
// missing path at any depth reads as nil instead of failing, and collects the
// paths it sees. has("p") and version("p") become calls on env with their
// constant path collected the same way.
type patcher struct {
	nodes      int // syntax nodes visited
	post       bool
	builtins   conf.FunctionsTable // the builtins enabled
	paths      map[pathRef]int     // how many accesses read each path
	usesIntent bool
	err        error
}

// pathRef is a path read from the state now (old false) or before the
// writes (old true).
type pathRef struct {
	old  bool
	path string
}

func (p *patcher) add(ref pathRef) { p.paths[ref]++ }

// drop forgets one access to ref, made by a chain that has grown past it.
func (p *patcher) drop(ref pathRef) {
	if p.paths[ref]--; p.paths[ref] <= 0 {
		delete(p.paths, ref)
	}
}

func (p *patcher) fail(format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf(format, args...)
	}
}

func (p *patcher) Visit(node *ast.Node) {
	p.nodes++
	switch n := (*node).(type) {
	case *ast.IdentifierNode:
		if strings.HasPrefix(n.Value, fnPrefix) || n.Value == "$env" {
			p.fail("%s is reserved", n.Value)
			return
		}
		switch n.Value {
		case "intent":
			p.usesIntent = true
		case "old":
			if !p.post {
				p.fail("old is only defined in post conditions")
			}
		}
	case *ast.MemberNode:
		p.member(node, n)
	case *ast.BuiltinNode:
		if p.builtins[n.Name] == nil {
			p.disabled(n.Name)
			return
		}
		p.clock(node, n)
	case *ast.CallNode:
		if m, ok := n.Callee.(*ast.MemberNode); ok {
			if prop, ok := m.Property.(*ast.StringNode); ok && prop.Value == "Local" {
				p.fail("Local() is not available: it depends on the host's time zone; conditions see times in UTC")
			}
			return
		}
		id, ok := n.Callee.(*ast.IdentifierNode)
		if !ok {
			return
		}
		var fn string
		switch id.Value {
		case "has":
			fn = fnHas
		case "version":
			fn = fnVersion
		case "mod_time":
			fn = fnModTime
		default:
			if _, isBuiltin := builtin.Index[id.Value]; isBuiltin && p.builtins[id.Value] == nil {
				p.disabled(id.Value)
			}
			return
		}
		if len(n.Arguments) != 1 {
			p.fail("%s takes one path argument", id.Value)
			return
		}
		arg, ok := n.Arguments[0].(*ast.StringNode)
		if !ok {
			p.fail("%s needs a constant path string, so the paths it reads are known before it runs", id.Value)
			return
		}
		if err := intents.CheckPath(arg.Value); err != nil {
			p.fail("%s(%q): %v", id.Value, arg.Value, err)
			return
		}
		p.add(pathRef{path: arg.Value})
		ast.Patch(node, call(fn, arg.Value))
	}
}

// disabled refuses a call of a builtin the allow-list leaves off, by its
// name. expr parses such a call as one of an unknown name, or, for a
// builtin that takes a predicate (all, filter…), as the builtin
// regardless of the list, which is why both are checked here.
func (p *patcher) disabled(name string) {
	if why, ok := refused[name]; ok {
		p.fail("%s() is not available: %s", name, why)
		return
	}
	p.fail("the builtin %s has no cost class, so it cannot be metered", name)
}

// clock makes the builtins that read the time deterministic: now() is the
// time of the decision (the engine's clock, recorded with its events, so a
// replay sees it too), and date() may not load a named zone, whose rules
// come from the host.
func (p *patcher) clock(node *ast.Node, n *ast.BuiltinNode) {
	switch n.Name {
	case "now":
		if len(n.Arguments) > 0 {
			p.fail("now() takes no argument")
			return
		}
		ast.Patch(node, callOf(fnNow, &ast.IdentifierNode{Value: "$env"}))
	case "date":
		switch len(n.Arguments) {
		case 1, 2:
			// Parsed in UTC, not in the host's zone (expr.Timezone would do
			// it too, but breaks date(…).Year()).
			c := callOf(fnDate, append([]ast.Node{&ast.IdentifierNode{Value: "$env"}}, n.Arguments...)...)
			c.SetType(timeType)
			ast.Patch(node, c)
		case 3:
			p.fail("date() with a time zone name is not available: time zone data differs between hosts, so a replay could decide otherwise; give the offset in the date itself")
		}
	}
}

func (p *patcher) member(node *ast.Node, n *ast.MemberNode) {
	var fn, base string
	switch in := n.Node.(type) {
	case *ast.IdentifierNode:
		switch in.Value {
		case "state":
			fn = fnCur
		case "old":
			fn = fnOld
		default:
			return
		}
	case *ast.CallNode:
		// A chain already rewritten one level down: extend its path.
		id, ok := in.Callee.(*ast.IdentifierNode)
		if !ok || (id.Value != fnCur && id.Value != fnOld) {
			return
		}
		fn, base = id.Value, in.Arguments[1].(*ast.StringNode).Value
	default:
		if rooted(n.Node) {
			p.optional(node, n)
		}
		return
	}
	prop, ok := n.Property.(*ast.StringNode)
	if !ok {
		if base == "" {
			p.fail("state must be followed by a constant path (state.board.key)")
			return
		}
		// state.a[x]: a dynamic key below a static prefix reads the prefix,
		// and reads nil where the prefix is missing.
		p.optional(node, n)
		return
	}
	if !intents.ValidSegment(prop.Value) {
		p.fail("%q is not a legal path segment", prop.Value)
		return
	}
	path := prop.Value
	if base != "" {
		p.drop(pathRef{fn == fnOld, base})
		path = base + "." + prop.Value
	}
	if strings.Count(path, ".")+1 > intents.MaxDepth {
		p.fail("path %s is deeper than %d segments", path, intents.MaxDepth)
		return
	}
	p.add(pathRef{fn == fnOld, path})
	ast.Patch(node, call(fn, path))
}

// optional makes a member access below a state value nil-safe (as `?.`), so
// a missing path reads as nil at any depth, dynamic keys included.
func (p *patcher) optional(node *ast.Node, n *ast.MemberNode) {
	n.Optional = true
	ast.Patch(node, &ast.ChainNode{Node: n})
}

// rooted reports whether node is a state access or a member chain below one.
func rooted(node ast.Node) bool {
	for {
		switch n := node.(type) {
		case *ast.ChainNode:
			node = n.Node
		case *ast.MemberNode:
			node = n.Node
		case *ast.CallNode:
			id, ok := n.Callee.(*ast.IdentifierNode)
			return ok && (id.Value == fnCur || id.Value == fnOld)
		default:
			return false
		}
	}
}

// call builds the rewritten form of a state access: fn($env, "path"). The
// functions take the environment as an argument because compiled programs
// are shared while every evaluation has its own state to read.
func call(fn, path string) *ast.CallNode {
	return callOf(fn, &ast.IdentifierNode{Value: "$env"}, &ast.StringNode{Value: path})
}

// env is what a compiled condition runs against.
type env struct {
	Agent  string         `expr:"agent"`
	Intent map[string]any `expr:"intent"`
	cur    Reader
	old    Reader
	costState
}

// Evaluator runs conditions. It reuses one VM, so it is not safe for
// concurrent use; give each goroutine its own.
//
// The conditions of one intent share one budget (Options.Budget)
// and one clock: Begin starts them. Without Begin every evaluation has a
// budget of its own and now() is the zero time.
type Evaluator struct {
	vm         vm.VM
	env        env
	scoped     bool   // Begin was called: the budget spans evaluations
	scope      uint64 // counts Begin calls (and unscoped evaluations)
	viewScope  uint64 // the scope the intent's view was charged in
	intent     *intents.Intent
	intentView map[string]any
}

// NewEvaluator returns an evaluator whose runs allocate at most the compiler's
// memory budget and spend at most its evaluation budget per intent.
func (c *Compiler) NewEvaluator() *Evaluator {
	ev := &Evaluator{vm: vm.VM{MemoryBudget: c.opts.MemoryBudget}}
	ev.env.budget = c.opts.Budget
	ev.env.left = c.opts.Budget
	return ev
}

// Begin starts the evaluation of one intent's conditions at the decision
// time now: a full budget, shared by every Eval until the next Begin, and
// the time now() returns. The engine calls it once per intent it decides,
// with the time its events record.
func (ev *Evaluator) Begin(now time.Time) {
	ev.scoped = true
	ev.scope++
	ev.env.left = ev.env.budget
	ev.env.now = now.UTC() // UTC drops a monotonic reading, which a replay has not
}

// Spent returns the units spent since Begin (or by the last Eval, without
// Begin).
func (ev *Evaluator) Spent() int64 { return ev.env.budget - ev.env.left }

// ErrNotBool is returned (wrapped) when a condition yields something other
// than a boolean at run time. Its text keeps the prefix of the package it
// was first declared in: it is part of decisions' details, which the event
// log records, and the same condition is refused in the same words in a
// log written before and one written after.
var ErrNotBool = errors.New("intents: condition is not boolean")

// Eval runs cond against cur (and old, for postconditions; nil otherwise) on
// behalf of in. It returns the condition's value, or an error when it fails
// at run time (wrapping ErrNotBool for a non-boolean result), or a
// *BudgetError when it would spend more than is left of the budget.
func (ev *Evaluator) Eval(cond *Condition, cur, old Reader, in *intents.Intent) (ok bool, err error) {
	e := &ev.env
	defer func() {
		if r := recover(); r != nil {
			if be, isBudget := r.(*BudgetError); isBudget {
				ok, err = false, be
				return
			}
			ok, err = false, fmt.Errorf("%v", r)
		}
		e.cur, e.old = nil, nil
		clear(e.memo[:cond.slots])
		clear(e.stack)
		e.stack = e.stack[:0]
	}()
	if !ev.scoped {
		ev.scope++
		e.left = e.budget
	}
	e.cur, e.old = cur, old
	if len(e.memo) < cond.slots {
		e.memo = make([]memoEntry, cond.slots)
	}
	e.spend(int64(cond.Nodes), false, func() string { return fmt.Sprintf("evaluating its %d syntax nodes", cond.Nodes) })
	e.Agent = in.Agent
	e.Intent = nil
	if cond.usesIntent {
		e.Intent = ev.viewOf(in)
		if ev.viewScope != ev.scope {
			ev.viewScope = ev.scope
			n, over := e.sized(e.Intent)
			e.spend(n, over, func() string { return "reading the intent" })
		}
	}
	out, err := ev.vm.Run(cond.prog, e)
	if err != nil {
		var be *BudgetError
		if errors.As(err, &be) {
			return false, be
		}
		return false, errors.New(firstLine(err.Error()))
	}
	b, isBool := out.(bool)
	if !isBool {
		return false, fmt.Errorf("%w: it returned %s", ErrNotBool, intents.JSONType(out))
	}
	return b, nil
}

// viewOf returns the intent as conditions see it: its JSON form, built once
// per intent.
func (ev *Evaluator) viewOf(in *intents.Intent) map[string]any {
	if ev.intent == in && ev.intentView != nil {
		return ev.intentView
	}
	var m map[string]any
	if b, err := json.Marshal(in); err == nil {
		_ = json.Unmarshal(b, &m)
	}
	ev.intent, ev.intentView = in, m
	return m
}
