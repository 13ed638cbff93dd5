package intents_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/coagent/coagent/intents"
)

const id = "01JD0000000000000000000000"

func TestDecodeValid(t *testing.T) {
	doc := `{"id":"` + id + `","agent":"writer-1","kind":"apply","action":"write_intro",
		"reads":[{"path":"report.status","version":3}],
		"writes":[{"path":"report.sections.intro","op":"set","value":{"text":"hi"}},
		          {"path":"report.stats.words","op":"incr"},
		          {"path":"report.log","op":"append","value":null},
		          {"path":"report.draft","op":"delete"}],
		"pre":["state.report.status == \"draft\""],"priority":2,"on_conflict":"wait","wait_ms":500,
		"meta":{"trace":"x"}}`
	in, err := intents.Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if in.Agent != "writer-1" || in.Kind != intents.KindApply || len(in.Writes) != 4 || *in.Reads[0].Version != 3 {
		t.Fatalf("decoded %+v", in)
	}
	if string(in.Writes[2].Value) != "null" || in.Writes[1].Value != nil {
		t.Fatalf("value presence lost: %q %q", in.Writes[2].Value, in.Writes[1].Value)
	}
	if in.Policy() != intents.OnConflictWait || in.Wait() != 500 {
		t.Fatalf("policy %s wait %d", in.Policy(), in.Wait())
	}
}

// Every bad intent is a *ValidationError naming the field (and the value
// where there is one).
func TestDecodeInvalid(t *testing.T) {
	w := func(s string) string {
		return `{"id":"` + id + `","agent":"a","kind":"apply","writes":[` + s + `]}`
	}
	cases := []struct {
		name, doc, field, value string
	}{
		{"not json", `{"id":`, "", ""},
		{"array", `[]`, "", ""},
		{"trailing", w(`{"path":"a.b","op":"set","value":1}`) + `{}`, "", ""},
		{"unknown field", `{"id":"` + id + `","agent":"a","kind":"apply","bogus":1}`, "bogus", ""},
		{"wrong type", `{"id":"` + id + `","agent":"a","kind":"apply","priority":"high"}`, "priority", ""},
		{"missing id", `{"agent":"a","kind":"apply"}`, "id", ""},
		{"bad ulid", `{"id":"nope","agent":"a","kind":"apply"}`, "id", `"nope"`},
		{"missing agent", `{"id":"` + id + `","kind":"apply"}`, "agent", ""},
		{"bad agent", `{"id":"` + id + `","agent":"a.b","kind":"apply"}`, "agent", `"a.b"`},
		{"missing kind", `{"id":"` + id + `","agent":"a"}`, "kind", ""},
		{"bad kind", `{"id":"` + id + `","agent":"a","kind":"upsert"}`, "kind", `"upsert"`},
		{"empty writes", `{"id":"` + id + `","agent":"a","kind":"apply","writes":[]}`, "writes", ""},
		{"bad path", w(`{"path":"a..b","op":"set","value":1}`), "writes[0].path", `"a..b"`},
		{"bad segment", w(`{"path":"a.b c","op":"set","value":1}`), "writes[0].path", `"a.b c"`},
		{"too deep", w(`{"path":"` + strings.Repeat("x.", 32) + `x","op":"set","value":1}`), "writes[0].path", ""},
		{"bad op", w(`{"path":"a","op":"upsert","value":1}`), "writes[0].op", `"upsert"`},
		{"incr string", w(`{"path":"a","op":"incr","value":"x"}`), "writes[0].value", `"\"x\""`},
		{"merge scalar", w(`{"path":"a","op":"merge","value":3}`), "writes[0].value", `"3"`},
		{"merge bad key", w(`{"path":"a","op":"merge","value":{"a b":1}}`), "writes[0].value", ""},
		{"set bad key", w(`{"path":"a","op":"set","value":{"x":{"y.z":1}}}`), "writes[0].value", ""},
		{"delete value", w(`{"path":"a","op":"delete","value":1}`), "writes[0].value", `"1"`},
		{"set no value", w(`{"path":"a","op":"set"}`), "writes[0].value", ""},
		{"overlap", w(`{"path":"a.b","op":"set","value":1},{"path":"a","op":"delete"}`), "writes[1].path", `"a"`},
		{"duplicate", w(`{"path":"a","op":"incr"},{"path":"a","op":"incr"}`), "writes[1].path", `"a"`},
		{"bad read", `{"id":"` + id + `","agent":"a","kind":"apply","reads":[{"path":""}],"writes":[{"path":"a","op":"delete"}]}`, "reads[0].path", `""`},
		{"negative version", `{"id":"` + id + `","agent":"a","kind":"apply","reads":[{"path":"a","version":-1}]}`, "reads.version", ""},
		{"commit no txn", `{"id":"` + id + `","agent":"a","kind":"commit","fence":1}`, "txn", ""},
		{"commit no fence", `{"id":"` + id + `","agent":"a","kind":"commit","txn":"t"}`, "fence", ""},
		{"apply with txn", `{"id":"` + id + `","agent":"a","kind":"apply","txn":"t"}`, "txn", `"t"`},
		{"abort writes", `{"id":"` + id + `","agent":"a","kind":"abort","txn":"t","fence":1,"writes":[{"path":"a","op":"delete"}]}`, "writes", ""},
		{"lease on apply", w(`{"path":"a","op":"delete"}`)[:len(w(`{"path":"a","op":"delete"}`))-1] + `,"lease_ms":5}`, "lease_ms", "5"},
		{"negative wait", w(`{"path":"a","op":"delete"}`)[:len(w(`{"path":"a","op":"delete"}`))-1] + `,"wait_ms":-1}`, "wait_ms", "-1"},
		{"bad policy", w(`{"path":"a","op":"delete"}`)[:len(w(`{"path":"a","op":"delete"}`))-1] + `,"on_conflict":"retry"}`, "on_conflict", `"retry"`},
		{"empty pre", w(`{"path":"a","op":"delete"}`)[:len(w(`{"path":"a","op":"delete"}`))-1] + `,"pre":[" "]}`, "pre[0]", `" "`},
		{"meta array", w(`{"path":"a","op":"delete"}`)[:len(w(`{"path":"a","op":"delete"}`))-1] + `,"meta":[1]}`, "meta", ""},
		{"too large", `{"id":"` + strings.Repeat(" ", intents.MaxIntentSize) + `"}`, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := intents.Decode([]byte(c.doc))
			var ve *intents.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Decode = %v, want a *ValidationError", err)
			}
			if ve.Field != c.field {
				t.Errorf("field %q, want %q (%v)", ve.Field, c.field, err)
			}
			if c.value != "" && ve.Value != c.value {
				t.Errorf("value %s, want %s (%v)", ve.Value, c.value, err)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Errorf("message %q does not name %q", err, c.field)
			}
		})
	}
}

func TestPaths(t *testing.T) {
	for _, c := range []struct {
		a, b     string
		overlaps bool
	}{
		{"a.b", "a.b.c", true}, {"a.b.c", "a.b", true}, {"a.b", "a.b", true},
		{"a.b", "a.bc", false}, {"a.bc", "a.b", false}, {"a", "b", false}, {"ab", "a", false},
	} {
		if got := intents.Overlaps(c.a, c.b); got != c.overlaps {
			t.Errorf("Overlaps(%q, %q) = %v", c.a, c.b, got)
		}
	}
	for _, c := range []struct{ p, doc, board string }{
		{"report", "report", "report"}, {"report.s", "report.s", "report"}, {"report.s.intro.x", "report.s", "report"},
	} {
		if got := intents.Document(c.p); got != c.doc {
			t.Errorf("Document(%q) = %q", c.p, got)
		}
		if got := intents.Board(c.p); got != c.board {
			t.Errorf("Board(%q) = %q", c.p, got)
		}
	}
	for p, ok := range map[string]bool{
		"a": true, "a.b-c_d.9": true, "ünïcødé.名前": true, strings.Repeat("x", 128): true,
		strings.Repeat("x", 129): false, "": false, "a.": false, ".a": false, "a b": false, "a.*": false,
		"a.>": false, strings.Repeat("x.", 31) + "x": true, strings.Repeat("x.", 32) + "x": false,
	} {
		if got := intents.CheckPath(p) == nil; got != ok {
			t.Errorf("CheckPath(%q) ok = %v, want %v", p, got, ok)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"id":"` + id + `","agent":"a","kind":"apply","writes":[{"path":"a.b","op":"set","value":{"c":1}}]}`))
	f.Add([]byte(`{"id":"` + id + `","agent":"a","kind":"commit","txn":"t","fence":1}`))
	f.Add([]byte(`{"id":"` + id + `","agent":"a","kind":"propose","writes":[{"path":"a","op":"merge"}],"pre":["has(\"a\")"]}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := intents.Decode(data)
		if err != nil {
			var ve *intents.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %v is not a *ValidationError", err)
			}
			return
		}
		// What decodes must validate again unchanged.
		if err := in.Validate(); err != nil {
			t.Fatalf("decoded intent fails Validate: %v", err)
		}
	})
}
