package cond

import (
	"fmt"
	"reflect"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
)

// costPatcher rewrites a type-checked expression so that every step whose
// work grows with what it reads is charged first (see cost.go), and gives
// each state path read a memo slot. It runs once the expression has passed
// the checker, so it never changes what compiles, and each wrapper keeps
// the type of what it wraps, so the checker and compiler treat the rest of
// the tree as before.
type costPatcher struct {
	slots     map[pathRef]int
	slotsOnly bool  // only give slots: the tests' reference form
	err       error // the first builtin that cannot be metered
}

var (
	intType      = reflect.TypeOf(0)
	refType      = reflect.TypeOf(&readRef{})
	timeType     = reflect.TypeOf(time.Time{})
	durationType = reflect.TypeOf(time.Duration(0))
)

func (p *costPatcher) Visit(node *ast.Node) {
	if p.slotsOnly {
		switch n := (*node).(type) {
		case *ast.CallNode:
			p.call(n)
		case *ast.BuiltinNode:
			if n.Name == "keys" || n.Name == "values" || n.Name == "toPairs" {
				p.builtin(node, n)
			}
		}
		return
	}
	switch n := (*node).(type) {
	case *ast.CallNode:
		p.call(n)
	case *ast.BinaryNode:
		p.binary(node, n)
	case *ast.BuiltinNode:
		p.builtin(node, n)
	case *ast.MemberNode:
		// A dynamic key is hashed or compared: its size is work.
		if _, ok := n.Property.(*ast.StringNode); !ok && !cheap(n.Property) {
			n.Property = wrap(fnSize, n.Property, costLinear|stepIndex("a dynamic key")<<8)
		}
	case *ast.PairNode:
		if !cheap(n.Key) {
			n.Key = wrap(fnSize, n.Key, costLinear|stepIndex("a dynamic key")<<8)
		}
	}
}

func (p *costPatcher) call(n *ast.CallNode) {
	switch callee := n.Callee.(type) {
	case *ast.IdentifierNode:
		switch callee.Value {
		case fnCur, fnOld, fnHas:
			path := n.Arguments[1].(*ast.StringNode).Value
			ref := pathRef{old: callee.Value == fnOld, path: path}
			slot, ok := p.slots[ref]
			if !ok {
				slot = len(p.slots)
				p.slots[ref] = slot
			}
			c := &ast.ConstantNode{Value: &readRef{path: path, slot: slot}}
			c.SetType(refType)
			n.Arguments[1] = c
			// The checker may not visit this call again (a wrapper above it
			// keeps its type): give the callee the overload it now calls, or
			// the compiler would dereference the pointer for a string.
			if callee.Value == fnHas {
				callee.SetType(reflect.TypeOf(func(*env, *readRef) bool { return false }))
			} else {
				callee.SetType(reflect.TypeOf(func(*env, *readRef) any { return nil }))
			}
		}
	case *ast.MemberNode:
		if p.slotsOnly {
			return
		}
		// A method of a value (a time's Format): its arguments are work.
		for i, a := range n.Arguments {
			if !cheap(a) {
				n.Arguments[i] = wrap(fnSize, a, costLinear|stepIndex("a method call")<<8)
			}
		}
	}
}

func (p *costPatcher) binary(node *ast.Node, n *ast.BinaryNode) {
	l, r := n.Left, n.Right
	var op int
	switch n.Operator {
	case "==", "!=", "<", ">", "<=", ">=":
		// Against a constant the work is bounded by the constant.
		if bounded(l) || bounded(r) || (scalar(l) && scalar(r)) {
			return
		}
		op = map[string]int{"==": opEq, "!=": opNe, "<": opLt, ">": opGt, "<=": opLe, ">=": opGe}[n.Operator]
	case "in":
		if cheap(l) && bounded(r) {
			return
		}
		op = opIn
	case "contains":
		if bounded(l) && bounded(r) {
			return
		}
		op = opContains
	case "startsWith", "endsWith":
		if bounded(r) { // a prefix test reads no more than the prefix
			return
		}
		op = opStartsWith
		if n.Operator == "endsWith" {
			op = opEndsWith
		}
	case "+":
		// With a number, a time or a duration on either side the sum is one
		// (or an error): only strings grow.
		if scalar(l) || scalar(r) || (bounded(l) && bounded(r)) {
			return
		}
		op = opAdd
	case "..":
		ast.Patch(node, wrap(fnSize, n, costLinear|stepIndex("a range")<<8))
		return
	case "matches":
		if cheap(l) {
			return
		}
		if s, ok := r.(*ast.StringNode); ok {
			// A constant pattern stays compiled once, at compile time; the
			// text is charged against its program.
			k, err := progSize(s.Value)
			if err != nil {
				return // the checker has compiled it: unreachable
			}
			n.Left = wrap(fnMatchK, l, int(k))
			return
		}
		c := callOf(fnMatches, &ast.IdentifierNode{Value: "$env"}, l, r)
		c.SetNature(*n.Nature())
		ast.Patch(node, c)
		return
	default:
		return
	}
	c := callOf(fnBinary, &ast.IdentifierNode{Value: "$env"}, l, r, integer(op))
	c.SetNature(*n.Nature())
	ast.Patch(node, c)
}

// loops are the builtins that take a predicate. Each is charged for its
// whole collection before it starts, even one that may stop early (any,
// find): the bound holds whatever the data, and a charge per iteration
// would cost more than the iteration (expr allocates the arguments of
// every function call in a loop).
var loops = map[string]bool{
	"all": true, "none": true, "any": true, "one": true,
	"find": true, "findIndex": true, "findLast": true, "findLastIndex": true,
	"filter": true, "map": true, "count": true, "sum": true, "groupBy": true, "sortBy": true, "reduce": true,
}

// The cost class of every builtin of expr is named here, as loops,
// linear, constant or special, and only those builtins are enabled
// (builtins): an expression that calls one that is none of them does not
// compile, so an upgrade of expr that adds a builtin must classify it
// first (TestEveryBuiltinHasACostClass lists them). A builtin that is
// refused is classified too, as one no condition may call.

// constant are the builtins whose work does not grow with their arguments.
var constant = map[string]bool{
	"len": true, "type": true, "abs": true, "ceil": true, "floor": true, "round": true, "now": true,
	"first": true, "last": true,
	"bitand": true, "bitor": true, "bitxor": true, "bitnand": true, "bitshl": true, "bitshr": true, "bitushr": true, "bitnot": true,
}

// special are the builtins the patcher rewrites or charges in a way of
// their own (costPatcher.builtin).
var special = map[string]bool{
	"keys": true, "values": true, "toPairs": true, "get": true, "repeat": true, "replace": true, "join": true,
}

// refused are the builtins no condition may call, with why: what they
// read differs between hosts, so a replay could decide otherwise.
var refused = map[string]string{
	"timezone": "time zone data differs between hosts, so a replay could decide otherwise; give offsets in the dates themselves",
}

// metered reports whether the builtin name has a cost class, and so is
// enabled.
func metered(name string) bool {
	_, lin := linear[name]
	return loops[name] || lin || constant[name] || special[name]
}

// builtins are the options that make expr's builtins an allow-list: all
// of them disabled, then each one with a cost class, and not refused,
// enabled again. It is read when a Compiler is made.
func builtins() []expr.Option {
	ops := []expr.Option{expr.DisableAllBuiltins()}
	for _, f := range builtin.Builtins {
		if metered(f.Name) && refused[f.Name] == "" {
			ops = append(ops, expr.EnableBuiltin(f.Name))
		}
	}
	return ops
}

// linear are the builtins whose work is linear in their arguments' sizes,
// with the formula that says how.
var linear = map[string]int{
	"string": costJSON, "toJSON": costJSON, "fromJSON": costJSON,
	"toBase64": costLinear, "fromBase64": costLinear, "upper": costCase, "lower": costCase,
	"trim": costLinear, "trimPrefix": costLinear, "trimSuffix": costLinear,
	"indexOf": costLinear, "lastIndexOf": costLinear, "hasPrefix": costLinear, "hasSuffix": costLinear,
	"int": costLinear, "float": costLinear, "duration": costLinear,
	"fromPairs": costReflect, "reverse": costLinear, "concat": costReflect, "flatten": costReflect,
	"max": costLinear, "min": costLinear, "mean": costLinear, "median": costSort, "sort": costSort,
	"uniq": costQuadratic, "split": costSplit, "splitAfter": costSplit,
	"date": costLinear, "take": costLinear,
}

func (p *costPatcher) builtin(node *ast.Node, n *ast.BuiltinNode) {
	if !metered(n.Name) {
		// The patcher has refused it already; should a builtin ever get
		// here another way, it is still not run unmetered.
		if p.err == nil {
			p.err = fmt.Errorf("the builtin %s has no cost class, so it cannot be metered", n.Name)
		}
		return
	}
	if loops[n.Name] {
		k := loopStep + 1
		if len(n.Arguments) > 1 {
			if pred, ok := n.Arguments[1].(*ast.PredicateNode); ok {
				k = loopStep + count(pred.Node)
				if n.Name == "sortBy" || n.Name == "groupBy" {
					// Keys are compared or hashed: their size is work.
					pred.Node = wrap1(fnKey, pred.Node)
				}
			}
		}
		if n.Name == "groupBy" {
			k += groupWeight
		}
		k <<= 1
		if n.Name == "sortBy" {
			k |= 1
		}
		n.Arguments[0] = wrap(fnLoop, n.Arguments[0], k)
		return
	}
	switch n.Name {
	case "keys", "values", "toPairs":
		c := callOf(fnMapOrder, &ast.IdentifierNode{Value: "$env"}, n.Arguments[0],
			integer(map[string]int{"keys": 0, "values": 1, "toPairs": 2}[n.Name]))
		c.SetNature(*n.Nature())
		ast.Patch(node, c)
		return
	case "get":
		if len(n.Arguments) == 2 && !cheap(n.Arguments[1]) {
			n.Arguments[1] = wrap(fnSize, n.Arguments[1], costLinear|stepIndex("get")<<8)
		}
		return
	case "repeat", "replace":
		p.multiplied(n, map[string]int{"repeat": costRepeat, "replace": costReplace}[n.Name])
		return
	case "join":
		if len(n.Arguments) == 2 {
			p.multiplied(n, costJoin)
			return
		}
	}
	f, ok := linear[n.Name]
	if n.Name == "join" {
		f, ok = costLinear, true
	}
	if !ok {
		return
	}
	for i, a := range n.Arguments {
		if !cheap(a) {
			n.Arguments[i] = wrap(fnSize, a, f|stepIndex(n.Name)<<8)
		}
	}
}

// multiplied wraps the arguments of a builtin whose work is a product of
// them (repeat's length × count): all but the last are pushed as they are
// evaluated, and the last charges for all of them, before the builtin
// runs. Arguments are evaluated in order, so the pushes and the pop pair
// up even when an argument holds another such call. Constants are charged
// too: repeat of a 4,000-byte constant a million times is 4 GB.
func (p *costPatcher) multiplied(n *ast.BuiltinNode, f int) {
	if len(n.Arguments) < 2 {
		return
	}
	last := len(n.Arguments) - 1
	for i, a := range n.Arguments[:last] {
		n.Arguments[i] = wrap1(fnPush, a)
	}
	n.Arguments[last] = wrap(fnLast, n.Arguments[last], f|last<<8|stepIndex(n.Name)<<12)
}

// bounded reports whether node is a constant, or made of constants only:
// its size is bounded by the expression's text. agent is bounded by the
// limit on agent names.
func bounded(node ast.Node) bool {
	switch n := node.(type) {
	case *ast.NilNode, *ast.BoolNode, *ast.IntegerNode, *ast.FloatNode, *ast.StringNode, *ast.ConstantNode:
		return true
	case *ast.IdentifierNode:
		return n.Value == "agent"
	case *ast.UnaryNode:
		return bounded(n.Node)
	case *ast.BinaryNode:
		return n.Operator != ".." && bounded(n.Left) && bounded(n.Right)
	case *ast.ArrayNode:
		for _, e := range n.Nodes {
			if !bounded(e) {
				return false
			}
		}
		return true
	case *ast.MapNode:
		for _, e := range n.Pairs {
			if pair, ok := e.(*ast.PairNode); !ok || !bounded(pair.Key) || !bounded(pair.Value) {
				return false
			}
		}
		return true
	}
	return false
}

// scalar reports whether node's static type has a size of one unit.
func scalar(node ast.Node) bool {
	t := node.Nature().Type
	if t == nil {
		return false
	}
	if t == timeType || t == durationType {
		return true
	}
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// cheap reports whether using node as an operand costs a bounded amount.
func cheap(node ast.Node) bool { return bounded(node) || scalar(node) }

// count is the number of syntax nodes under node.
func count(node ast.Node) int {
	var c counter
	ast.Walk(&node, &c)
	return int(c)
}

type counter int

func (c *counter) Visit(*ast.Node) { *c++ }

// wrap returns fn($env, node, k), typed as node is.
func wrap(fn string, node ast.Node, k int) ast.Node {
	c := callOf(fn, &ast.IdentifierNode{Value: "$env"}, node, integer(k))
	c.SetNature(*node.Nature())
	c.SetLocation(node.Location())
	return c
}

// wrap1 returns fn($env, node), typed as node is.
func wrap1(fn string, node ast.Node) ast.Node {
	c := callOf(fn, &ast.IdentifierNode{Value: "$env"}, node)
	c.SetNature(*node.Nature())
	c.SetLocation(node.Location())
	return c
}

func callOf(fn string, args ...ast.Node) *ast.CallNode {
	return &ast.CallNode{Callee: &ast.IdentifierNode{Value: fn}, Arguments: args}
}

func integer(v int) *ast.IntegerNode {
	n := &ast.IntegerNode{Value: v}
	n.SetType(intType)
	return n
}
