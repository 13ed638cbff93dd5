package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/oklog/ulid/v2"
)

// stateGetNow is stateGet for a test: it waits for the answer.
func stateGetNow(r readSource, paths []string, v viewer) (*stateReply, error) {
	type answer struct {
		out *stateReply
		err error
	}
	ch := make(chan answer, 1)
	stateGet(context.Background(), r, paths, v, func(out *stateReply, err error) { ch <- answer{out, err} })
	a := <-ch
	return a.out, a.err
}

// decisionGetNow is decisionGet for a test: it waits for the answer.
func decisionGetNow(s *Service, id string) (*intents.Decision, error) {
	type answer struct {
		d   *intents.Decision
		err error
	}
	ch := make(chan answer, 1)
	s.decisionGet(context.Background(), id, func(d *intents.Decision, err error) { ch <- answer{d, err} })
	a := <-ch
	return a.d, a.err
}

// holdIncr holds back from the log, for good, the first batch with an
// increment of path, saying "holding" on stdout once it does (for the
// child of TestReadKilledBeforeDurable).
func holdIncr(path string) func([]*intents.Event) <-chan error {
	held := false
	return func(evs []*intents.Event) <-chan error {
		for _, ev := range evs {
			if ev.Change == nil || held {
				continue
			}
			for _, w := range ev.Change.Writes {
				if w.Path == path && w.Op == intents.OpIncr {
					held = true
					fmt.Println("holding")
					return make(chan error) // never
				}
			}
		}
		return nil
	}
}

// A read must not tell what is not durable (SPEC §6). The coordinator is
// killed while the group of an increment is decided but held back from
// the log: the read of the incremented path, the increment's decision and
// the transactions are not answered before it dies, while a read of a
// path nothing in flight touches is answered at once, at the durable
// revision. After the restart the increment was never made, and the same
// intent sent again is decided once.
func TestReadKilledBeforeDurable(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a child process")
	}
	ns := natstest.Run(t)
	dir := t.TempDir()
	subj := intents.Subjects{}
	nc := natstest.Connect(t, ns)
	submit := func(id, body string) *intents.Decision {
		t.Helper()
		m, err := nc.Request(subj.Submit("w1"), fmt.Appendf(nil, `{"id":%q,"agent":"w1",%s}`, id, body), 20*time.Second)
		if err != nil {
			t.Fatalf("submit %s: %v", body, err)
		}
		var d intents.Decision
		if err := json.Unmarshal(m.Data, &d); err != nil {
			t.Fatalf("submit %s: %s: %v", body, m.Data, err)
		}
		return &d
	}

	t.Setenv(envKillHold, "lc.k")
	child, _ := startKillChild(t, ns.ClientURL(), dir)
	if d := submit(ulid.Make().String(), `"kind":"apply","writes":[{"path":"lc.k","op":"set","value":1}]`); d.Outcome != intents.OutcomeApplied {
		t.Fatalf("set lc.k: %+v", d)
	}
	other := submit(ulid.Make().String(), `"kind":"apply","writes":[{"path":"lc.other","op":"set","value":1}]`)
	if other.Outcome != intents.OutcomeApplied {
		t.Fatalf("set lc.other: %+v", other)
	}

	// One subscription takes every answer, so they arrive in the order the
	// coordinator sent them.
	sub, err := nc.SubscribeSync("_INBOX.reads.>")
	if err != nil {
		t.Fatal(err)
	}
	incr := ulid.Make().String()
	ask := func(subject, reply, body string) {
		t.Helper()
		if err := nc.PublishRequest(subject, "_INBOX.reads."+reply, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	ask(subj.Submit("w1"), "incr", fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"apply","writes":[{"path":"lc.k","op":"incr","value":1}]}`, incr))
	child.await(t, "holding", 20*time.Second)
	ask(subj.API(intents.APIDecisionGet), "decision", fmt.Sprintf(`{"intent":%q}`, incr))
	ask(subj.API(intents.APITxnList), "txns", `{}`)
	ask(subj.API(intents.APIStateGet), "k", `{"paths":["lc.k"]}`)
	ask(subj.API(intents.APIStateGet), "other", `{"paths":["lc.other"]}`)

	// The two state.get are answered in the order they were read, so
	// lc.k's answer would come before lc.other's had it been told.
	m, err := sub.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatalf("the read of lc.other, which nothing in flight touches: %v", err)
	}
	if m.Subject != "_INBOX.reads.other" {
		t.Fatalf("answered %s before the read of lc.other: %s", m.Subject, m.Data)
	}
	var st stateReply
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatal(err)
	}
	if v := st.Values["lc.other"]; !v.Exists || v.ModRev != other.Rev || st.Rev != other.Rev || m.Header.Get(intents.HeaderRev) != "" && m.Header.Get(intents.HeaderRev) != fmt.Sprint(other.Rev) {
		t.Fatalf("lc.other at rev %d (the last durable change): %s %v", other.Rev, m.Data, m.Header)
	}

	child.kill(t)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("the killed coordinator told %s: %s", m.Subject, m.Data)
	}

	os.Unsetenv(envKillHold)
	child, _ = startKillChild(t, ns.ClientURL(), dir)
	if m, err := nc.Request(subj.API(intents.APIDecisionGet), fmt.Appendf(nil, `{"intent":%q}`, incr), 10*time.Second); err != nil || m.Header.Get(protoHdrErrCode) != codeNotFound {
		t.Fatalf("the held increment was never durable, so it has no decision: %v %s %v", err, m.Data, m.Header)
	}
	cas := submit(ulid.Make().String(), `"kind":"apply","reads":[{"path":"lc.k","version":1}],"writes":[{"path":"lc.k","op":"set","value":10}]`)
	if cas.Outcome != intents.OutcomeApplied {
		t.Fatalf("compare-and-set of lc.k at version 1: %+v", cas)
	}
	if d := submit(incr, `"kind":"apply","writes":[{"path":"lc.k","op":"incr","value":1}]`); d.Outcome != intents.OutcomeApplied || d.Rev <= cas.Rev {
		t.Fatalf("the increment sent again: %+v (the compare-and-set at rev %d)", d, cas.Rev)
	}
	st = *natstest.Request[stateReply](t, nc, subj.API(intents.APIStateGet), `{"paths":["lc.k"]}`)
	if v := st.Values["lc.k"]; v.Value != float64(11) || v.Version != 3 {
		t.Fatalf("lc.k after set, compare-and-set and one increment: %+v", v)
	}
	child.stop(t)
}

// Reads held for a group are answered once it is durable, in any order of
// hold and release, and unavailable once the log failed.
func TestHeldReads(t *testing.T) {
	var h heldReads
	h.release(5, 4)
	answers := map[string]bool{}
	note := func(name string) func(bool) { return func(ok bool) { answers[name] = ok } }
	if held, ok := h.hold(5, note("durable")); held || !ok {
		t.Fatalf("a read of what is durable is held: %v %v", held, ok)
	}
	h.hold(9, note("nine"))
	h.hold(7, note("seven"))
	h.release(7, 0)
	if seq, rev := h.durable(); seq != 7 || rev != 4 {
		t.Fatalf("durable after a group with no change: %d %d", seq, rev)
	}
	if len(answers) != 1 || !answers["seven"] {
		t.Fatalf("after 7 is durable: %v", answers)
	}
	h.fail()
	if ok, seen := answers["nine"]; !seen || ok {
		t.Fatalf("after the log failed: %v", answers)
	}
	if held, ok := h.hold(10, note("late")); held || ok {
		t.Fatalf("a read after the log failed: %v %v", held, ok)
	}
}

// A read of the log under way when Shutdown closes the log holds the close
// until it ends, and a read after it is refused: Pebble panics on a read of
// a closed log, which a log.query handler still running after the API
// stopped did.
func TestLogReadersClose(t *testing.T) {
	var r logReaders
	inside, release := make(chan struct{}), make(chan struct{})
	go r.read(nil, func(*eventlog.Log) { close(inside); <-release })
	<-inside
	closed := make(chan struct{})
	go func() { r.close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("close returned while a read was under way")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	if r.read(nil, func(*eventlog.Log) { t.Fatal("a read after close ran") }) {
		t.Fatal("a read after close reported it ran")
	}
}
