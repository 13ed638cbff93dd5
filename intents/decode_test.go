package intents_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

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
		{"negative version", `{"id":"` + id + `","agent":"a","kind":"apply","reads":[{"path":"a","version":-1}]}`, "reads[0].version", "-1"},
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
		// encoding/json, which the rest of the system reads values and
		// logged intents with, reads the document the same way: no name
		// it would fold or take twice got through.
		var loose intents.Intent
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&loose); err != nil {
			t.Fatalf("encoding/json refuses what Decode accepts: %v", err)
		}
		if !reflect.DeepEqual(&loose, in) {
			t.Fatalf("encoding/json reads %+v, Decode %+v", &loose, in)
		}
		// Every value is one the state can hold: it decodes, and all its
		// numbers are finite.
		for i, w := range in.Writes {
			if len(w.Value) == 0 {
				continue
			}
			var v any
			if err := json.Unmarshal(w.Value, &v); err != nil {
				t.Fatalf("writes[%d].value %s does not decode: %v", i, w.Value, err)
			}
		}
		// It encodes, and decodes again to itself.
		out, err := json.Marshal(in)
		if err != nil {
			t.Fatalf("does not encode: %v", err)
		}
		again, err := intents.Decode(out)
		if err != nil {
			t.Fatalf("the encoded intent %s does not decode: %v", out, err)
		}
		if out2, _ := json.Marshal(again); !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the intent:\n%s\n%s", out, out2)
		}
	})
}

// The decoder is as strict as the schema (issue 13, item 10): a member name
// given twice, a name in another case, invalid UTF-8 and a body of null are
// each refused with the exact reason, naming the field where there is one.
func TestDecodeStrict(t *testing.T) {
	head := `{"id":"` + id + `","agent":"w1","kind":"apply",`
	w := func(s string) string { return head + `"writes":[` + s + `]}` }
	for _, c := range []struct{ name, doc, want string }{
		// The case: the last path would win and write secret.x.
		{"duplicate path", w(`{"path":"d.a","op":"set","value":1,"path":"secret.x"}`),
			"intent field writes[0].path: duplicate member name"},
		{"duplicate id", `{"id":"` + id + `","id":"01JD0000000000000000000001","agent":"w1","kind":"apply","writes":[{"path":"d.a","op":"delete"}]}`,
			"intent field id: duplicate member name"},
		{"duplicate agent", `{"id":"` + id + `","agent":"w1","agent":"bob","kind":"apply","writes":[{"path":"d.a","op":"delete"}]}`,
			"intent field agent: duplicate member name"},
		{"duplicate writes", head + `"writes":[{"path":"d.a","op":"delete"}],"writes":[{"path":"secret.x","op":"delete"}]}`,
			"intent field writes: duplicate member name"},
		{"duplicate in value", w(`{"path":"d.a","op":"set","value":{"a":1,"a":2}}`),
			"intent field writes[0].value: duplicate member name at /a"},
		{"duplicate deep in value", w(`{"path":"d.a","op":"append","value":{"x":[0,{"a":1,"a":2}]}}`),
			"intent field writes[0].value: duplicate member name at /x/1/a"},
		{"duplicate in merge", w(`{"path":"d.a","op":"merge","value":{"k":null,"k":1}}`),
			"intent field writes[0].value: duplicate member name at /k"},
		{"duplicate in meta", head + `"writes":[{"path":"d.a","op":"delete"}],"meta":{"t":1,"t":2}}`,
			"intent field meta: duplicate member name at /t"},
		// The case: "Agent" matched agent.
		{"other case", `{"id":"` + id + `","Agent":"bob","kind":"apply","writes":[{"path":"d.a","op":"delete"}]}`,
			"intent field Agent: unknown field"},
		{"other case in write", w(`{"Path":"d.a","op":"delete"}`), "intent field writes[0].Path: unknown field"},
		{"escaped name", `{"a/b~":1}`, "intent field a/b~: unknown field"},
		{"invalid UTF-8", head + "\"action\":\"x\xffy\",\"writes\":[{\"path\":\"d.a\",\"op\":\"delete\"}]}",
			"intent field action: invalid UTF-8 at byte %d"},
		{"invalid UTF-8 in value", w("{\"path\":\"d.a\",\"op\":\"set\",\"value\":\"\xc3\"}"),
			"intent field writes[0].value: invalid UTF-8 at byte %d"},
		{"invalid UTF-8 in a value's key", w("{\"path\":\"d.a\",\"op\":\"set\",\"value\":{\"\xe2\x82\":1}}"),
			"intent field writes[0].value: invalid UTF-8 at byte %d"},
		{"lone surrogate", head + `"action":"\ud800","writes":[{"path":"d.a","op":"delete"}]}`,
			"intent field action: \\ud800 at byte %d escapes half of a UTF-16 surrogate pair, not a character"},
		{"lone low surrogate", head + `"action":"\udc00x","writes":[{"path":"d.a","op":"delete"}]}`,
			"intent field action: \\udc00 at byte %d escapes half of a UTF-16 surrogate pair, not a character"},
		{"surrogate pair", head + `"action":"\ud83d\ude00","writes":[]}`, "intent field writes: empty; apply must write at least one path"},
		// The case: null was "id: missing".
		{"null", `null`, "intent: a JSON null, not an object"},
		{"null with space", " null\n", "intent: a JSON null, not an object"},
		{"string", `"x"`, "intent: a JSON string, not an object"},
		{"array", `[]`, "intent: a JSON array, not an object"},
		{"trailing", w(`{"path":"d.a","op":"delete"}`) + ` {}`, "intent: trailing data after the object"},
		{"truncated", head, "intent: not JSON: unexpected end of input"},
		{"fence as float", `{"id":"` + id + `","agent":"w1","kind":"commit","txn":"t","fence":3.0}`,
			"intent field fence = 3.0: not an integer from 0 to 18446744073709551615"},
		{"priority too big", head + `"priority":9223372036854775808}`,
			"intent field priority = 9223372036854775808: not an integer from -9223372036854775808 to 9223372036854775807"},
		{"wrong type in write", w(`{"path":1,"op":"delete"}`), "intent field writes[0].path: a JSON number where string is wanted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := intents.Decode([]byte(c.doc))
			var ve *intents.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Decode = %v, want a *ValidationError", err)
			}
			// %d stands for the offset of the first byte that is not valid
			// UTF-8, or of the first backslash.
			want := c.want
			if strings.Contains(want, "%d") {
				at := strings.IndexFunc(c.doc, func(r rune) bool { return r == utf8.RuneError })
				if strings.Contains(want, "surrogate") {
					at = strings.IndexByte(c.doc, '\\')
				}
				want = fmt.Sprintf(want, at)
			}
			if err.Error() != want {
				t.Errorf("Decode error\n got %s\nwant %s", err, want)
			}
		})
	}
}

// Every number in a write's value, at any depth and for every op, must fit
// a finite float64 (issue 13, item 1): the state holds float64s, and one it
// cannot hold would stop the engine folding its own event.
func TestDecodeNumberRange(t *testing.T) {
	doc := func(writes string) string {
		return `{"id":"01JD0000000000000000000999","agent":"w1","kind":"apply","writes":[` + writes + `]}`
	}
	huge := "1" + strings.Repeat("0", 99999) // the 100,000-digit number
	for _, c := range []struct{ name, writes, want string }{
		// The poison message.
		{"set 1e999", `{"path":"n.a","op":"set","value":1e999}`,
			"intent field writes[0].value = 1e999: the number is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
		{"set -1e999", `{"path":"n.a","op":"set","value":-1E+999}`,
			"intent field writes[0].value = -1E+999: the number is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
		{"set 100000 digits", `{"path":"n.a","op":"set","value":` + huge + `}`,
			"intent field writes[0].value = 10000000000000000000000000000000… (100000 characters): the number is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
		{"309 nines", `{"path":"n.a","op":"set","value":` + strings.Repeat("9", 309) + `}`,
			"intent field writes[0].value = 99999999999999999999999999999999… (309 characters): the number is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
		{"incr", `{"path":"n.a","op":"incr","value":1e400}`,
			"intent field writes[0].value = 1e400: the number is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
		{"in an object", `{"path":"n.a","op":"set","value":{"b":{"c":1e999}}}`,
			"intent field writes[0].value = 1e999: the number at /b/c is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
		{"in an array", `{"path":"n.a","op":"set","value":[1,[2,1e999]]}`,
			"intent field writes[0].value = 1e999: the number at /1/1 is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
		{"append", `{"path":"n.a","op":"append","value":{"x":[` + huge + `]}}`,
			"intent field writes[0].value = 10000000000000000000000000000000… (100000 characters): the number at /x/0 is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
		{"merge", `{"path":"n.a","op":"merge","value":{"k":1e999}}`,
			"intent field writes[0].value = 1e999: the number at /k is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
		{"second write", `{"path":"n.a","op":"set","value":1},{"path":"n.b","op":"set","value":{"x":1e309}}`,
			"intent field writes[1].value = 1e309: the number at /x is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := intents.Decode([]byte(doc(c.writes)))
			var ve *intents.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Decode = %v, want a *ValidationError", err)
			}
			if err.Error() != c.want {
				t.Errorf("Decode error\n got %s\nwant %s", err, c.want)
			}
		})
	}
	// At the edges of the range, and below it: a number that rounds to zero
	// is the state's 0, as encoding/json reads it.
	for _, v := range []string{`1.7976931348623157e308`, `-1.7976931348623157e308`, `1e-400`, `-1e-400`,
		`1` + strings.Repeat("0", 308), strings.Repeat("9", 308), `0.` + strings.Repeat("0", 400) + `1`} {
		for _, op := range []string{"set", "incr", "append"} {
			if _, err := intents.Decode([]byte(doc(`{"path":"n.a","op":"` + op + `","value":` + v + `}`))); err != nil {
				t.Errorf("%s %.40s: %v", op, v, err)
			}
		}
		if _, err := intents.Decode([]byte(doc(`{"path":"n.a","op":"merge","value":{"k":[` + v + `]}}`))); err != nil {
			t.Errorf("merge [%.40s]: %v", v, err)
		}
	}
}

// Validate, which the engine runs on intents that were never decoded
// (an engine.Input's Intent, an arbiter's replacement), holds values to the same rules
// as Decode: one strict JSON value whose numbers are finite.
func TestValidateValues(t *testing.T) {
	for _, c := range []struct {
		name  string
		op    intents.Op
		value string
		want  string // "" when valid
	}{
		{"1e999", intents.OpSet, `1e999`, "intent field writes[0].value = 1e999: the number is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
		{"nested", intents.OpAppend, `[{"a":-1e999}]`, "intent field writes[0].value = -1e999: the number at /0/a is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
		{"incr", intents.OpIncr, `1e999`, "intent field writes[0].value = 1e999: the number is beyond ±1.7976931348623157e+308, the range of a 64-bit float"},
		{"incr Inf", intents.OpIncr, `Inf`, `intent field writes[0].value = "Inf": incr needs a number`},
		{"incr hex", intents.OpIncr, `0x10`, `intent field writes[0].value = "0x10": incr needs a number`},
		{"duplicate", intents.OpSet, `{"a":1,"a":2}`, `intent field writes[0].value = "{\"a\":1,\"a\":2}": duplicate member name at /a`},
		{"invalid UTF-8", intents.OpSet, "\"\xff\"", `intent field writes[0].value = "\"\xff\"": invalid UTF-8 at byte 1 of the value`},
		{"truncated", intents.OpSet, `tru`, `intent field writes[0].value = "tru": not JSON: unexpected end of input`},
		{"not JSON", intents.OpSet, `nul!`, `intent field writes[0].value = "nul!": not JSON: invalid character '!' in literal null (expecting 'l') at byte 3 of the value`},
		{"lone surrogate", intents.OpSet, `["\udfff"]`, `intent field writes[0].value = "[\"\\udfff\"]": \udfff at byte 2 of the value escapes half of a UTF-16 surrogate pair, not a character`},
		{"two values", intents.OpSet, `1 2`, `intent field writes[0].value = "1 2": trailing data after the value`},
		{"blank", intents.OpAppend, ` `, `intent field writes[0].value = " ": not JSON: no value`},
		{"bad key", intents.OpMerge, `{"a":{"b c":1}}`, `intent field writes[0].value = "{\"a\":{\"b c\":1}}": key "b c" is not a legal path segment`},
		{"escaped key", intents.OpSet, `{"\u0061\u002eb":1}`, `intent field writes[0].value = "{\"\\u0061\\u002eb\":1}": key "a.b" is not a legal path segment`},
		{"escaped good key", intents.OpSet, `{"\u00e9":1}`, ""},
		{"keys in arrays are not paths", intents.OpSet, `[{"a b":1}]`, ""},
		{"append keys are not paths", intents.OpAppend, `{"a b":1}`, ""},
		{"spaces", intents.OpSet, " {\"a\" : [ 1 , \"x\" ] }\n", ""},
		{"plain", intents.OpSet, `"text"`, ""},
		{"escaped string", intents.OpSet, `"a\"b\u00e9"`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := &intents.Intent{ID: id, Agent: "w1", Kind: intents.KindApply,
				Writes: []intents.Write{{Path: "n.a", Op: c.op, Value: json.RawMessage(c.value)}}}
			err := in.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case c.want == "":
			case err == nil:
				t.Fatalf("Validate = nil, want %s", c.want)
			case err.Error() != c.want:
				t.Errorf("Validate error\n got %s\nwant %s", err, c.want)
			}
		})
	}
	// The other fields an intent built in Go could hold that Decode refuses.
	for field, in := range map[string]*intents.Intent{
		"meta":   {Meta: json.RawMessage(`{"a":1,"a":2}`)},
		"action": {Action: "caf\xff"},
		"pre[1]": {Pre: []string{"true", "\"\xff\" == \"\""}},
	} {
		in.ID, in.Agent, in.Kind = id, "w1", intents.KindApply
		in.Writes = []intents.Write{{Path: "n.a", Op: intents.OpDelete}}
		if err := in.Validate(); err == nil || !strings.HasPrefix(err.Error(), "intent field "+field+" ") {
			t.Errorf("Validate = %v, want an error naming %s", err, field)
		}
	}
	in := &intents.Intent{ID: id, Agent: "w1", Kind: intents.KindCommit, Txn: "t\xff", Fence: 1}
	if err := in.Validate(); err == nil || !strings.HasPrefix(err.Error(), "intent field txn ") {
		t.Errorf("Validate = %v, want an error naming txn", err)
	}
}

// A value shortened for a message is cut between characters.
func TestQuoteCutsBetweenCharacters(t *testing.T) {
	_, err := intents.Decode([]byte(`{"id":"` + id + `","agent":"a","kind":"apply","action":"x` + strings.Repeat("é", 200) + `"}`))
	var ve *intents.ValidationError
	if !errors.As(err, &ve) || ve.Field != "action" {
		t.Fatalf("Decode = %v, want an error naming action", err)
	}
	if strings.Contains(ve.Value, `\x`) || !strings.HasSuffix(ve.Value, `…"`) {
		t.Errorf("value %s is cut inside a character", ve.Value)
	}
}

// A resolution is decoded as strictly as an intent, its replacement
// included, and every error names the field.
func TestDecodeResolution(t *testing.T) {
	repl := func(s string) string {
		return `{"escalation":"` + id + `","arbiter":"judge","rationale":"r","replacement":{"id":"01JD0000000000000000000001","agent":"w1","kind":"apply","writes":[` + s + `]}}`
	}
	res, err := intents.DecodeResolution([]byte(repl(`{"path":"d.a","op":"set","value":{"k":1}}`)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Arbiter != "judge" || res.Replacement == nil || string(res.Replacement.Writes[0].Value) != `{"k":1}` {
		t.Fatalf("decoded %+v", res)
	}
	for _, c := range []struct{ name, doc, want string }{
		{"duplicate in replacement", repl(`{"path":"d.a","op":"set","value":1,"path":"secret.x"}`),
			"resolution field replacement.writes[0].path: duplicate member name"},
		{"duplicate in replacement value", repl(`{"path":"d.a","op":"set","value":{"k":1,"k":2}}`),
			"resolution field replacement.writes[0].value: duplicate member name at /k"},
		{"other case", `{"escalation":"` + id + `","Arbiter":"judge","rationale":"r","losers":["` + id + `"]}`,
			"resolution field Arbiter: unknown field"},
		{"unknown in replacement", repl(`{"path":"d.a","op":"set","value":1,"Value":2}`),
			"resolution field replacement.writes[0].Value: unknown field"},
		{"duplicate winners", `{"escalation":"` + id + `","arbiter":"judge","rationale":"r","winners":[],"winners":["` + id + `"]}`,
			"resolution field winners: duplicate member name"},
		{"invalid UTF-8", "{\"escalation\":\"" + id + "\",\"arbiter\":\"judge\",\"rationale\":\"\xff\"}",
			"resolution field rationale: invalid UTF-8 at byte 74"},
		{"null", `null`, "resolution: a JSON null, not an object"},
		{"trailing", `{} x`, "resolution: trailing data after the object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := intents.DecodeResolution([]byte(c.doc))
			if err == nil || err.Error() != c.want {
				t.Errorf("DecodeResolution error\n got %v\nwant %s", err, c.want)
			}
		})
	}
}

// TestDecodeAll: every problem of an intent, in the order Validate meets
// them (its error is the first); a field whose problem makes the checks
// that depend on it meaningless is reported once; what cannot be decoded
// is one problem.
func TestDecodeAll(t *testing.T) {
	data := []byte(`{"agent":"w 1","kind":"apply","reads":[{"path":"a..b"}],
		"writes":[{"path":"x..y","op":"set","value":1},{"path":"z","op":"incr","value":"two"},{"path":"q","op":"frob"}],
		"pre":[" "],"wait_ms":-1}`)
	in, problems := intents.DecodeAll(data)
	var fields []string
	for _, p := range problems {
		fields = append(fields, p.Field)
	}
	want := []string{"id", "agent", "reads[0].path", "writes[0].path", "writes[1].value", "writes[2].op", "pre[0]", "wait_ms"}
	if in == nil || !slices.Equal(fields, want) {
		t.Fatalf("DecodeAll: fields %q, want %q (%v)", fields, want, problems)
	}
	if _, err := intents.Decode(data); err == nil || err.Error() != problems[0].Error() {
		t.Fatalf("Decode = %v, want the first problem %v", err, problems[0])
	}
	// An unknown kind: the checks of kind (txn, writes) are not reported.
	_, problems = intents.DecodeAll([]byte(`{"id":"01JD0000000000000000000000","agent":"a","kind":"frob","txn":"t"}`))
	if len(problems) != 1 || problems[0].Field != "kind" {
		t.Fatalf("DecodeAll of an unknown kind: %v", problems)
	}
	in, problems = intents.DecodeAll([]byte(`{"id":"01JD0000000000000000000000","nope":1}`))
	if in != nil || len(problems) != 1 || problems[0].Field != "nope" {
		t.Fatalf("DecodeAll of an unknown field: %v %v", in, problems)
	}
	if _, problems := intents.DecodeAll([]byte(`{"id":"01JD0000000000000000000000","agent":"a","kind":"apply","writes":[{"path":"a","op":"delete"}]}`)); len(problems) != 0 {
		t.Fatalf("DecodeAll of a valid intent: %v", problems)
	}
}
