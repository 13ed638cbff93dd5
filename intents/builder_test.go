package intents_test

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
)

func u64(v uint64) *uint64 { return &v }

// Each method lands in the field it names, and the result survives the wire:
// with ID and Agent set it marshals and decodes back to the same intent.
func TestBuilderFields(t *testing.T) {
	apply := func(ws ...intents.Write) intents.Intent {
		if ws == nil {
			ws = []intents.Write{{Path: "a", Op: intents.OpSet, Value: json.RawMessage(`1`)}}
		}
		return intents.Intent{Kind: intents.KindApply, Action: "act", Writes: ws}
	}
	with := func(in intents.Intent, f func(*intents.Intent)) intents.Intent { f(&in); return in }
	a := func() *intents.Builder { return intents.Apply("act") }
	set := func(b *intents.Builder) *intents.Builder { return b.Set("a", 1) }

	cases := []struct {
		name string
		b    *intents.Builder
		want intents.Intent
	}{
		{"apply", set(a()), apply()},
		{"propose", intents.Propose("act").Write("a", intents.OpSet),
			intents.Intent{Kind: intents.KindPropose, Action: "act",
				Writes: []intents.Write{{Path: "a", Op: intents.OpSet}}}},
		{"read", set(a().Read("x.y")), with(apply(), func(in *intents.Intent) {
			in.Reads = []intents.Read{{Path: "x.y"}}
		})},
		{"read at", set(a().ReadAt("x.y", 7).ReadAt("z", 0)), with(apply(), func(in *intents.Intent) {
			in.Reads = []intents.Read{{Path: "x.y", Version: u64(7)}, {Path: "z", Version: u64(0)}}
		})},
		{"set object", a().Set("r.s", map[string]any{"text": "hi", "n": 2}),
			apply(intents.Write{Path: "r.s", Op: intents.OpSet, Value: json.RawMessage(`{"n":2,"text":"hi"}`)})},
		{"set nil is null", a().Set("a", nil),
			apply(intents.Write{Path: "a", Op: intents.OpSet, Value: json.RawMessage(`null`)})},
		{"set raw json", a().Set("a", json.RawMessage(` [1, 2] `)),
			apply(intents.Write{Path: "a", Op: intents.OpSet, Value: json.RawMessage(`[1,2]`)})},
		{"delete", a().Delete("a"), apply(intents.Write{Path: "a", Op: intents.OpDelete})},
		{"merge struct", a().Merge("a", struct {
			X int    `json:"x"`
			Y string `json:"y,omitempty"`
		}{X: 1}), apply(intents.Write{Path: "a", Op: intents.OpMerge, Value: json.RawMessage(`{"x":1}`)})},
		{"append", a().Append("log", []string{"x"}),
			apply(intents.Write{Path: "log", Op: intents.OpAppend, Value: json.RawMessage(`["x"]`)})},
		{"incr", a().Incr("n", 2.5).Incr("m", -1),
			apply(intents.Write{Path: "n", Op: intents.OpIncr, Value: json.RawMessage(`2.5`)},
				intents.Write{Path: "m", Op: intents.OpIncr, Value: json.RawMessage(`-1`)})},
		{"apply incr without value", a().Write("n", intents.OpIncr),
			apply(intents.Write{Path: "n", Op: intents.OpIncr})},
		{"apply delete via write", a().Write("a", intents.OpDelete),
			apply(intents.Write{Path: "a", Op: intents.OpDelete})},
		{"propose lists every op without values", intents.Propose("p").
			Write("a", intents.OpSet).Write("b", intents.OpMerge).Write("c", intents.OpAppend).
			Write("d", intents.OpIncr).Write("e", intents.OpDelete),
			intents.Intent{Kind: intents.KindPropose, Action: "p", Writes: []intents.Write{
				{Path: "a", Op: intents.OpSet}, {Path: "b", Op: intents.OpMerge}, {Path: "c", Op: intents.OpAppend},
				{Path: "d", Op: intents.OpIncr}, {Path: "e", Op: intents.OpDelete}}}},
		{"propose may carry values", intents.Propose("p").Set("a", "v"),
			intents.Intent{Kind: intents.KindPropose, Action: "p",
				Writes: []intents.Write{{Path: "a", Op: intents.OpSet, Value: json.RawMessage(`"v"`)}}}},
		{"pre and post accumulate", set(a().Pre("x == 1", "y").Pre("z").Post("q")),
			with(apply(), func(in *intents.Intent) { in.Pre = []string{"x == 1", "y", "z"}; in.Post = []string{"q"} })},
		{"priority", set(a().Priority(-3)), with(apply(), func(in *intents.Intent) { in.Priority = -3 })},
		{"lease", intents.Propose("p").Write("a", intents.OpSet).Lease(1500 * time.Microsecond),
			intents.Intent{Kind: intents.KindPropose, Action: "p", LeaseMS: 2,
				Writes: []intents.Write{{Path: "a", Op: intents.OpSet}}}},
		{"fence", set(a().Fence(7)), with(apply(), func(in *intents.Intent) { in.Fence = 7 })},
		{"on conflict", set(a().OnConflict(intents.OnConflictReject)),
			with(apply(), func(in *intents.Intent) { in.OnConflict = intents.OnConflictReject })},
		{"wait", set(a().Wait(2 * time.Second)), with(apply(), func(in *intents.Intent) {
			in.OnConflict, in.WaitMS = intents.OnConflictWait, 2000
		})},
		{"wait zero is the default", set(a().Wait(0)), with(apply(), func(in *intents.Intent) {
			in.OnConflict = intents.OnConflictWait
		})},
		{"escalate", set(a().Escalate()), with(apply(), func(in *intents.Intent) { in.OnConflict = intents.OnConflictEscalate })},
		{"last policy wins", set(a().Escalate().OnConflict(intents.OnConflictWait)),
			with(apply(), func(in *intents.Intent) { in.OnConflict = intents.OnConflictWait })},
		{"meta sorted, last value wins", set(a().Meta("trace", "t1").Meta("reason", map[string]int{"n": 1}).Meta("trace", "t2")),
			with(apply(), func(in *intents.Intent) { in.Meta = json.RawMessage(`{"reason":{"n":1},"trace":"t2"}`) })},
		{"no action", intents.Apply("").Set("a", 1), with(apply(), func(in *intents.Intent) { in.Action = "" })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.b.Build()
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if !reflect.DeepEqual(*got, c.want) {
				t.Fatalf("built\n%s\nwant\n%s", show(t, got), show(t, &c.want))
			}
			roundTrip(t, got)
		})
	}
}

// roundTrip checks that in, once the SDK has filled ID and Agent, decodes
// from its wire form to an equal intent.
func roundTrip(t *testing.T, in *intents.Intent) {
	t.Helper()
	sent := *in
	sent.ID, sent.Agent = id, "writer-1"
	data, err := json.Marshal(&sent)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	got, err := intents.Decode(data)
	if err != nil {
		t.Fatalf("Decode(%s): %v", data, err)
	}
	if !reflect.DeepEqual(*got, sent) {
		t.Fatalf("round trip\n%s\nwant\n%s", show(t, got), show(t, &sent))
	}
}

func show(t *testing.T, in *intents.Intent) string {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("boom") }

type failing struct{}

func (failing) MarshalJSON() ([]byte, error) { return nil, errors.New("no encoding") }

// Every problem is a *ValidationError naming the field, just as decoding the
// same intent would give; values that cannot be encoded fail Build instead
// of panicking.
func TestBuilderInvalid(t *testing.T) {
	a := func() *intents.Builder { return intents.Apply("act") }
	cases := []struct {
		name, field, reason string // reason: a substring of Reason
		b                   *intents.Builder
	}{
		{"write path", "writes[0].path", "segment", a().Set("a..b", 1)},
		{"empty write path", "writes[1].path", "empty path", a().Set("a", 1).Delete("")},
		{"read path", "reads[0].path", "segment", a().Read("a b").Set("a", 1)},
		{"read-at path", "reads[1].path", "segment", a().Read("a").ReadAt("x.", 3).Set("a", 1)},
		{"channel value", "writes[2].value", "unsupported type", a().Set("a", 1).Set("b", 2).Set("c", make(chan int))},
		{"func value", "writes[0].value", "unsupported type", a().Append("a", func() {})},
		{"failing marshaler", "writes[0].value", "no encoding", a().Set("a", failing{})},
		{"panicking marshaler", "writes[0].value", "boom", a().Set("a", panicky{})},
		{"invalid raw json", "writes[0].value", "cannot be marshalled", a().Set("a", json.RawMessage(`{`))},
		{"NaN incr", "writes[0].value", "unsupported value", a().Incr("n", math.NaN())},
		{"infinite incr", "writes[1].value", "unsupported value", a().Delete("a").Incr("n", math.Inf(1))},
		{"merge number", "writes[0].value", "merge needs a JSON object", a().Merge("a", 5)},
		{"merge nil map", "writes[0].value", "merge needs a JSON object", a().Merge("a", map[string]int(nil))},
		{"merge array", "writes[0].value", "merge needs a JSON object", a().Merge("a", []int{1})},
		{"meta value", "meta.span", "unsupported type", a().Set("a", 1).Meta("span", make(chan int))},
		{"first recorded error wins", "writes[0].value", "unsupported type",
			a().Set("a", make(chan int)).Merge("b", 5).Meta("m", func() {})},
		{"recorded before validated", "writes[1].value", "unsupported type",
			a().Set("a..b", 1).Set("c", make(chan int))},
		{"apply set without value", "writes[0].value", "missing", a().Write("a", intents.OpSet)},
		{"apply merge without value", "writes[0].value", "missing", a().Write("a", intents.OpMerge)},
		{"apply append without value", "writes[0].value", "missing", a().Write("a", intents.OpAppend)},
		{"unknown op", "writes[0].op", "want one of", a().Write("a", intents.Op("upsert"))},
		{"empty op", "writes[0].op", "missing", intents.Propose("p").Write("a", "")},
		{"value key not a segment", "writes[0].value", "not a legal path segment", a().Set("a", map[string]int{"b c": 1})},
		{"overlapping writes", "writes[1].path", "overlaps", a().Set("a", 1).Delete("a.b")},
		{"no writes", "writes", "empty", a().Read("a")},
		{"propose without writes", "writes", "empty", intents.Propose("p")},
		{"empty pre", "pre[1]", "empty expression", a().Set("a", 1).Pre("true", " ")},
		{"empty post", "post[0]", "empty expression", a().Set("a", 1).Post("")},
		{"long action", "action", "longer", intents.Apply(strings.Repeat("x", intents.MaxActionLen+1)).Set("a", 1)},
		{"lease on apply", "lease_ms", "only propose", a().Set("a", 1).Lease(time.Second)},
		{"negative lease", "lease_ms", "negative", intents.Propose("p").Write("a", intents.OpSet).Lease(-time.Nanosecond)},
		{"fence on propose", "fence", "only commit", intents.Propose("p").Write("a", intents.OpSet).Fence(1)},
		{"negative wait", "wait_ms", "negative", a().Set("a", 1).Wait(-time.Second)},
		{"bad policy", "on_conflict", "want one of", a().Set("a", 1).OnConflict("retry")},
		{"zero builder", "kind", "missing", new(intents.Builder).Set("a", 1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in, err := c.b.Build()
			if err == nil {
				t.Fatalf("Build succeeded: %s", show(t, in))
			}
			if in != nil {
				t.Fatalf("Build returned an intent with error %v", err)
			}
			var ve *intents.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %T %v, want a *ValidationError", err, err)
			}
			if ve.Field != c.field || !strings.Contains(ve.Reason, c.reason) {
				t.Fatalf("error %q: field %q reason %q, want field %q reason containing %q",
					err, ve.Field, ve.Reason, c.field, c.reason)
			}
		})
	}
}

// Durations become whole milliseconds, rounded up: a positive duration must
// never turn into 0, which the wire reads as "use the default".
func TestBuilderDurations(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{time.Nanosecond, 1},
		{time.Millisecond, 1},
		{time.Millisecond + time.Nanosecond, 2},
		{1500 * time.Microsecond, 2},
		{30 * time.Second, 30000},
		{time.Duration(math.MaxInt64), math.MaxInt64/int64(time.Millisecond) + 1},
	}
	for _, c := range cases {
		p, err := intents.Propose("p").Write("a", intents.OpSet).Lease(c.d).Build()
		if err != nil {
			t.Fatalf("Lease(%v): %v", c.d, err)
		}
		w, err := intents.Apply("a").Set("a", 1).Wait(c.d).Build()
		if err != nil {
			t.Fatalf("Wait(%v): %v", c.d, err)
		}
		if p.LeaseMS != c.want || w.WaitMS != c.want {
			t.Errorf("%v: lease_ms %d wait_ms %d, want %d", c.d, p.LeaseMS, w.WaitMS, c.want)
		}
	}
}

// A builder is a template: intents it built share no memory with it or with
// each other, and values are captured when given.
func TestBuilderReuse(t *testing.T) {
	doc := map[string]any{"text": "v1"}
	b := intents.Apply("act").ReadAt("r", 1).Set("a", doc).Pre("p").Post("q").Meta("k", "v")
	doc["text"] = "changed after Set"

	first, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	want := show(t, first)
	if !strings.Contains(want, `"text":"v1"`) {
		t.Fatalf("value not captured at Set: %s", want)
	}
	again, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, again) {
		t.Fatalf("two builds differ:\n%s\n%s", want, show(t, again))
	}

	// Scribble over everything the first intent holds by reference.
	*first.Reads[0].Version = 99
	first.Reads[0].Path = "x"
	first.Writes[0].Path = "x"
	first.Writes[0].Value[2] = 'X'
	first.Pre[0], first.Post[0] = "x", "x"
	first.Meta[2] = 'X'
	_ = append(first.Writes[:1], intents.Write{Path: "x", Op: intents.OpDelete})

	if got := show(t, again); got != want {
		t.Fatalf("changing one build changed another:\n%s\nwant\n%s", got, want)
	}
	second, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if got := show(t, second); got != want {
		t.Fatalf("changing a build changed the builder:\n%s\nwant\n%s", got, want)
	}

	// Later calls extend the builder but not what it already built.
	third, err := b.Delete("b").Pre("p2").Build()
	if err != nil {
		t.Fatal(err)
	}
	if len(third.Writes) != 2 || len(third.Pre) != 2 {
		t.Fatalf("extended build: %s", show(t, third))
	}
	if got := show(t, second); got != want {
		t.Fatalf("extending the builder changed an earlier build:\n%s\nwant\n%s", got, want)
	}
}

// Build leaves ID and Agent to the SDK and does not reject their absence.
func TestBuilderLeavesIdentityEmpty(t *testing.T) {
	in, err := intents.Apply("act").Set("a", 1).Build()
	if err != nil {
		t.Fatal(err)
	}
	if in.ID != "" || in.Agent != "" {
		t.Fatalf("id %q agent %q, want both empty", in.ID, in.Agent)
	}
	if err := in.Validate(); err == nil {
		t.Fatal("an intent without id validated; the builder's placeholder leaked")
	}
}

func TestStateRef(t *testing.T) {
	for path, want := range map[string]string{
		"tasks.t1.owner": "state.tasks.t1.owner",
		"a-1.b_2.7":      `state["a-1"].b_2["7"]`,
	} {
		if got := intents.StateRef(path); got != want {
			t.Errorf("StateRef(%q) = %s, want %s", path, got, want)
		}
	}
}
