package state

import (
	"encoding/json"
	"reflect"
	"testing"
)

// decodeValue's fast paths must agree with encoding/json on every input,
// accepting what it accepts and refusing what it refuses.
func FuzzDecodeValue(f *testing.F) {
	for _, s := range []string{`1`, `-0.5e3`, `01`, `1.`, `-`, `"a"`, `"a\"b"`, `"é"`, "\"\t\"", `true`, `nul`,
		`null`, ` 3 `, `Inf`, `0x10`, `1e400`, `[1,{"a":2}]`, `{"a":"b"}`, `"\u00e9"`, `1_0`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gotErr := decodeValue(b)
		var want any
		wantErr := json.Unmarshal(b, &want)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%q: err %v, encoding/json says %v", b, gotErr, wantErr)
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: %#v, encoding/json says %#v", b, got, want)
		}
	})
}
