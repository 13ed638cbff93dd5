package whatif_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/agents/team"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/whatif"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// demoRules are the demo's: leased sections, the publication held for
// the editor.
const demoRules = `{"pattern":"report.sections.*","kind":"task","lease":"30s"},` + team.PublishRules

// demo is the content team (the demo's scenario) run on a real
// coordinator under the demo's rules, and shadow in the shadow if given;
// the coordinator still runs.
type demo struct {
	ns  *server.Server
	svc *coordinator.Service
	dir string
}

func runDemo(t *testing.T, seed uint64, writers int, shadow []byte) *demo {
	t.Helper()
	d := &demo{ns: natstest.Run(t), dir: filepath.Join(t.TempDir(), "log")}
	d.svc = coordtest.StartOn(t, natstest.Connect(t, d.ns), d.dir, coordtestOptions())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := d.svc.SetRules(ctx, []byte(`{"rules":[`+demoRules+`]}`), "test"); err != nil {
		t.Fatal(err)
	}
	if shadow != nil {
		if _, err := d.svc.SetShadowRules(ctx, shadow, intents.ModeAudit, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := team.Run(ctx, team.Config{Connect: func(name string) (*nats.Conn, error) { return nats.Connect(d.ns.ClientURL(), nats.Name(name)) },
		Seed: seed, Writers: writers}); err != nil {
		t.Fatal(err)
	}
	return d
}

// stop stops the coordinator and opens its event log.
func (d *demo) stop(t *testing.T) *eventlog.Log {
	t.Helper()
	if err := d.svc.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	log, err := eventlog.Open(d.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	return log
}

// demoLog runs the demo and returns its event log, the coordinator
// stopped.
func demoLog(t *testing.T) *eventlog.Log {
	t.Helper()
	return runDemo(t, 3, 3, nil).stop(t)
}

// Under the rules the log recorded, every decision comes out as recorded:
// the log verifies. A rule that lets only writer-2 publish changes exactly
// the publication, writer-1's, and names the rule; the report is the same
// run after run.
func TestWhatIf(t *testing.T) {
	log := demoLog(t)
	rep, err := whatif.Run(log, whatif.Options{})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if rep.Mode != "verify" || rep.Changed != 0 || rep.Intents < 10 || rep.RecordedHash != rep.NewHash {
		t.Fatalf("verify: %+v", rep)
	}
	stricter := []byte(`{"rules":[{"pattern":"report.published","writers":["writer-2"]},` + demoRules + `]}`)
	rep, err = whatif.Run(log, whatif.Options{Rules: stricter, Cascade: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mode != "cascade" || rep.Changed != 1 || len(rep.Top) != 1 {
		t.Fatalf("a stricter writers rule: %+v", rep)
	}
	d := rep.Top[0]
	if d.Agent != "writer-1" || d.Recorded.Outcome != intents.OutcomeApplied || d.New.Reason != intents.ReasonUnauthorized || d.Rule != "rules[0] (report.published)" ||
		rep.FirstDivergence == 0 || rep.ByAgent["writer-1"] != 1 || rep.ByBoard["report"] != 1 || rep.Matrix["applied"]["rejected:unauthorized"] != 1 {
		t.Fatalf("the publication under the stricter rule: %+v\n%+v", d, rep)
	}
	if len(rep.PathsDiffer) != 1 || rep.PathsDiffer[0] != "report.published" {
		t.Fatalf("paths that differ: %v", rep.PathsDiffer)
	}
	again, err := whatif.Run(log, whatif.Options{Rules: stricter, Cascade: true})
	if err != nil || again.NewHash != rep.NewHash || again.FirstDivergence != rep.FirstDivergence {
		t.Fatalf("a second run: %+v %v", again, err)
	}
	// Isolated (the default): the publication, escalated for the editor's
	// approval when it was received, would have been refused then; nothing
	// else changes, and the state is the recorded one.
	iso, err := whatif.Run(log, whatif.Options{Rules: stricter})
	if err != nil {
		t.Fatal(err)
	}
	if iso.Mode != "isolated" || iso.Changed != 1 || len(iso.Top) != 1 || iso.RecordedHash != iso.NewHash || iso.RecordedHash != rep.RecordedHash {
		t.Fatalf("isolated: %+v", iso)
	}
	d = iso.Top[0]
	if d.Agent != "writer-1" || d.Recorded.Outcome != intents.OutcomeEscalated || d.New.Reason != intents.ReasonUnauthorized || d.Rule != "rules[0] (report.published)" ||
		iso.Matrix["escalated"]["rejected:unauthorized"] != 1 || iso.ByRule["rules[0] (report.published)"] != 1 {
		t.Fatalf("isolated, the publication: %+v\n%+v", d, iso)
	}
	// The recorded rules as the new ones change nothing.
	same, err := whatif.Run(log, whatif.Options{Rules: []byte(`{"rules":[` + demoRules + `]}`)})
	if err != nil || same.Changed != 0 {
		t.Fatalf("isolated under the recorded rules: %+v %v", same, err)
	}
	// A verification that a rules file breaks is reported as such.
	if _, err := whatif.Run(log, whatif.Options{Rules: []byte(`{"rules":[{"pattern":"x","on_conflict":"later"}]}`)}); err == nil || errors.Is(err, whatif.ErrNondeterministic) {
		t.Fatalf("a rules file that does not compile: %v", err)
	}
}

func coordtestOptions() coordinator.Options { return coordinator.Options{} }

// Against a running coordinator, through the log.query its API serves,
// whatif gives the report it gives on the stopped one's directory, byte
// for byte, in each mode.
func TestWhatIfOfARunningCoordinator(t *testing.T) {
	d := runDemo(t, 5, 2, nil)
	nc := natstest.Connect(t, d.ns)
	pages := 0
	page := func(from uint64) ([]*intents.Event, uint64, error) {
		pages++
		resp, err := nc.Request(intents.Subjects{}.API(intents.APILogQuery), []byte(fmt.Sprintf(`{"from":%d,"limit":7}`, from)), 10*time.Second)
		if err != nil {
			return nil, 0, err
		}
		var p struct {
			Events []*intents.Event `json:"events"`
			Next   uint64           `json:"next"`
		}
		return p.Events, p.Next, json.Unmarshal(resp.Data, &p)
	}
	stricter := []byte(`{"rules":[{"pattern":"report.published","writers":["writer-2"]},` + demoRules + `]}`)
	modes := []whatif.Options{{}, {Rules: stricter}, {Rules: stricter, Cascade: true}, {Rules: stricter, From: 20}}
	var remote [][]byte
	for _, o := range modes {
		rep, err := whatif.RunRemote(page, o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		b, _ := json.Marshal(rep)
		remote = append(remote, b)
	}
	if pages < 10 {
		t.Fatalf("%d pages: the log was read whole at once", pages)
	}
	// A reader that may not see every event is told so.
	gappy := func(from uint64) ([]*intents.Event, uint64, error) {
		evs, next, err := page(from)
		if len(evs) > 3 {
			evs = append(evs[:2], evs[3:]...)
		}
		return evs, next, err
	}
	if _, err := whatif.RunRemote(gappy, whatif.Options{}); err == nil || !strings.Contains(err.Error(), "may not see every event") {
		t.Fatalf("a log with a gap: %v", err)
	}
	log := d.stop(t)
	for i, o := range modes {
		rep, err := whatif.Run(log, o)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(rep); string(b) != string(remote[i]) {
			t.Errorf("%+v:\nremote %s\nlocal  %s", o, remote[i], b)
		}
	}
}

// A period when shadow rules were live: coagent whatif under the same
// file, isolated, finds exactly the divergences the live audit recorded.
func TestWhatIfAgreesWithTheLiveAudit(t *testing.T) {
	stricter := []byte(`{"rules":[{"pattern":"report.published","writers":["writer-2"]},` +
		`{"pattern":"report.sections.*.status","writers":["writer-1","editor"]},` + demoRules + `]}`)
	log := runDemo(t, 3, 3, stricter).stop(t)
	live := map[string]string{}
	err := log.Scan(1, log.LastSeq(), func(ev *intents.Event) error {
		if sh := ev.Shadow; sh != nil {
			live[ev.Intent] = sh.Decided + " → " + sh.WouldBeKey()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := whatif.Run(log, whatif.Options{Rules: stricter, Top: 1000})
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]string{}
	for _, d := range rep.Top {
		found[d.Intent] = d.Recorded.Key() + " → " + d.New.Key()
	}
	if len(live) < 2 || len(found) != len(live) || rep.Changed != len(live) {
		t.Fatalf("the live audit recorded %d divergences, whatif found %d:\nlive %v\nwhatif %v", len(live), len(found), live, found)
	}
	for id, l := range live {
		if found[id] != l {
			t.Errorf("intent %s: live audit %q, whatif %q", id, l, found[id])
		}
	}
}

// A verification may start and end at any event, in the middle of a
// call (an intent's event, its change, its decision) or of a case: the
// rest of a call begun before --from is the state it starts from, and the
// call of --until's event is read whole.
func TestWhatIfFromAndUntilAnyEvent(t *testing.T) {
	log := demoLog(t)
	for seq := uint64(2); seq < log.LastSeq(); seq++ {
		if _, err := whatif.Run(log, whatif.Options{From: seq}); err != nil {
			t.Fatalf("--from %d: %v", seq, err)
		}
		if _, err := whatif.Run(log, whatif.Options{Until: seq}); err != nil {
			t.Fatalf("--until %d: %v", seq, err)
		}
	}
}

// An intent sent twice is one intent: its resend, answered as a
// duplicate in the log, is decided again as a fresh try under rules that
// refuse it (a refusal for unauthorized does not take the id), and is
// still counted once.
func TestWhatIfCountsAResendOnce(t *testing.T) {
	ns := natstest.Run(t)
	dir := filepath.Join(t.TempDir(), "log")
	svc := coordtest.StartOn(t, natstest.Connect(t, ns), dir, coordtestOptions())
	nc := natstest.Connect(t, ns)
	in := `{"id":"01JD0000000000000000000001","agent":"w2","kind":"apply","writes":[{"path":"docs.a","op":"set","value":1}]}`
	for range 2 {
		natstest.Request[intents.Decision](t, nc, intents.Subjects{}.Submit("w2"), in)
	}
	if err := svc.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	log, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	for _, cascade := range []bool{false, true} {
		rep, err := whatif.Run(log, whatif.Options{Rules: []byte(`{"rules":[{"pattern":"docs.**","writers":["w1"]}]}`), Cascade: cascade})
		if err != nil || rep.Intents != 2 || rep.Changed != 1 || len(rep.Top) != 1 || rep.Matrix["applied"]["rejected:unauthorized"] != 1 {
			t.Fatalf("cascade %v: %+v %v", cascade, rep, err)
		}
	}
}

// The new rules' invariants are checked against the recorded history: an
// invariant that no report may be published is broken by the change that
// published it, in either mode. In cascade mode the publication, once
// approved, is refused naming it; in isolated mode its decision when it
// was received (held for the editor's approval) does not change.
func TestWhatIfInvariantsAgainstTheHistory(t *testing.T) {
	log := demoLog(t)
	withInv := []byte(`{"rules":[` + demoRules + `],"invariants":[{"name":"unpublished","expr":"state.report.published == nil"}]}`)
	var published uint64
	err := log.Scan(1, log.LastSeq(), func(ev *intents.Event) error {
		if ev.Change != nil && published == 0 {
			for _, w := range ev.Change.Writes {
				if strings.HasPrefix(w.Path, "report.published") {
					published = ev.Seq
				}
			}
		}
		return nil
	})
	if err != nil || published == 0 {
		t.Fatalf("the demo's publication: %d %v", published, err)
	}
	for _, cascade := range []bool{false, true} {
		rep, err := whatif.Run(log, whatif.Options{Rules: withInv, Cascade: cascade})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Broken) != 1 || rep.Broken[0].Invariant != "unpublished" || rep.Broken[0].First != published || rep.Broken[0].Changes < 1 ||
			!strings.Contains(rep.Broken[0].Detail, "state.report.published == nil") || !strings.Contains(rep.Broken[0].Detail, "it saw report.published = ") {
			t.Fatalf("cascade %v: broken %+v", cascade, rep.Broken)
		}
		if want := map[bool]int{false: 0, true: 1}[cascade]; rep.ByRule["invariant unpublished"] != want {
			t.Fatalf("cascade %v: by rule %v", cascade, rep.ByRule)
		}
	}
	// The recorded rules' own invariants hold, and none is reported.
	rep, err := whatif.Run(log, whatif.Options{Rules: []byte(`{"rules":[` + demoRules + `],"invariants":[{"name":"any","expr":"state.report.title == nil || state.report.title != nil"}]}`)})
	if err != nil || len(rep.Broken) != 0 {
		t.Fatalf("an invariant that holds: %+v %v", rep.Broken, err)
	}
}
