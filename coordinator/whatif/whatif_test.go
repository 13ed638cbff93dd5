package whatif_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/coagent/coagent/agents/team"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/whatif"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
)

// demoRules are the demo's: leased sections, the publication held for
// the editor.
const demoRules = `{"pattern":"report.sections.*","kind":"task","lease":"30s"},` + team.PublishRules

// demoLog runs the content team (the demo's scenario) on a real
// coordinator and returns its event log, the coordinator stopped.
func demoLog(t *testing.T) *eventlog.Log {
	t.Helper()
	ns := natstest.Run(t)
	dir := filepath.Join(t.TempDir(), "log")
	svc := coordtest.StartOn(t, natstest.Connect(t, ns), dir, coordtestOptions())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := svc.SetRules(ctx, []byte(`{"rules":[`+demoRules+`]}`), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := team.Run(ctx, team.Config{Connect: func(name string) (*nats.Conn, error) { return nats.Connect(ns.ClientURL(), nats.Name(name)) },
		Seed: 3, Writers: 3}); err != nil {
		t.Fatal(err)
	}
	if err := svc.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	log, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	return log
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
	rep, err = whatif.Run(log, whatif.Options{Rules: stricter})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mode != "cascade" || rep.Changed != 1 || len(rep.Top) != 1 {
		t.Fatalf("a stricter writers rule: %+v", rep)
	}
	d := rep.Top[0]
	if d.Agent != "writer-1" || d.Recorded.Outcome != intents.OutcomeApplied || d.New.Reason != intents.ReasonUnauthorized || d.Rule != "rules[0]" ||
		rep.FirstDivergence == 0 || rep.ByAgent["writer-1"] != 1 || rep.ByBoard["report"] != 1 || rep.Matrix["applied"]["rejected:unauthorized"] != 1 {
		t.Fatalf("the publication under the stricter rule: %+v\n%+v", d, rep)
	}
	if len(rep.PathsDiffer) != 1 || rep.PathsDiffer[0] != "report.published" {
		t.Fatalf("paths that differ: %v", rep.PathsDiffer)
	}
	again, err := whatif.Run(log, whatif.Options{Rules: stricter})
	if err != nil || again.NewHash != rep.NewHash || again.FirstDivergence != rep.FirstDivergence {
		t.Fatalf("a second run: %+v %v", again, err)
	}
	// A verification that a rules file breaks is reported as such.
	if _, err := whatif.Run(log, whatif.Options{Rules: []byte(`{"rules":[{"pattern":"x","on_conflict":"later"}]}`)}); err == nil || errors.Is(err, whatif.ErrNondeterministic) {
		t.Fatalf("a rules file that does not compile: %v", err)
	}
}

func coordtestOptions() coordinator.Options { return coordinator.Options{} }
