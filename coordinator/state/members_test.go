package state_test

import (
	"reflect"
	"testing"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/coordinator/state"
	"github.com/coagent/coagent/intents"
)

// The tree and its views are what conditions read. That is checked here
// rather than in the package, so that state, a pure data structure, does
// not link the expression engine.
var (
	_ cond.Reader = (*state.Tree)(nil)
	_ cond.Sizer  = (*state.Tree)(nil)
	_ cond.Reader = (*state.View)(nil)
	_ cond.Sizer  = (*state.View)(nil)
)

// GetWithin counts what a Get materializes before materializing it, so
// conditions can refuse a read too big for their budget without making it.
func TestGetWithin(t *testing.T) {
	tr := state.New()
	commit(t, tr, w("d", intents.OpSet, `{"a":{"b":1,"c":[1,2,{"x":1}]},"e":"s","f":{}}`))
	commit(t, tr, w("d.gone", intents.OpSet, `1`))
	commit(t, tr, w("d.gone", intents.OpDelete, ""))
	for path, want := range map[string]int64{"d": 5, "d.a": 2, "d.a.b": 0, "d.e": 0, "d.gone": 0, "nope": 0, "": 6} {
		v, ok, got := tr.GetWithin(path, 1000)
		wv, wok := tr.Get(path)
		if got != want || ok != wok || !reflect.DeepEqual(v, wv) {
			t.Errorf("GetWithin(%q) = %v, %v, %d; want %v, %v, %d", path, v, ok, got, wv, wok, want)
		}
	}
	if v, ok, got := tr.GetWithin("d", 1); v != nil || !ok || got < 2 || got > 5 {
		t.Errorf("GetWithin(d, limit 1) = %v, %v, %d; want nothing built and a count past 1", v, ok, got)
	}
	// A view counts what it reads from the tree: a change at or above the
	// path decides it alone (0); one below leaves the tree's count.
	plan, err := tr.Plan([]intents.Write{w("d.a", intents.OpSet, `{"z":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	v := tr.After(plan)
	for path, want := range map[string]int64{"d": 5, "d.a": 0, "d.a.z": 0, "d.f": 0} {
		got, ok, n := v.GetWithin(path, 1000)
		wv, wok := v.Get(path)
		if n != want || ok != wok || !reflect.DeepEqual(got, wv) {
			t.Errorf("view: GetWithin(%q) = %v, %v, %d; want %v, %v, %d", path, got, ok, n, wv, wok, want)
		}
	}
	if got, _, n := v.GetWithin("d", 2); got != nil || n <= 2 {
		t.Errorf("view: GetWithin(d, limit 2) = %v, %d; want nothing built", got, n)
	}
}

// A view decodes each change's value once and shares it between reads.
func TestViewDecodesOnce(t *testing.T) {
	tr := state.New()
	plan, err := tr.Plan([]intents.Write{w("big", intents.OpSet, `{"a":{"x":1},"b":{"y":2}}`)})
	if err != nil {
		t.Fatal(err)
	}
	v := tr.After(plan)
	a1, _ := v.Get("big.a")
	a2, _ := v.Get("big.a")
	whole, _ := v.Get("big")
	if reflect.ValueOf(a1).UnsafePointer() != reflect.ValueOf(a2).UnsafePointer() ||
		reflect.ValueOf(whole.(map[string]any)["a"]).UnsafePointer() != reflect.ValueOf(a1).UnsafePointer() {
		t.Error("the change's value was decoded more than once")
	}
	if !reflect.DeepEqual(a1, map[string]any{"x": 1.0}) {
		t.Errorf("big.a = %v", a1)
	}
}
