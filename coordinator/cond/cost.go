package cond

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/coagent/coagent/intents"
	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm/runtime"
)

// The cost of evaluating conditions is counted in abstract units, from what
// the expressions do and read, never from a clock: the same intent against
// the same state spends the same units and gets the same decision, live and
// on replay. A unit is about one step of the VM, one byte a string
// operation touches, one element a loop visits or a value holds; each
// operation whose work grows with its operands is charged before it runs
// (a regular expression, text length × program size), so a hostile
// expression is stopped before the work it would take, not after.
//
// The compiler rewrites each such operation (costPatcher) into a call of
// one of the functions below, which charges the evaluation's budget and
// then does what expr would have done, with expr's own runtime helpers.

// DefaultBudget is the default of Options.Budget. On the 2-core
// machines this is developed on, the costliest expressions per unit that
// we could build (BenchmarkOverBudget) spend a whole budget in about 20 ms.
const DefaultBudget = 1_000_000

// ErrBudget is matched (errors.Is) by a *BudgetError.
var ErrBudget = errors.New("cond: over the evaluation budget")

// BudgetError says that evaluating an intent's conditions would cost more
// than its budget. It is the same for the same intent and state every time.
type BudgetError struct {
	Budget int64 // units one intent's conditions may spend
	Spent  int64 // units spent before the refused step
	Cost   int64 // what the refused step costs (at least, when AtLeast)
	// AtLeast says Cost is a lower bound: counting stopped once it was
	// clear the step does not fit.
	AtLeast bool
	What    string // the step: "matches on a 100000-byte string with a 6001-byte pattern"
}

func (e *BudgetError) Error() string {
	more := ""
	if e.AtLeast {
		more = "more than "
	}
	s := fmt.Sprintf("over the evaluation budget of %d units per intent: %s costs %s%d", e.Budget, e.What, more, e.Cost)
	if e.Spent > 0 {
		s += fmt.Sprintf(", with %d spent before it", e.Spent)
	}
	return s
}

// Is makes errors.Is(err, ErrBudget) hold.
func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

// The functions of the cost patcher. Like the state functions, users
// cannot call them: the patcher rejects every name starting with Coagent.
const (
	fnNow      = "CoagentNow"
	fnDate     = "CoagentDate"
	fnLoop     = "CoagentLoop"     // (env, collection, k): len × k units before a loop
	fnKey      = "CoagentKey"      // (env, key): a sortBy or groupBy key's size
	fnSize     = "CoagentSize"     // (env, value, formula): a builtin's argument, a range, a dynamic key
	fnPush     = "CoagentPush"     // (env, value): an argument that a later one's cost depends on
	fnLast     = "CoagentLast"     // (env, value, formula): the last argument; charges for all of them
	fnMatchK   = "CoagentMatchK"   // (env, text, program size): text of a constant pattern
	fnMatches  = "CoagentMatches"  // (env, text, pattern)
	fnBinary   = "CoagentBinary"   // (env, a, b, op): ==, <, in, contains, + … on sized operands
	fnMapOrder = "CoagentMapOrder" // (env, map, which): keys, values, toPairs in key order
)

// Weights, in units, of the work that is not one byte or one element,
// measured by BenchmarkOverBudget so that no unit costs much more than
// 20 ns.
const (
	loopStep      = 4  // a loop's own steps per iteration, besides its body
	groupWeight   = 40 // groupBy's insertion of each element in its map
	memberCost    = 4  // one member of an object materialized by a read
	compareMember = 10 // one member of an object compared (reflect.DeepEqual)
	inElement     = 1  // one element of an array searched by in (reflection)
	inDeepEqual   = 40 // … when each is compared with an object or array (a reflect.DeepEqual call)
	jsonWeight    = 8  // per unit of toJSON, fromJSON, string(): reflection and escaping
	caseWeight    = 2  // per byte of upper(), lower(): rune by rune
	reflectWeight = 10 // per unit of concat, flatten, fromPairs: reflection per element
	sortWeight    = 2  // per comparison of a sort
	patternWeight = 25 // per instruction of a pattern compiled at run time, and its first match
	maxCost       = 1 << 50
)

// formulas of CoagentSize and CoagentLast: how a builtin's cost follows
// from its arguments.
const (
	costLinear    = iota // the argument's size
	costJSON             // jsonWeight × size
	costCase             // caseWeight × size
	costReflect          // reflectWeight × size
	costSort             // size + n·log n comparisons
	costQuadratic        // uniq: n × size, each element against those kept
	costSplit            // 2 × size: a string header per piece
	costKeys             // keys, values, toPairs: size + a sort of the keys
	costRepeat           // repeat(s, n): len(s) × n
	costReplace          // replace(s, old, new[, n]): len(s) + the new text
	costJoin             // join(array, sep): size + len(array) × len(sep)
)

// env fields used for costs; kept beside the state readers in env.
type costState struct {
	budget  int64 // units per scope
	left    int64 // units left in this scope
	now     time.Time
	memo    []memoEntry                // the reads of this evaluation, by slot
	stack   []any                      // arguments pushed by CoagentPush
	nodes   int                        // syntax nodes of the condition running
	regexps map[string]compiledPattern // the last patterns matched, by text
}

type memoEntry struct {
	set bool
	ok  bool
	v   any
}

// spend takes cost units, or panics with a *BudgetError naming the step
// (what is only called then, so messages cost nothing on the happy path).
func (e *env) spend(cost int64, atLeast bool, what func() string) {
	if cost <= e.left {
		e.left -= cost
		return
	}
	if atLeast {
		// Counting stopped somewhere past what was left, where depends on
		// the order of a map: report what is sure, and the same each time.
		cost = e.left
	}
	panic(&BudgetError{Budget: e.budget, Spent: e.budget - e.left, Cost: cost, AtLeast: atLeast, What: what()})
}

// sized measures v for a step, counting no further than the units left, so
// measuring a huge value costs no more than the budget it is refused by.
func (e *env) sized(v any) (int64, bool) {
	n := sizeOf(v, e.left, 1)
	return n, n > e.left
}

// sizeOf is the size of a value in units: 1 for a scalar, 1 + its length
// for a string, 1 + its members' for an array or object (each member
// weighs member more, and its key its bytes). It stops counting once past
// limit.
func sizeOf(v any, limit, member int64) int64 {
	switch x := v.(type) {
	case nil, bool, float64, int, int64, time.Time, time.Duration:
		return 1
	case string:
		return 1 + int64(len(x))
	case []any:
		n := int64(1)
		for _, e := range x {
			if n > limit {
				return n
			}
			n += sizeOf(e, limit-n, member)
		}
		return n
	case map[string]any:
		n := int64(1)
		for k, e := range x {
			if n > limit {
				return n
			}
			n += member + int64(len(k)) + sizeOf(e, limit-n, member)
		}
		return n
	case []string:
		n := int64(1)
		for _, s := range x {
			n += 1 + int64(len(s))
		}
		return n
	case []int:
		return 1 + int64(len(x))
	case []float64:
		return 1 + int64(len(x))
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		n := int64(1)
		for i := 0; i < rv.Len() && n <= limit; i++ {
			n += sizeOf(rv.Index(i).Interface(), limit-n, member)
		}
		return n
	case reflect.Map:
		n := int64(1)
		it := rv.MapRange()
		for n <= limit && it.Next() {
			n += member + sizeOf(it.Key().Interface(), limit-n, member) + sizeOf(it.Value().Interface(), limit-n, member)
		}
		return n
	}
	return 1
}

// readCost is what reading v from the state cost: objects are materialized
// member by member on every read; a leaf (a string, an array) is shared.
func readCost(v any, limit int64) int64 {
	m, ok := v.(map[string]any)
	if !ok {
		return 1
	}
	n := int64(1)
	for _, c := range m {
		if n > limit {
			return n
		}
		n += memberCost + readCost(c, limit-n)
	}
	return n
}

// lenOf is the number of elements a loop over v visits.
func lenOf(v any) int64 {
	switch x := v.(type) {
	case []any:
		return int64(len(x))
	case nil:
		return 0
	}
	rv := reflect.ValueOf(v)
	if k := rv.Kind(); k == reflect.Slice || k == reflect.Array {
		return int64(rv.Len())
	}
	return 0
}

// describe names a value for a message: "a 100000-byte string".
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("a %d-byte string", len(x))
	case map[string]any:
		return fmt.Sprintf("an object of %d members", len(x))
	case nil:
		return "null"
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		return fmt.Sprintf("an array of %d elements", rv.Len())
	case reflect.Map:
		return fmt.Sprintf("an object of %d members", rv.Len())
	}
	return "a " + intents.JSONType(v)[2:]
}

func mul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if hi, lo := bits.Mul64(uint64(a), uint64(b)); hi != 0 || lo > maxCost {
		return maxCost
	}
	return a * b
}

func log2(n int64) int64 {
	if n < 2 {
		return 1
	}
	return int64(bits.Len64(uint64(n)))
}

// Sizer is a Reader that can tell, before building a value, how many
// object members reading it materializes. The evaluator then refuses a
// read too large for what is left of the budget without making it, and
// charges a read at least that much.
type Sizer interface {
	// GetWithin is Get, and the number of members of the objects at and
	// under path that it builds. When there are more than limit it builds
	// nothing and returns (nil, true, a count past limit).
	GetWithin(path string, limit int64) (v any, ok bool, members int64)
}

// readRef is the constant argument of a state read: its path, and the
// slot its value is memoized in for an evaluation.
type readRef struct {
	path string
	slot int
}

// has reports whether ref's path exists in r. A Sizer tells without
// building the value: has("board") on a huge board costs a unit.
func (e *env) has(r Reader, ref *readRef) bool {
	if m := &e.memo[ref.slot]; m.set {
		return m.ok
	}
	if s, ok := r.(Sizer); ok {
		e.spend(1, false, func() string { return "has()" })
		_, ok, _ := s.GetWithin(ref.path, 0)
		return ok
	}
	_, ok := e.read(r, "state.", ref)
	return ok
}

// read returns the value at ref's path in r, materialized once per
// evaluation: a path read again is served from its slot.
func (e *env) read(r Reader, prefix string, ref *readRef) (any, bool) {
	m := &e.memo[ref.slot]
	if m.set {
		return m.v, m.ok
	}
	if r == nil {
		*m = memoEntry{set: true}
		return nil, false
	}
	var v any
	var ok bool
	var built int64 // what the read builds, when r can tell
	if s, isSizer := r.(Sizer); isSizer {
		fit := (e.left - 1) / (memberCost + 1) // the most members that fit
		var members int64
		v, ok, members = s.GetWithin(ref.path, fit)
		built = 1 + mul(members, memberCost+1)
		e.spend(built, true, func() string {
			return fmt.Sprintf("reading %s%s (an object of more than %d members)", prefix, ref.path, fit)
		})
		e.left += built // charged below, with what the value shows
	} else {
		v, ok = r.Get(ref.path)
	}
	*m = memoEntry{set: true, ok: ok, v: v}
	c := max(readCost(v, e.left), built)
	e.spend(c, c > e.left, func() string { return fmt.Sprintf("reading %s%s (%s)", prefix, ref.path, describe(v)) })
	return v, ok
}

// costFunctions are the expr functions of the cost patcher.
func costFunctions() []expr.Option {
	return []expr.Option{
		expr.Function(fnNow, func(a ...any) (any, error) { return a[0].(*env).now, nil },
			new(func(*env) time.Time)),
		expr.Function(fnDate, func(a ...any) (any, error) { return a[0].(*env).date(a[1:]) },
			new(func(*env, any) time.Time), new(func(*env, any, any) time.Time)),
		expr.Function(fnLoop, func(a ...any) (any, error) {
			e, k := a[0].(*env), int64(a[2].(int))
			n := lenOf(a[1])
			perItem, name := k>>1, "a loop"
			if k&1 == 1 {
				perItem += sortWeight * log2(n) // sortBy compares each element about log n times
				name = "sortBy"
			}
			cost := mul(n, perItem)
			e.spend(cost, false, func() string {
				return fmt.Sprintf("%s over %d elements at %d units each", name, n, perItem)
			})
			return a[1], nil
		}, new(func(*env, any, int) any)),
		expr.Function(fnKey, func(a ...any) (any, error) {
			e := a[0].(*env)
			n, over := e.sized(a[1])
			e.spend(n, over, func() string { return "a key of " + describe(a[1]) })
			return a[1], nil
		}, new(func(*env, any) any)),
		expr.Function(fnSize, func(a ...any) (any, error) {
			e, k := a[0].(*env), a[2].(int)
			e.chargeArgs(k&0xff, stepNames[k>>8], a[1:2])
			return a[1], nil
		}, new(func(*env, any, int) any)),
		expr.Function(fnPush, func(a ...any) (any, error) {
			e := a[0].(*env)
			e.stack = append(e.stack, a[1])
			return a[1], nil
		}, new(func(*env, any) any)),
		expr.Function(fnLast, func(a ...any) (any, error) {
			e := a[0].(*env)
			f := a[2].(int)
			n := f >> 8 & 0xf // how many arguments were pushed before this one
			args := append(e.stack[len(e.stack)-n:], a[1])
			e.chargeArgs(f&0xff, stepNames[f>>12], args)
			clear(e.stack[len(e.stack)-n:])
			e.stack = e.stack[:len(e.stack)-n]
			return a[1], nil
		}, new(func(*env, any, int) any)),
		expr.Function(fnMatchK, func(a ...any) (any, error) {
			e := a[0].(*env)
			if s, ok := a[1].(string); ok {
				k := int64(a[2].(int))
				e.spend(mul(int64(len(s))+1, k), false, func() string {
					return fmt.Sprintf("matches on a %d-byte string with a pattern of %d steps", len(s), k)
				})
			}
			return a[1], nil
		}, new(func(*env, any, int) any)),
		expr.Function(fnMatches, func(a ...any) (any, error) { return a[0].(*env).matches(a[1], a[2]) },
			new(func(*env, any, any) bool)),
		expr.Function(fnBinary, func(a ...any) (any, error) { return a[0].(*env).binary(a[3].(int), a[1], a[2]), nil },
			new(func(*env, any, any, int) any)),
		expr.Function(fnMapOrder, func(a ...any) (any, error) { return a[0].(*env).mapOrder(a[2].(int), a[1]) },
			new(func(*env, any, int) any)),
	}
}

// chargeArgs charges the arguments of step name (a builtin) by formula f.
func (e *env) chargeArgs(f int, name string, args []any) {
	var total int64
	atLeast := false
	for _, v := range args {
		n, over := e.sized(v)
		total += n
		atLeast = atLeast || over
	}
	first := args[0]
	n := lenOf(first)
	var cost int64
	switch f {
	case costLinear:
		cost = total
	case costJSON:
		cost = mul(total, jsonWeight)
	case costCase:
		cost = mul(total, caseWeight)
	case costReflect:
		cost = mul(total, reflectWeight)
	case costSplit:
		cost = mul(total, 2)
	case costSort, costKeys:
		if f == costKeys {
			if rv := reflect.ValueOf(first); rv.Kind() == reflect.Map {
				n = int64(rv.Len())
			}
		}
		cost = total + mul(mul(n, log2(n)), sortWeight)
	case costQuadratic:
		cost = total + mul(n, total)
	case costRepeat:
		s, _ := first.(string)
		cost = total + mul(int64(len(s)), toCount(args[1]))
	case costReplace:
		s, _ := first.(string)
		old, _ := args[1].(string)
		repl, _ := args[2].(string)
		// Counting the matches is itself linear in s: charge that first.
		e.spend(total, atLeast, func() string { return name + " on " + describe(first) })
		total, atLeast = 0, false
		count := int64(utf8.RuneCountInString(s) + 1)
		if old != "" {
			count = int64(strings.Count(s, old))
		}
		if len(args) == 4 {
			if lim := toCount(args[3]); runtime.ToInt(args[3]) >= 0 && lim < count {
				count = lim
			}
		}
		cost = mul(count, int64(len(repl)))
	case costJoin:
		sep, _ := args[1].(string)
		cost = total + mul(n, int64(len(sep)))
	}
	e.spend(cost, atLeast, func() string { return name + " on " + describe(first) })
}

// stepNames name the steps CoagentSize and CoagentLast charge for, in
// messages: the patcher encodes the index of one above the formula.
var stepNames = []string{"a dynamic key", "a range", "a method call", "keys", "values", "toPairs",
	"string", "toJSON", "fromJSON", "toBase64", "fromBase64", "upper", "lower", "trim", "trimPrefix", "trimSuffix",
	"indexOf", "lastIndexOf", "hasPrefix", "hasSuffix", "int", "float", "duration", "fromPairs", "reverse",
	"concat", "flatten", "max", "min", "mean", "median", "sort", "uniq", "split", "splitAfter", "get",
	"repeat", "replace", "join", "date", "take"}

// stepIndex is the index of a name in stepNames.
func stepIndex(name string) int {
	if i := slices.Index(stepNames, name); i >= 0 {
		return i
	}
	panic("cond: no step named " + name) // a builtin added to the patcher but not here
}

// toCount is a count argument (repeat's, replace's) as a cost factor: 0
// for anything that is not a non-negative number, which the builtin then
// refuses itself.
func toCount(v any) int64 {
	switch x := v.(type) {
	case int:
		return max(int64(x), 0)
	case float64:
		if x > 0 && x < maxCost {
			return int64(x)
		}
		if x >= maxCost {
			return maxCost
		}
	}
	return 0
}

// dateLayouts are those expr's date() tries on a date without a layout.
var dateLayouts = []string{"2006-01-02", "15:04:05", "2006-01-02 15:04:05", time.RFC3339, time.RFC822, time.RFC850, time.RFC1123}

// date is expr's date(s) and date(s, layout), parsing in UTC: a zone
// abbreviation in the date is not looked up in the host's zone.
func (e *env) date(args []any) (any, error) {
	var n int64
	for _, a := range args {
		n += sizeOf(a, e.left-n, 1)
	}
	e.spend(mul(n, int64(len(dateLayouts))), false, func() string { return "date on " + describe(args[0]) })
	s := args[0].(string)
	if len(args) == 2 {
		return time.ParseInLocation(args[1].(string), s, time.UTC)
	}
	for _, layout := range dateLayouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return nil, fmt.Errorf("invalid date %s", s)
}

// The operators of CoagentBinary.
const (
	opEq = iota
	opNe
	opLt
	opGt
	opLe
	opGe
	opIn
	opContains
	opStartsWith
	opEndsWith
	opAdd
	opRange
)

var opName = [...]string{opEq: "==", opNe: "!=", opLt: "<", opGt: ">", opLe: "<=", opGe: ">=", opIn: "in",
	opContains: "contains", opStartsWith: "startsWith", opEndsWith: "endsWith", opAdd: "+", opRange: ".."}

// binary charges the operands' sizes, then does what expr's VM does for op.
func (e *env) binary(op int, a, b any) any {
	if op == opRange {
		// a is the range itself, built under expr's memory budget.
		n := lenOf(a)
		e.spend(n, false, func() string { return fmt.Sprintf("a range of %d numbers", n) })
		return a
	}
	// Objects compare through reflect.DeepEqual, member by member.
	member := int64(compareMember)
	if op == opAdd || op >= opContains {
		member = 1
	}
	na := sizeOf(a, e.left, member)
	var nb int64
	switch kind := reflect.ValueOf(b).Kind(); {
	case op == opIn && kind == reflect.Map:
		nb = 1 // a key looked up, not a collection searched
	case op == opIn && (kind == reflect.Slice || kind == reflect.Array):
		per := int64(inElement)
		if k := reflect.ValueOf(a).Kind(); k == reflect.Map || k == reflect.Slice || k == reflect.Array {
			per += inDeepEqual
		}
		nb = sizeOf(b, e.left-na, member) + mul(lenOf(b), per)
	default:
		nb = sizeOf(b, e.left-na, member)
	}
	e.spend(na+nb, na+nb > e.left, func() string {
		return fmt.Sprintf("%s on %s and %s", opName[op], describe(a), describe(b))
	})
	switch op {
	case opEq:
		return runtime.Equal(a, b)
	case opNe:
		return !runtime.Equal(a, b)
	case opLt:
		return runtime.Less(a, b)
	case opGt:
		return runtime.More(a, b)
	case opLe:
		return runtime.LessOrEqual(a, b)
	case opGe:
		return runtime.MoreOrEqual(a, b)
	case opIn:
		return runtime.In(a, b)
	case opAdd:
		return runtime.Add(a, b)
	}
	if runtime.IsNil(a) || runtime.IsNil(b) {
		return false
	}
	switch op {
	case opContains:
		return strings.Contains(a.(string), b.(string))
	case opStartsWith:
		return strings.HasPrefix(a.(string), b.(string))
	default:
		return strings.HasSuffix(a.(string), b.(string))
	}
}

// matches is expr's `matches` with a pattern known only at run time:
// parsing is charged by the pattern's length, compiling by the size of the
// program it compiles to, and matching, before the pattern is compiled, by
// text length × that size (what RE2's worst case is linear in). A pattern seen
// before by this evaluator is not compiled again, but charged the same, so
// what an intent spends never depends on what was decided before it.
func (e *env) matches(a, b any) (bool, error) {
	if runtime.IsNil(a) || runtime.IsNil(b) {
		return false, nil
	}
	pattern := b.(string)
	var text int64
	switch s := a.(type) {
	case string:
		text = int64(len(s))
	default:
		text = int64(len(a.([]byte))) // fails as expr's VM does, before the pattern is compiled
	}
	e.spend(int64(len(pattern))+1, false, func() string { return fmt.Sprintf("parsing a %d-byte pattern", len(pattern)) })
	c, ok := e.regexps[pattern]
	if !ok {
		k, err := progSize(pattern)
		if err != nil {
			return false, err
		}
		c = compiledPattern{k: k}
	}
	e.spend(mul(c.k, patternWeight), false, func() string {
		return fmt.Sprintf("compiling a %d-byte pattern", len(pattern))
	})
	e.spend(mul(text+1, c.k), false, func() string {
		return fmt.Sprintf("matches on a %d-byte string with a %d-byte pattern", text, len(pattern))
	})
	if c.re == nil {
		re, err := regexp.Compile(pattern)
		if err != nil {
			return false, err
		}
		c.re = re
		if e.regexps == nil || len(e.regexps) >= 64 {
			e.regexps = map[string]compiledPattern{}
		}
		e.regexps[pattern] = c
	}
	if s, ok := a.(string); ok {
		return c.re.MatchString(s), nil
	}
	return c.re.Match(a.([]byte)), nil
}

// compiledPattern is a pattern matched before, and the bound on its
// program's size it was charged by.
type compiledPattern struct {
	re *regexp.Regexp
	k  int64
}

// progSize bounds the size of the program pattern compiles to, from its
// syntax tree and without compiling it: repetitions multiply.
func progSize(pattern string) (int64, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, err
	}
	return 2 + regexpSize(re), nil
}

func regexpSize(re *syntax.Regexp) int64 {
	switch re.Op {
	case syntax.OpLiteral:
		return int64(len(re.Rune)) + 1
	case syntax.OpRepeat:
		n := re.Max
		if n < 0 {
			n = re.Min + 1
		}
		return mul(int64(n)+1, regexpSize(re.Sub[0])+1)
	}
	n := int64(1)
	for _, s := range re.Sub {
		n = min(n+regexpSize(s)+1, maxCost)
	}
	return n
}

// mapOrder is keys(m), values(m) or toPairs(m) with the members in the
// order of their keys. expr's builtins return them in Go's map order, which
// changes from run to run: a condition on keys(m)[0] would not decide the
// same twice.
func (e *env) mapOrder(which int, m any) (any, error) {
	e.chargeArgs(costKeys, stepNames[3+which], []any{m})
	rv := reflect.ValueOf(m)
	if rv.Kind() != reflect.Map {
		verb := [...]string{"cannot get keys from %s", "cannot get values from %s", "cannot transform %s to pairs"}
		return nil, fmt.Errorf(verb[which], rv.Kind())
	}
	keys := rv.MapKeys()
	sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i].Interface(), keys[j].Interface()) })
	switch which {
	case 0:
		out := make([]any, len(keys))
		for i, k := range keys {
			out[i] = k.Interface()
		}
		return out, nil
	case 1:
		out := make([]any, len(keys))
		for i, k := range keys {
			out[i] = rv.MapIndex(k).Interface()
		}
		return out, nil
	}
	out := make([][2]any, len(keys))
	for i, k := range keys {
		out[i] = [2]any{k.Interface(), rv.MapIndex(k).Interface()}
	}
	return out, nil
}

// keyLess orders map keys: strings and numbers by value, and keys of
// different kinds (a groupBy can make them) by the name of their kind.
func keyLess(a, b any) bool {
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return x < y
		}
	case float64:
		if y, ok := b.(float64); ok {
			return x < y || (math.IsNaN(x) && !math.IsNaN(y))
		}
	case int:
		if y, ok := b.(int); ok {
			return x < y
		}
	case bool:
		if y, ok := b.(bool); ok {
			return !x && y
		}
	}
	ta, tb := fmt.Sprintf("%T", a), fmt.Sprintf("%T", b)
	if ta != tb {
		return ta < tb
	}
	return fmt.Sprint(a) < fmt.Sprint(b)
}
