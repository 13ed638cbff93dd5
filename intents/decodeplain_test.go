package intents

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// sameIntent fails t unless the hand-written reader, where it takes data,
// reads what strictUnmarshal reads, and reports whether it took it.
func sameIntent(t testing.TB, data []byte) (byHand bool) {
	t.Helper()
	var got Intent
	var r plainReader
	if !r.intent(data, &got) {
		return false
	}
	var want Intent
	if err := strictUnmarshal(data, &want); err != nil || firstByte(data) != '{' {
		t.Fatalf("%q: read by hand, refused by strictUnmarshal: %v", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: read by hand\n%#v\nstrictUnmarshal\n%#v", data, got, want)
	}
	return true
}

// usualIntents are intents as clients write them: each is read by hand.
var usualIntents = []string{
	`{"id":"01JD0000000000000000000000","agent":"w","kind":"apply","writes":[{"path":"free.d1.f","op":"set","value":1}]}`,
	`{"id":"01JD0000000000000000000000","agent":"bench-17","kind":"apply","writes":[{"path":"k17","op":"incr","value":1}],"wait_ms":2000}`,
	`{"id":"i","agent":"a","kind":"apply","reads":[{"path":"k","version":3},{"path":"j"}],"writes":[{"path":"k","op":"set","value":{"n":1,"s":"x","l":[1,2.5e-3,-0,"y",true,false,null],"o":{}}}],"pre":["state.k == 3"],"on_conflict":"wait","priority":-5,"lease_ms":9223372036854775807}`,
	`{"id":"i","agent":"a","kind":"commit","txn":"t","fence":18446744073709551615,"action":"x","post":[],"pre":[],"reads":[],"writes":[],"meta":{"a":[{"b":null}]}}`,
	` { "id" : "i" , "writes" : [ { "path" : "p" , "op" : "delete" } ] } `,
	`{"writes":[{"path":"p","op":"set","value": { "a" : [1, 2] } }]}`,
	`{"writes":[{"path":"p","op":"set","value":null}],"meta":"m"}`,
	`{"id":"i","agent":"a","kind":"apply","writes":[{"path":"report.intro","op":"set","value":{"text":"Hello, \"world\"\n","lang":"日本語"}}],"pre":["state.report.status == \"draft\""],"post":["state.x != 'é'"]}`,
	`{"priority":-0,"lease_ms":-1}`,
}

// intentShapes are the usual intents and near misses, read by hand or
// not.
var intentShapes = append(usualIntents[:len(usualIntents):len(usualIntents)],
	`{"priority":-9223372036854775808}`, `{"priority":-9223372036854775809}`, `{"priority":9223372036854775808}`, `{"priority":- 1}`, `{"priority":-}`,
	`{"priority":1.0}`, `{"priority":1e2}`, `{"priority":01}`, `{"fence":-1}`, `{"lease_ms":null}`, `{"reads":[{"path":"p","version":null}]}`,
	`{"id":"a","id":"b"}`, `{"ID":"a"}`, `{"extra":1}`, `{"writes":[{"path":"p","op":"set","value":{"a":1,"a":2}}]}`,
	`{"writes":[{"path":"p","op":"set","value":{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{"i":{"j":1}}}}}}}}}}}]}`,
	`{"writes":[{"path":"p","op":"set","value":[1,]}]}`, `{"writes":[{"path":"p","op":"set","value":01}]}`, `{"writes":[{"path":"p","op":"set","value":1.}]}`,
	`{"writes":[{"path":"p","op":"set","value":.5}]}`, `{"writes":[{"path":"p","op":"set","value":1e}]}`, `{"writes":[{"path":"p","op":"set","value":-}]}`,
	`{"writes":[{"path":"p","op":"set","value":tru}]}`, `{"writes":[{"path":"p","op":"set","value":nulll}]}`, `{"writes":[{"path":"p","op":"set","value":"a\"b"}]}`,
	`{"writes":[{"path":"p","op":"set","value":"é"}]}`, `{"writes":[{"path":"p","path":"q"}]}`, `{"writes":[{"path":"p","Op":"set"}]}`,
	`{"pre":["state.x == \u0022a\u0022"]}`, `{"pre":["a\x"]}`, `{"pre":["a",1]}`, `{"pre":null}`, `{}`, `{}{}`, `{} x`, `null`, `[]`, `{"id":"i"`, `{"id":}`, ``,
)

func TestDecodeByHand(t *testing.T) {
	for _, doc := range usualIntents {
		if !sameIntent(t, []byte(doc)) {
			t.Errorf("%s was not read by hand", doc)
		}
	}
	for _, doc := range intentShapes {
		sameIntent(t, []byte(doc))
	}
	// Decode gives what it gave before the hand-written reader: the same
	// intent, or the same error.
	for _, doc := range intentShapes {
		sameDecode(t, []byte(doc))
	}
}

// sameDecode fails t unless Decode gives what the strict decoding alone
// gave: the same intent, or the same error.
func sameDecode(t testing.TB, data []byte) {
	t.Helper()
	got, err := Decode(data)
	want, werr := new(Intent), error(nil)
	switch {
	case len(data) > MaxIntentSize:
		return
	case strictUnmarshal(data, want) != nil:
		werr = decodeError(data, strictUnmarshal(data, new(Intent)))
	case firstByte(data) != '{':
		werr = invalid("", "", "a JSON null, not an object")
	default:
		werr = want.Validate()
	}
	if werr != nil {
		want = nil
	}
	if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() || !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: Decode gives %#v, %v; the strict decoding %#v, %v", data, got, err, want, werr)
	}
}

func FuzzDecodePlain(f *testing.F) {
	for _, doc := range intentShapes {
		f.Add([]byte(doc))
	}
	// The corpus of FuzzDecode, whose documents were found to reach far
	// into the strict decoding.
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecode", "*"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if q, ok := strings.CutPrefix(line, "[]byte("); ok {
				if s, err := strconv.Unquote(strings.TrimSuffix(q, ")")); err == nil {
					f.Add([]byte(s))
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameIntent(t, data)
		sameDecode(t, data)
	})
}
