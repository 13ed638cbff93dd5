package intents_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/coagent/coagent/intents"
)

func TestParseTraceparent(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, c := range []struct{ in, want, err string }{
		{in: "00-" + id + "-00f067aa0ba902b7-01", want: id},
		{in: "00-" + id + "-00f067aa0ba902b7-00", want: id},
		{in: "cc-" + id + "-00f067aa0ba902b7-01-future-fields", want: id},
		{in: "", err: "0 characters"},
		{in: "00-" + id + "-00f067aa0ba902b7-0", err: "54 characters"},
		{in: "00-" + id + "-00f067aa0ba902b7-01-x", err: "version 00 has nothing after the flags"},
		{in: "00_" + id + "_00f067aa0ba902b7_01", err: "1 dash-separated fields"},
		{in: "ff-" + id + "-00f067aa0ba902b7-01", err: "version ff is forbidden"},
		{in: "0g-" + id + "-00f067aa0ba902b7-01", err: `version "0g" is not 2 lowercase hex digits`},
		{in: "00-" + strings.ToUpper(id) + "-00f067aa0ba902b7-01", err: "trace-id"},
		{in: "00-00000000000000000000000000000000-00f067aa0ba902b7-01", err: "trace-id is all zeros"},
		{in: "00-" + id + "-0000000000000000-01", err: "parent-id is all zeros"},
		{in: "00-" + id + "-00f067aa0ba902b7-1x", err: `trace-flags "1x"`},
		{in: "01-" + id + "-00f067aa0ba902b7-01x", err: `trace-flags "01x"`},
	} {
		got, err := intents.ParseTraceparent(c.in)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%q: %q, %v; want %q", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !errors.Is(err, intents.ErrTraceparent) || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %q, %v; want an error saying %q", c.in, got, err, c.err)
		}
	}
}

func TestParseTraceID(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	for in, want := range map[string]string{id: id, "00-" + id + "-00f067aa0ba902b7-01": id} {
		if got, err := intents.ParseTraceID(in); err != nil || got != want {
			t.Errorf("%q: %q, %v", in, got, err)
		}
	}
	for _, in := range []string{strings.ToUpper(id), strings.Repeat("0", 32), "abc"} {
		if _, err := intents.ParseTraceID(in); !errors.Is(err, intents.ErrTraceparent) {
			t.Errorf("%q: %v, want ErrTraceparent", in, err)
		}
	}
}

func TestTraceOfMeta(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct {
		meta, trace, problem string
	}{
		{meta: ``},
		{meta: `{"why":"no trace here"}`},
		{meta: `{"traceparent":"` + tp + `"}`, trace: "4bf92f3577b34da6a3ce929d0e0e4736"},
		{meta: `{"note":"traceparent"}`}, // the word, not the member
		{meta: `{"traceparent":null}`, problem: "meta.traceparent = null: not a W3C traceparent: not a string"},
		{meta: `{"traceparent":"nope"}`, problem: `meta.traceparent = "nope": not a W3C traceparent: 4 characters`},
	} {
		trace, problem := intents.Trace(nil, json.RawMessage(c.meta))
		if trace != c.trace || !strings.HasPrefix(problem, c.problem) || (c.problem == "") != (problem == "") {
			t.Errorf("%s: %q, %q; want %q, %q", c.meta, trace, problem, c.trace, c.problem)
		}
	}
}

// TestTraceNoteIsBounded: a traceparent that cannot be used is quoted by
// a prefix and its length, in every form the note takes (one header, the
// header given twice, a part of one too long, meta.traceparent), so that
// a header of any size makes a note of a few hundred bytes.
func TestTraceNoteIsBounded(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	huge := strings.Repeat("z", 900<<10)
	for _, c := range []struct {
		name   string
		header []string
		meta   string
	}{
		{name: "header", header: []string{"00-" + huge}},
		{name: "header twice", header: []string{huge, huge, huge, huge, huge}},
		{name: "a long part", header: []string{"00-" + id + "-" + huge + "-01"}},
		{name: "after the flags", header: []string{"00-" + id + "-00f067aa0ba902b7-01-" + huge}},
		{name: "meta", meta: `{"traceparent":"00-` + huge + `"}`},
		{name: "meta not a string", meta: `{"traceparent":["` + huge + `"]}`},
	} {
		trace, problem := intents.Trace(c.header, json.RawMessage(c.meta))
		if trace != "" || problem == "" || len(problem) > 1024 {
			t.Errorf("%s: trace %q, a note of %d bytes (%.200q); want none and a note under 1 KiB", c.name, trace, len(problem), problem)
		}
	}
}
