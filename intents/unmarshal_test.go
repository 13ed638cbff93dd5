package intents

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// sameDecoding fails t unless UnmarshalDecision decodes data as
// go-json-experiment does with the same options: the same decision, or an
// error where it errs. It reports whether the hand-written reader took it.
func sameDecoding(t testing.TB, data []byte) (byHand bool) {
	t.Helper()
	var want Decision
	werr := jsonv2.Unmarshal(data, &want, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	var got Decision
	err := UnmarshalDecision(data, &got)
	if (err != nil) != (werr != nil) {
		t.Fatalf("%q: error %v, go-json-experiment's %v", data, err, werr)
	}
	if werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decoded\n%#v\ngo-json-experiment\n%#v", data, got, want)
	}
	var r plainReader
	var d Decision
	return r.decision(data, &d)
}

func TestUnmarshalDecisionMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 10000 {
		d := randDecision(r)
		if i%2 == 0 {
			plainDecision(r, d)
		}
		data, err := AppendDecisionJSON(nil, d)
		if err != nil {
			continue // a time RFC 3339 cannot write: no coordinator sends it
		}
		var spaced bytes.Buffer
		if err := json.Indent(&spaced, data, " ", "\t"); err != nil {
			t.Fatal(err)
		}
		for _, doc := range [][]byte{data, spaced.Bytes()} {
			if byHand := sameDecoding(t, doc); i%2 == 0 && !byHand {
				t.Fatalf("%s was not read by hand", doc)
			}
		}
		// encoding/json reads what go-json-experiment reads.
		var got, want Decision
		if err := UnmarshalDecision(data, &got); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		g, _ := json.Marshal(&got)
		w, _ := json.Marshal(&want)
		if !bytes.Equal(g, w) {
			t.Fatalf("decoded\n%s\nencoding/json decoded\n%s", g, w)
		}
	}
}

// plainDecision makes d one the hand-written reader takes: no string that
// encoding/json writes with a \u escape, and no lease or warnings.
func plainDecision(r *rand.Rand, d *Decision) {
	plain := []string{"", "a", "agent-17", "01JDX5Q2ZC7M8Y3N4P5Q6R7S8T", "/boards/b/k", "x\x7f", `say "hi"`, `back\slash`, "tab\there", "é", "日本"}
	for _, s := range []*string{&d.Intent, &d.Agent, (*string)(&d.Outcome), (*string)(&d.Reason), &d.Detail, &d.Txn} {
		*s = pick(r, plain)
	}
	for i := range d.MergedWith {
		d.MergedWith[i] = pick(r, plain)
	}
	for i := range d.Conflicts {
		c := &d.Conflicts[i]
		c.Path, c.Kind, c.WithTxn, c.WithAgent = pick(r, plain), ConflictKind(pick(r, plain)), pick(r, plain), pick(r, plain)
	}
	if d.Versions != nil {
		vs := map[string]uint64{}
		for _, v := range d.Versions {
			vs[pick(r, plain)] = v
		}
		d.Versions = vs
	}
	d.LeaseExpires, d.Warnings = nil, nil
}

// TestUnmarshalDecisionByHand checks that the decisions an agent gets for
// the usual outcomes take the hand-written reader, and that what it must
// not take (or must take exactly) decodes as go-json-experiment decodes it.
func TestUnmarshalDecisionByHand(t *testing.T) {
	usual := []*Decision{
		{Intent: "01JDX5Q2ZC7M8Y3N4P5Q6R7S8T", Agent: "agent-17", Outcome: OutcomeApplied, Txn: "t1", Versions: map[string]uint64{"/boards/b/k": 7, "/x": 18446744073709551615}, Rev: 123456},
		{Intent: "i", Agent: "a", Outcome: OutcomeRejected, Reason: "precondition_failed", Detail: `precondition 0 (state.s == "draft") is false`, Retryable: true},
		{Intent: "i", Agent: "a", Outcome: OutcomeApplied, MergedWith: []string{"i0", "i1"}, Versions: map[string]uint64{}, Duplicate: true, Fence: 3},
		{Intent: "i", Agent: "a", Outcome: "queued", Conflicts: []Conflict{{Path: "/p", Kind: "write_write", WithTxn: "t0", WithAgent: "b"}, {Path: "/q"}}, MergedWith: []string{}},
		{},
	}
	for _, d := range usual {
		data, err := AppendDecisionJSON(nil, d)
		if err != nil {
			t.Fatal(err)
		}
		if !sameDecoding(t, data) {
			t.Errorf("%s was not read by hand", data)
		}
		var got Decision
		if err := UnmarshalDecision(data, &got); err != nil {
			t.Fatal(err)
		}
		if again, _ := AppendDecisionJSON(nil, &got); !bytes.Equal(again, data) {
			t.Errorf("%s decoded as %s", data, again)
		}
	}
	for _, doc := range []string{
		`{"intent":"a","intent":"b","outcome":"applied"}`, "{\"detail\":\"\xff\"}", `{"rev":1,"extra":[1]}`, `null`, ` {} `, `{}x`,
		`{"rev":01}`, `{"rev":1e3}`, `{"rev":1.0}`, `{"rev":-1}`, `{"rev":18446744073709551616}`, `{"rev":18446744073709551615}`,
		`{"rev":null}`, `{"intent":null}`, `{"intent":"a\"b"}`, `{"intent":"a\u0041"}`, "{\"intent\":\"tab\there\"}", `{"intent":"é"}`,
		`{"versions":{"a":1,"a":2}}`, `{"versions":{"a":1},"versions":{"b":2}}`, `{"versions":{}}`, `{"versions":[]}`, `{"versions":{"a":true}}`,
		`{"merged_with":[]}`, `{"merged_with":["a",]}`, `{"merged_with":[,"a"]}`, `{"merged_with":["a" "b"]}`, `{"merged_with":null}`,
		`{"conflicts":[{"path":"p","path":"q"}]}`, `{"conflicts":[{}]}`, `{"conflicts":[{"path":"p","rule":"x"}]}`,
		`{"retryable":tru}`, `{"retryable":true,}`, `{"retryable":false}`, `{"retryable":1}`, `{"Rev":1}`, `{"lease_expires":"2026-12-04T18:41:06Z"}`,
		`{"warnings":[{"rule":"r","would_be":"rejected"}]}`, `{"intent" : "a" , "rev" : 2 }`, `{"intent":"a"`, `{"intent":}`, `{`, ``, `[]`, `"x"`,
	} {
		sameDecoding(t, []byte(doc))
	}
}

// TestUnmarshalDecisionResets checks that a decision decoded into one not
// empty leaves nothing of what it held, by hand or not.
func TestUnmarshalDecisionResets(t *testing.T) {
	for _, doc := range []string{`{"intent":"i","versions":{"b":2}}`, `{"intent":"i\u0041","versions":{"b":2}}`} {
		got := Decision{Agent: "old", Versions: map[string]uint64{"a": 1}, MergedWith: []string{"m"}}
		if err := UnmarshalDecision([]byte(doc), &got); err != nil {
			t.Fatal(err)
		}
		var want Decision
		if err := UnmarshalDecision([]byte(doc), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s decoded into a used decision %#v, into a new one %#v", doc, got, want)
		}
	}
}

// BenchmarkUnmarshalDecision decodes the decision an agent gets for an
// applied write: by hand, by go-json-experiment (what UnmarshalDecision
// was) and by encoding/json.
func BenchmarkUnmarshalDecision(b *testing.B) {
	data, _ := AppendDecisionJSON(nil, &Decision{Intent: "01JDX5Q2ZC7M8Y3N4P5Q6R7S8T", Agent: "agent-17", Outcome: OutcomeApplied,
		Txn: "01JDX5Q2ZC7M8Y3N4P5Q6R7S8T", Versions: map[string]uint64{"/boards/bench/k17": 4312}, Rev: 123456})
	for _, dec := range []struct {
		name string
		fn   func(*Decision) error
	}{
		{"hand", func(d *Decision) error { return UnmarshalDecision(data, d) }},
		{"v2", func(d *Decision) error {
			return jsonv2.Unmarshal(data, d, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
		}},
		{"encoding-json", func(d *Decision) error { return json.Unmarshal(data, d) }},
	} {
		b.Run(dec.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var d Decision
				if err := dec.fn(&d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func FuzzUnmarshalDecision(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		if data, err := AppendDecisionJSON(nil, randDecision(r)); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"intent":"i","versions":{"a":1},"conflicts":[{"path":"p","kind":"k"}],"merged_with":["m"],"retryable":true}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		sameDecoding(t, data)
	})
}
