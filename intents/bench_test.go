package intents_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/coagent/coagent/intents"
)

// BenchmarkDecode measures Decode, validation included, on the shapes of
// intent the coordinator sees most: one scalar write, a typical apply with
// reads, conditions and an object value, and a wide one of 100 writes.
func BenchmarkDecode(b *testing.B) {
	var wide strings.Builder
	wide.WriteString(`{"id":"` + id + `","agent":"w","kind":"apply","writes":[`)
	for i := range 100 {
		if i > 0 {
			wide.WriteByte(',')
		}
		fmt.Fprintf(&wide, `{"path":"doc.f%d","op":"set","value":{"n":%d,"s":"text %d","l":[1,2.5,"x"]}}`, i, i, i)
	}
	wide.WriteString(`]}`)
	for _, c := range []struct{ name, doc string }{
		{"scalar", `{"id":"` + id + `","agent":"w","kind":"apply","writes":[{"path":"free.d1.f","op":"set","value":1}]}`},
		{"typical", `{"id":"` + id + `","agent":"writer-1","kind":"apply","action":"write_intro",
			"reads":[{"path":"report.status","version":3}],
			"writes":[{"path":"report.sections.intro","op":"set","value":{"text":"Hello, world","words":2,"tags":["a","b"]}},
			          {"path":"report.stats.words","op":"incr","value":2}],
			"pre":["state.report.status == \"draft\""],"on_conflict":"wait","wait_ms":500}`},
		{"wide", wide.String()},
	} {
		b.Run(c.name, func(b *testing.B) {
			data := []byte(c.doc)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := intents.Decode(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
