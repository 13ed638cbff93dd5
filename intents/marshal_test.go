package intents

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// strs are strings that take each of appendJSONString's ways: plain,
// escaped by encoding/json (quotes, controls, HTML characters, U+2028),
// and not UTF-8.
var strs = []string{"", "a", "agent-17", "01JDX5Q2ZC7M8Y3N4P5Q6R7S8T", `say "hi"`, `back\slash`, "tab\there", "nl\n",
	"<b>&amp;</b>", "é", "line\u2028sep", "\x00", "\xff\xfe", "\x7f", "日本"}

var raws = []json.RawMessage{nil, {}, json.RawMessage(`42`), json.RawMessage(`"x"`), json.RawMessage(`{"a":[1,2]}`),
	json.RawMessage(`{ "a" : 1 }`), json.RawMessage(`"<&>"`), json.RawMessage("\"\u2028\""), json.RawMessage(`null`),
	json.RawMessage(`{"a":`), json.RawMessage(`nope`), json.RawMessage("\"\xff\"")}

var times = []time.Time{
	time.Date(2026, 12, 4, 18, 41, 6, 123456789, time.UTC),
	time.Date(2026, 12, 4, 18, 41, 6, 0, time.UTC),
	time.Date(2026, 12, 4, 18, 41, 6, 500000000, time.FixedZone("", 5*3600+30*60)),
	time.Date(2026, 12, 4, 18, 41, 6, 1, time.FixedZone("", -7*3600)),
	time.Date(2026, 12, 4, 18, 41, 6, 1, time.FixedZone("", 24*3600)), // an offset RFC 3339 cannot write
	time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),                      // a year it cannot write
	time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
	{},
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func randStrings(r *rand.Rand) []string {
	switch r.IntN(3) {
	case 0:
		return nil
	case 1:
		return []string{}
	}
	ss := make([]string, 1+r.IntN(3))
	for i := range ss {
		ss[i] = pick(r, strs)
	}
	return ss
}

func randDecision(r *rand.Rand) *Decision {
	d := &Decision{Intent: pick(r, strs), Agent: pick(r, strs), Outcome: Outcome(pick(r, strs)), Reason: Reason(pick(r, strs)),
		Detail: pick(r, strs), Txn: pick(r, strs), Fence: r.Uint64N(3) * 1e18, Rev: r.Uint64N(3) * 12345,
		Retryable: r.IntN(2) == 0, Duplicate: r.IntN(2) == 0, MergedWith: randStrings(r)}
	if r.IntN(3) == 0 {
		t := pick(r, times)
		d.LeaseExpires = &t
	}
	if r.IntN(2) == 0 {
		d.Conflicts = []Conflict{}
		for range r.IntN(3) {
			d.Conflicts = append(d.Conflicts, Conflict{Path: pick(r, strs), Kind: ConflictKind(pick(r, strs)), WithTxn: pick(r, strs), WithAgent: pick(r, strs)})
		}
	}
	if r.IntN(2) == 0 {
		d.Versions = map[string]uint64{}
		for range r.IntN(4) {
			d.Versions[pick(r, strs)] = r.Uint64()
		}
	}
	if r.IntN(3) == 0 {
		for range 1 + r.IntN(2) {
			d.Warnings = append(d.Warnings, Warning{Rule: pick(r, strs), WouldBe: pick(r, strs), Detail: pick(r, strs)})
		}
	}
	return d
}

func randEvent(r *rand.Rand) *Event {
	ev := &Event{Seq: r.Uint64(), Time: pick(r, times), Type: EventType(pick(r, strs)), Agent: pick(r, strs), Intent: pick(r, strs),
		Txn: pick(r, strs), Trace: pick(r, strs)}
	if r.IntN(4) > 0 {
		ev.ID = ulid.ULID{byte(r.Uint32()), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, byte(r.Uint32())}
	}
	switch r.IntN(5) {
	case 0:
		ev.Decision = randDecision(r)
	case 1:
		ev.Notice = &Notice{} // handed to encoding/json whole
	case 2:
		ev.Change = &Change{}
	default:
		c := &Change{MergedWith: randStrings(r), Redacted: randStrings(r), Writes: []Applied{}}
		for range r.IntN(4) {
			c.Writes = append(c.Writes, Applied{Path: pick(r, strs), Op: Op(pick(r, strs)), Value: pick(r, raws),
				OldVersion: r.Uint64N(5), NewVersion: r.Uint64()})
		}
		ev.Change = c
	}
	return ev
}

func randIntent(r *rand.Rand) *Intent {
	in := &Intent{ID: pick(r, strs), Agent: pick(r, strs), Kind: Kind(pick(r, strs)), Txn: pick(r, strs), Fence: r.Uint64N(3) * 1e18,
		Action: pick(r, strs), Pre: randStrings(r), Post: randStrings(r), Priority: r.Int64N(3) - 1, LeaseMS: r.Int64N(2) * 30000,
		OnConflict: OnConflict(pick(r, strs)), WaitMS: r.Int64N(2) * 1500, Meta: pick(r, raws)}
	if r.IntN(2) == 0 {
		in.Reads = []Read{}
		for range r.IntN(3) {
			rd := Read{Path: pick(r, strs)}
			if r.IntN(2) == 0 {
				v := r.Uint64N(3) * 1e18
				rd.Version = &v
			}
			in.Reads = append(in.Reads, rd)
		}
	}
	if r.IntN(3) > 0 {
		in.Writes = []Write{}
		for range r.IntN(3) {
			in.Writes = append(in.Writes, Write{Path: pick(r, strs), Op: Op(pick(r, strs)), Value: pick(r, raws)})
		}
	}
	return in
}

// same fails t unless the hand-written encoding is encoding/json's: the
// same bytes, or an error where it errs.
func same(t *testing.T, v any, got []byte, err error) {
	t.Helper()
	want, werr := json.Marshal(v)
	if (err != nil) != (werr != nil) {
		t.Fatalf("error %v, encoding/json's %v, for %#v", err, werr, v)
	}
	if werr == nil && !bytes.Equal(got, want) {
		t.Fatalf("encoded\n%s\nencoding/json\n%s", got, want)
	}
}

func TestMarshalMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		d := randDecision(r)
		got, err := AppendDecisionJSON(nil, d)
		same(t, d, got, err)
		ev := randEvent(r)
		got, err = AppendEventJSON([]byte("kept"), ev)
		if err == nil {
			if !bytes.HasPrefix(got, []byte("kept")) {
				t.Fatalf("%q does not keep what it appends to", got)
			}
			got = got[len("kept"):]
		}
		same(t, ev, got, err)
		in := randIntent(r)
		got, err = AppendIntentJSON(nil, in)
		same(t, in, got, err)
	}
	got, err := AppendIntentJSON(nil, nil)
	same(t, (*Intent)(nil), got, err)
	got, err = AppendDecisionJSON(nil, nil)
	same(t, (*Decision)(nil), got, err)
	got, err = AppendEventJSON(nil, nil)
	same(t, (*Event)(nil), got, err)
}

func FuzzMarshalMatchesJSON(f *testing.F) {
	f.Add("agent-1", "applied", []byte(`{"a":1}`), int64(1764873666123456789), 0, uint64(7))
	f.Add("<x>", "\u2028", []byte(` [ 1 ] `), int64(-62167219200000000), 3600, uint64(0))
	f.Fuzz(func(t *testing.T, s, outcome string, value []byte, nanos int64, zone int, n uint64) {
		tm := time.Unix(0, nanos).In(time.FixedZone("", zone%(48*3600)))
		d := &Decision{Intent: s, Agent: s, Outcome: Outcome(outcome), Detail: outcome, Rev: n, LeaseExpires: &tm,
			Versions: map[string]uint64{s: n, outcome: n + 1}, Conflicts: []Conflict{{Path: s, Kind: ConflictKind(outcome)}}}
		got, err := AppendDecisionJSON(nil, d)
		same(t, d, got, err)
		ev := &Event{Seq: n, Time: tm, Type: EventType(outcome), Agent: s,
			Change: &Change{Writes: []Applied{{Path: s, Op: Op(outcome), Value: value, NewVersion: n}}, Redacted: []string{s}}}
		got, err = AppendEventJSON(nil, ev)
		same(t, ev, got, err)
		in := &Intent{ID: s, Agent: outcome, Kind: Kind(s), Action: outcome, Reads: []Read{{Path: s, Version: &n}},
			Writes: []Write{{Path: s, Op: Op(outcome), Value: value}}, Pre: []string{outcome}, Priority: nanos, Meta: value}
		got, err = AppendIntentJSON(nil, in)
		same(t, in, got, err)
	})
}

// benchEncoders runs each encoding of the same value as a sub-benchmark:
// the hand-written one and encoding/json's.
func benchEncoders(b *testing.B, hand, std func() ([]byte, error)) {
	for _, enc := range []struct {
		name string
		fn   func() ([]byte, error)
	}{{"hand", hand}, {"encoding-json", std}} {
		b.Run(enc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := enc.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMarshalDecision(b *testing.B) {
	d := &Decision{Intent: "01JDX5Q2ZC7M8Y3N4P5Q6R7S8T", Agent: "agent-17", Outcome: "applied", Rev: 123456}
	benchEncoders(b, func() ([]byte, error) { return AppendDecisionJSON(nil, d) }, func() ([]byte, error) { return json.Marshal(d) })
}

func BenchmarkMarshalIntent(b *testing.B) {
	in := &Intent{ID: "01JDX5Q2ZC7M8Y3N4P5Q6R7S8T", Agent: "agent-17", Kind: KindApply,
		Reads:  []Read{{Path: "bench.agent-17.n"}},
		Writes: []Write{{Path: "bench.agent-17.n", Op: OpSet, Value: json.RawMessage(`42`)}}}
	benchEncoders(b, func() ([]byte, error) { return AppendIntentJSON(nil, in) }, func() ([]byte, error) { return json.Marshal(in) })
}

func BenchmarkMarshalChange(b *testing.B) {
	ev := &Event{Seq: 123456, ID: ulid.Make(), Time: time.Now().UTC(), Type: EventChange, Agent: "agent-17", Intent: "01JDX5Q2ZC7M8Y3N4P5Q6R7S8T",
		Change: &Change{Writes: []Applied{{Path: "bench.agent-17.n", Op: OpSet, Value: json.RawMessage(`42`), OldVersion: 41, NewVersion: 42}}}}
	// The feeder appends each change to a buffer it keeps.
	var buf []byte
	benchEncoders(b, func() (data []byte, err error) {
		data, err = AppendEventJSON(buf[:0], ev)
		buf = data
		return data, err
	}, func() ([]byte, error) { return json.Marshal(ev) })
}

// TestMarshalCoversEveryField sets each field of the types encoded by hand,
// one at a time, and compares with encoding/json: a field added to one of
// them and not to its encoder fails here.
func TestMarshalCoversEveryField(t *testing.T) {
	sample := func(typ reflect.Type) reflect.Value {
		v := reflect.New(typ).Elem()
		switch {
		case typ == reflect.TypeFor[json.RawMessage]():
			v.SetBytes([]byte(`1`))
		case typ == reflect.TypeFor[time.Time]():
			v.Set(reflect.ValueOf(times[0]))
		case typ == reflect.TypeFor[ulid.ULID]():
			v.Set(reflect.ValueOf(ulid.ULID{1}))
		case typ.Kind() == reflect.String:
			v.SetString("x")
		case typ.Kind() == reflect.Uint64 || typ.Kind() == reflect.Uint32 || typ.Kind() == reflect.Uint:
			v.SetUint(7)
		case typ.Kind() == reflect.Int64 || typ.Kind() == reflect.Int:
			v.SetInt(7)
		case typ.Kind() == reflect.Bool:
			v.SetBool(true)
		case typ.Kind() == reflect.Pointer:
			v.Set(reflect.New(typ.Elem()))
		case typ.Kind() == reflect.Slice:
			v.Set(reflect.MakeSlice(typ, 1, 1))
		case typ.Kind() == reflect.Map:
			v.Set(reflect.MakeMap(typ))
			v.SetMapIndex(reflect.ValueOf("k").Convert(typ.Key()), reflect.New(typ.Elem()).Elem())
		default:
			t.Fatalf("no sample of a %v: add one", typ)
		}
		return v
	}
	encode := func(v any) ([]byte, error) {
		switch v := v.(type) {
		case *Decision:
			return AppendDecisionJSON(nil, v)
		case *Intent:
			return AppendIntentJSON(nil, v)
		}
		return AppendEventJSON(nil, v.(*Event))
	}
	// Each type, and how a value of it is encoded by hand: alone, or
	// inside an event.
	for _, c := range []struct {
		typ  reflect.Type
		wrap func(v reflect.Value) any
	}{
		{reflect.TypeFor[Decision](), func(v reflect.Value) any { return v.Interface() }},
		{reflect.TypeFor[Event](), func(v reflect.Value) any { return v.Interface() }},
		{reflect.TypeFor[Change](), func(v reflect.Value) any { return &Event{Change: v.Interface().(*Change)} }},
		{reflect.TypeFor[Applied](), func(v reflect.Value) any {
			return &Event{Change: &Change{Writes: []Applied{*v.Interface().(*Applied)}}}
		}},
		{reflect.TypeFor[Conflict](), func(v reflect.Value) any {
			return &Decision{Conflicts: []Conflict{*v.Interface().(*Conflict)}}
		}},
		{reflect.TypeFor[Warning](), func(v reflect.Value) any {
			return &Decision{Warnings: []Warning{*v.Interface().(*Warning)}}
		}},
		{reflect.TypeFor[Intent](), func(v reflect.Value) any { return v.Interface() }},
		{reflect.TypeFor[Read](), func(v reflect.Value) any { return &Intent{Reads: []Read{*v.Interface().(*Read)}} }},
		{reflect.TypeFor[Write](), func(v reflect.Value) any { return &Intent{Writes: []Write{*v.Interface().(*Write)}} }},
	} {
		for i := range c.typ.NumField() {
			v := reflect.New(c.typ)
			v.Elem().Field(i).Set(sample(c.typ.Field(i).Type))
			x := c.wrap(v)
			got, err := encode(x)
			same(t, x, got, err)
		}
	}
}
