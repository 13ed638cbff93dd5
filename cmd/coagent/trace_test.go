package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// The traces of TestLogTrace: A a transaction sent through the API by the
// SDK, B an intent the SDK stored on the intents stream, C one traced by
// its meta, D one stored on the stream by hand with the header spelled in
// HTTP's case.
const (
	logTraceA = "4bf92f3577b34da6a3ce929d0e0e4736"
	logTraceB = "0af7651916cd43dd8448eb211c80319c"
	logTraceC = "5c1f0a2b3d4e5f60718293a4b5c6d7e8"
	logTraceD = "aaaabbbbccccddddeeeeffff00001111"
	logTraceE = "e0e1e2e3e4e5e6e7e8e9eaebecedeeef"
)

func traceparentFor(trace string) string { return "00-" + trace + "-00f067aa0ba902b7-01" }

// traceStory runs coagent log --trace and returns the events as
// "type intent" lines.
func traceStory(t *testing.T, args ...string) ([]*intents.Event, string) {
	t.Helper()
	out, errOut, err := runCmd(t, "", append([]string{"log", "-o", "json"}, args...)...)
	if err != nil {
		t.Fatalf("log %v: %v (%s)", args, err, errOut)
	}
	var evs []*intents.Event
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var ev intents.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("log %v: line %q: %v", args, line, err)
		}
		evs = append(evs, &ev)
		fmt.Fprintf(&b, "%s %s", ev.Type, ev.Intent)
		if ev.Decision != nil {
			fmt.Fprintf(&b, " %s", ev.Decision.Outcome)
		}
		if ev.Release != nil {
			fmt.Fprintf(&b, " %s", ev.Release.Cause)
		}
		b.WriteString("\n")
	}
	return evs, b.String()
}

// TestLogTrace: intents sent with a traceparent — a header on the API path
// and on the stream path, or meta.traceparent — are found by `coagent log
// --trace` with every event they caused, in order: a transaction's grant,
// its commit (sent without a trace of its own, so its transaction's) and
// its release. A traceparent that cannot be used changes no decision and
// is named on the intent's event. The same holds of a stopped server's
// log.
func TestLogTrace(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	url, stop := serve(t, data)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := agents.Connect(ctx, nc, "w1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// A: a transaction through the API, the propose traced by the SDK's
	// header, the commit sent with no trace.
	tx, err := c.Propose(agents.ContextWithTraceparent(ctx, traceparentFor(logTraceA)),
		intents.Propose("write").Write("doc.title", intents.OpSet))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := tx.Commit(ctx, intents.Apply("write").Set("doc.title", "Q3")); err != nil || d.Outcome != intents.OutcomeCommitted {
		t.Fatalf("commit: %+v, %v", d, err)
	}
	// B: stored on the intents stream by the SDK, with the header.
	pub, err := intents.Apply("count").Incr("doc.n", 1).Build()
	if err != nil {
		t.Fatal(err)
	}
	pubID, err := c.Publish(agents.ContextWithTraceparent(ctx, traceparentFor(logTraceB)), pub)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := c.Decision(ctx, pubID); err != nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("published intent: %+v, %v", d, err)
	}
	// C: meta.traceparent, through the CLI's submit.
	metaID := ulid.Make().String()
	submitOK(t, url, fmt.Sprintf(`{"id":%q,"agent":"w2","kind":"apply","writes":[{"path":"doc.m","op":"set","value":1}],"meta":{"traceparent":%q}}`,
		metaID, traceparentFor(logTraceC)))
	// E: the header from the CLI's submit --traceparent; a malformed one
	// is a usage error, and nothing is sent.
	flagID := ulid.Make().String()
	flagIntent := fmt.Sprintf(`{"id":%q,"agent":"w2","kind":"apply","writes":[{"path":"doc.e","op":"set","value":1}]}`, flagID)
	if p := runBin(t, nil, flagIntent, "submit", "-", "--nats", url, "--traceparent", traceparentFor(logTraceE)); p.status != 0 {
		t.Fatalf("submit --traceparent: %+v", p)
	}
	if p := runBin(t, nil, flagIntent, "submit", "-", "--nats", url, "--traceparent", "00-nope"); p.status != 2 || !strings.Contains(p.stderr, `--traceparent "00-nope"`) {
		t.Fatalf("submit --traceparent 00-nope: %+v", p)
	}
	// D: on the stream by hand, the header capitalized.
	subj := intents.Subjects{}
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	streamID := ulid.Make().String()
	m := nats.NewMsg(subj.Intents("w3"))
	m.Header.Set("Traceparent", traceparentFor(logTraceD))
	m.Data = fmt.Appendf(nil, `{"id":%q,"agent":"w3","kind":"apply","writes":[{"path":"doc.d","op":"set","value":1}]}`, streamID)
	if _, err := js.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	// A malformed header on the API path: applied all the same.
	badID := ulid.Make().String()
	m = nats.NewMsg(subj.Submit("w2"))
	m.Header.Set(intents.HeaderTraceparent, "00-not-a-trace")
	m.Data = fmt.Appendf(nil, `{"id":%q,"agent":"w2","kind":"apply","writes":[{"path":"doc.bad","op":"set","value":1}]}`, badID)
	reply, err := nc.RequestMsg(m, 10*time.Second)
	var d intents.Decision
	if err != nil || json.Unmarshal(reply.Data, &d) != nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("the intent with a malformed traceparent: %v, %s", err, reply.Data)
	}

	// The ids of the propose and of the commit, which the SDK gave.
	var propose, commit string
	check := func(where []string) {
		t.Helper()
		evs, story := traceStory(t, append(where, "--trace", logTraceA)...)
		if propose == "" && len(evs) > 3 {
			propose, commit = evs[0].Intent, evs[3].Intent
		}
		if len(evs) < 2 || evs[1].Txn != tx.ID() || propose == commit {
			t.Fatalf("log %v --trace A: not the transaction %s:\n%s", where, tx.ID(), story)
		}
		want := "intent " + propose + "\ngrant " + propose + "\ndecision " + propose + " granted\n" +
			"intent " + commit + "\nchange " + commit + "\nrelease " + commit + " committed\ndecision " + commit + " committed\n"
		if story != want {
			t.Errorf("log %v --trace A:\n%swant:\n%s", where, story, want)
		}
		for i := 1; i < len(evs); i++ {
			if evs[i].Seq <= evs[i-1].Seq {
				t.Errorf("log %v --trace A: seq %d after %d", where, evs[i].Seq, evs[i-1].Seq)
			}
		}
		if evs[0].Trace != logTraceA {
			t.Errorf("the propose's event has trace %q", evs[0].Trace)
		}
		// --intent finds the events of each intent of the trace: those
		// of the propose, and those of the commit, which the
		// transaction's grant is not one of.
		for id, want := range map[string]string{propose: "intent " + propose + "\ngrant " + propose + "\ndecision " + propose + " granted\n",
			commit: "intent " + commit + "\nchange " + commit + "\nrelease " + commit + " committed\ndecision " + commit + " committed\n"} {
			for _, spelt := range []string{id, strings.ToLower(id)} {
				if _, story := traceStory(t, append(where, "--intent", spelt)...); story != want {
					t.Errorf("log %v --intent %s:\n%swant:\n%s", where, spelt, story, want)
				}
			}
		}
		if _, story := traceStory(t, append(where, "--intent", commit, "--type", "release")...); story != "release "+commit+" committed\n" {
			t.Errorf("log %v --intent %s --type release:\n%s", where, commit, story)
		}
		// A whole traceparent names its trace as well.
		if _, again := traceStory(t, append(where, "--trace", traceparentFor(logTraceA))...); again != story {
			t.Errorf("log %v --trace with a traceparent:\n%swant:\n%s", where, again, story)
		}
		for trace, id := range map[string]string{logTraceB: pubID, logTraceC: metaID, logTraceD: streamID, logTraceE: flagID} {
			_, story := traceStory(t, append(where, "--trace", trace)...)
			if want := "intent " + id + "\nchange " + id + "\ndecision " + id + " applied\n"; story != want {
				t.Errorf("log %v --trace %s:\n%swant:\n%s", where, trace, story, want)
			}
		}
		// The malformed header is named on the intent's event, which has
		// no trace, nor has any of its events.
		evs, _ = traceStory(t, append(where, "--agent", "w2", "--path", "doc.bad")...)
		if len(evs) != 2 || evs[0].Type != intents.EventIntent ||
			evs[0].Received.TraceError != `header traceparent = "00-not-a-trace": not a W3C traceparent: 14 characters, a traceparent has 55 (version-traceid-parentid-flags)` {
			t.Fatalf("log of the intent with a malformed traceparent: %+v", evs)
		}
		for _, ev := range evs {
			if ev.Trace != "" {
				t.Errorf("%s event of the malformed traceparent has trace %q", ev.Type, ev.Trace)
			}
		}
	}
	check([]string{"--nats", url})
	// The text form names the trace and the traceparent not used.
	out, _, err := runCmd(t, "", "log", "--nats", url, "--trace", logTraceA)
	if err != nil || strings.Count(out, " trace="+logTraceA) != 7 {
		t.Errorf("log --trace A, as text: %q, %v", out, err)
	}
	out, _, err = runCmd(t, "", "log", "--nats", url, "--path", "doc.bad", "--type", "intent")
	if err != nil || !strings.Contains(out, `(traceparent not used: header traceparent = "00-not-a-trace": not a W3C traceparent`) {
		t.Errorf("log of the malformed traceparent, as text: %q, %v", out, err)
	}
	// A trace that is not one is a usage error, and log.query says so too.
	_, errOut, err := runCmd(t, "", "log", "--nats", url, "--trace", "xyz")
	var usage *usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error()+errOut, `--trace "xyz": not a W3C traceparent: 3 characters`) {
		t.Errorf("log --trace xyz: %v, %q", err, errOut)
	}
	_, errOut, err = runCmd(t, "", "log", "--nats", url, "--intent", "01JPA3Z4Y5X6W7V8T9S0R1Q2PU")
	if !errors.As(err, &usage) || !strings.Contains(err.Error()+errOut, `--intent "01JPA3Z4Y5X6W7V8T9S0R1Q2PU": not an intent id (a ULID)`) {
		t.Errorf("log --intent of a bad ULID: %v, %q", err, errOut)
	}
	reply, err = nc.Request(subj.API(intents.APILogQuery), []byte(`{"trace":"XYZ"}`), 10*time.Second)
	if err != nil || !strings.Contains(reply.Header.Get("Nats-Service-Error"), `log.query: trace "XYZ": not a W3C traceparent`) {
		t.Errorf("log.query with a bad trace: %v, %v", err, reply.Header)
	}

	c.Close()
	nc.Close()
	stopped = true
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	check([]string{"--data", data})
}
