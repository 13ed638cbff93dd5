package coordinator

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
)

// FuzzDecideFold runs the path a message takes from the wire to a replay as
// one target: decode and decide (the engine's Submit, raw bytes in), encode
// each event as the event log stores it, decode it again, and fold it into
// a second engine, as a restart does. Every event the engine emits must
// survive the round trip and fold, and must encode as JSON for the feed;
// the folded state must be the live one. The input is a series of raw
// documents, one per line; a line "+N" lets N×100ms pass.
func FuzzDecideFold(f *testing.F) {
	for _, seed := range []string{
		`{"id":"01JD0000000000000000000999","agent":"w1","kind":"apply","writes":[{"path":"n.a","op":"set","value":1e999}]}`,
		`{"id":"01JD0000000000000000000998","agent":"w1","kind":"apply","writes":[{"path":"n.a","op":"set","value":{"x":[1,-1e400]}}]}`,
		`{"id":"01JD0000000000000000000997","agent":"w1","kind":"apply","writes":[{"path":"n.a","op":"set","value":1` + strings.Repeat("0", 400) + `}]}`,
		`{"id":"01JD0000000000000000000001","agent":"w1","kind":"apply","writes":[{"path":"n.i","op":"incr","value":1.7976931348623157e308}]}` + "\n" +
			`{"id":"01JD0000000000000000000002","agent":"w1","kind":"apply","writes":[{"path":"n.i","op":"incr","value":1.7976931348623157e308}]}`,
		`{"id":"01JD0000000000000000000003","agent":"w1","kind":"apply","writes":[{"path":"d.a","op":"set","value":1,"path":"secret.x"}]}`,
		`{"id":"01JD0000000000000000000004","Agent":"w1","kind":"apply","writes":[{"path":"d.a","op":"set","value":1}]}`,
		"{\"id\":\"01JD0000000000000000000005\",\"agent\":\"w1\",\"kind\":\"apply\",\"writes\":[{\"path\":\"d.a\",\"op\":\"set\",\"value\":\"\xff\"}]}",
		`null`,
		`{"id":"01JD0000000000000000000006","agent":"w1","kind":"propose","lease_ms":1000,"writes":[{"path":"q","op":"set"}]}` + "\n" +
			`{"id":"01JD0000000000000000000007","agent":"w2","kind":"apply","on_conflict":"wait","wait_ms":1500,"writes":[{"path":"q","op":"set","value":2}]}` + "\n+30\n" +
			`{"id":"01JD0000000000000000000008","agent":"w2","kind":"apply","on_conflict":"escalate","writes":[{"path":"q","op":"merge","value":{"a":[1,2],"b":null}}]}`,
		`{"id":"01JD0000000000000000000009","agent":"w1","kind":"apply","writes":[{"path":"m","op":"merge","value":{"k":1e308}}],"pre":["state.m == nil"],"post":["state.m.k > 0"],"meta":{"why":1e999}}`,
		// Traces: a header (a line "@value" is the next intent's
		// traceparent), meta.traceparent, bad ones of both, and a
		// transaction whose commit and expiry carry its trace.
		"@00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n" +
			`{"id":"01JD0000000000000000000010","agent":"w1","kind":"propose","lease_ms":1000,"writes":[{"path":"q","op":"set"}]}` + "\n" +
			`{"id":"01JD0000000000000000000011","agent":"w2","kind":"apply","on_conflict":"wait","writes":[{"path":"q","op":"set","value":2}],"meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}` + "\n+30",
		"@00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01\n" +
			`{"id":"01JD0000000000000000000012","agent":"w1","kind":"apply","writes":[{"path":"q","op":"set","value":1}],"meta":{"traceparent":["x"]}}`,
		`{"id":"01JD0000000000000000000013","agent":"w1","kind":"apply","writes":[{"path":"q","op":"bad"}],"meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}`,
	} {
		f.Add([]byte(seed))
	}
	cfg := engine.Config{DefaultLease: 2 * time.Second, ArbiterTimeout: 3 * time.Second, LeaseWarning: time.Second}
	f.Fuzz(func(t *testing.T, data []byte) {
		live, err := engine.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		folded, _ := engine.New(cfg)
		now := t0
		agents := []string{"w1", "w2", ""}
		var header []string
		for i, line := range bytes.Split(data, []byte("\n")) {
			if i == 64 {
				break
			}
			var evs []*intents.Event
			if len(line) > 0 && line[0] == '@' {
				header = []string{string(line[1:])}
				continue
			}
			if len(line) > 1 && line[0] == '+' {
				n := 0
				for _, c := range line[1:] {
					n = n*10 + int(c-'0')%10
				}
				now = now.Add(time.Duration(n%1000) * 100 * time.Millisecond)
				evs = live.Tick(now, nil).Events
			} else {
				evs = live.Submit(now, engine.Input{Agent: agents[i%len(agents)], Raw: line, Traceparent: header}, nil).Events
				header = nil
			}
			for _, ev := range evs {
				if _, err := json.Marshal(ev); err != nil {
					t.Fatalf("event %d (%s) does not encode as JSON for the feed: %v", ev.Seq, ev.Type, err)
				}
				back, err := eventlog.DecodeEvent(eventlog.AppendEvent(nil, ev))
				if err != nil {
					t.Fatalf("event %d (%s) does not decode from its record: %v", ev.Seq, ev.Type, err)
				}
				if ev.Trace != "" && !intents.ValidTraceID(ev.Trace) {
					t.Fatalf("event %d (%s) has trace %q, not a trace id", ev.Seq, ev.Type, ev.Trace)
				}
				if err := folded.Apply(back); err != nil {
					t.Fatalf("event %d (%s) does not fold after the round trip: %v", ev.Seq, ev.Type, err)
				}
			}
		}
		if folded.State().Hash() != live.State().Hash() {
			t.Fatal("the folded state differs from the live one")
		}
		if folded.Seq() != live.Seq() || len(folded.Txns()) != len(live.Txns()) || len(folded.Parked()) != len(live.Parked()) {
			t.Fatalf("folded seq %d, %d txns, %d parked; live %d, %d, %d",
				folded.Seq(), len(folded.Txns()), len(folded.Parked()), live.Seq(), len(live.Txns()), len(live.Parked()))
		}
	})
}
