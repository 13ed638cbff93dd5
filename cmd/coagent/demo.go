package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coagent/coagent/agents/team"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// demoRules make the report's sections tasks with leased claims, and hold
// the report's publication for the editor's approval.
const demoRules = `{"rules":[{"pattern":"report.sections.*","kind":"task","lease":"30s"},` + team.PublishRules + `]}`

// demoTimeout bounds the team's run: the scenario takes well under a
// second, so this only turns a hang into an error.
const demoTimeout = 2 * time.Minute

// demoApproveTimeout bounds a run that waits for a person's approval
// (--approve): the approval case's own timeout.
const demoApproveTimeout = 30 * time.Minute

// newDemoCmd is `coagent demo`: the reference scenario (SPEC §9) on a
// coordinator of its own, an embedded NATS server on a free port and a
// fresh data directory. It prints what happens as it happens, then the
// report, the statistics of the run from the event log, and a replay of the
// log whose state hash must equal the live one.
func newDemoCmd(e *env) *cobra.Command {
	var seed uint64
	var writers int
	var keep string
	var approve bool
	c := &cobra.Command{
		Use:   "demo",
		Short: "run the content-team scenario end to end on a coordinator of its own, then replay its log",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if writers < 2 {
				return usagef(c, "--writers %d: want at least 2", writers)
			}
			return runDemo(c.Context(), seed, writers, keep, approve, e.stdout)
		},
	}
	fs := c.Flags()
	fs.Uint64Var(&seed, "seed", 1, "seed of the scripted models: the same seed gives the same report and decisions")
	fs.IntVar(&writers, "writers", team.DefaultWriters, "number of writers (and sections), at least 2")
	fs.StringVar(&keep, "keep", "", "keep the data directory in `DIR` (new or empty) instead of a temporary one removed at the end")
	fs.BoolVar(&approve, "approve", false, "you approve the report's publication, as the editor (coagent case approve ID --agent editor, or the console): the demo waits for you")
	return c
}

func runDemo(ctx context.Context, seed uint64, writers int, keep string, approve bool, stdout io.Writer) error {
	dir, cleanup, err := demoDir(keep)
	if err != nil {
		return err
	}
	defer cleanup()
	out := &lockedWriter{w: stdout}

	ns, err := embedded("127.0.0.1:-1", filepath.Join(dir, "jetstream"))
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	connect := func(name string) (*nats.Conn, error) {
		return nats.Connect(ns.ClientURL(), nats.InProcessServer(ns), nats.Name("coagent demo "+name))
	}
	nc, err := connect("coordinator")
	if err != nil {
		return fmt.Errorf("connect to the embedded server: %w", err)
	}
	defer nc.Close()
	svc, err := coordinator.Start(ctx, nc, logDir(dir), coordinator.Options{Interest: coordinator.InterestOf(ns)})
	if err != nil {
		return err
	}
	// The sections are tasks under a lease: a writer that died holding
	// one would lose it when the lease ran out, and another would claim it.
	if _, err := svc.SetRules(ctx, []byte(demoRules), "coagent demo"); err != nil {
		return errors.Join(err, svc.Shutdown(context.Background()))
	}
	where := "removed at the end"
	if keep != "" {
		where = "kept"
	}
	out.printf("coagent demo: seed %d, %d writers; coordinator on %s (embedded NATS with JetStream), data in %s (%s)\n\n",
		seed, writers, ns.ClientURL(), dir, where)

	timeout := demoTimeout
	if approve {
		timeout = demoApproveTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	res, runErr := team.Run(rctx, team.Config{Connect: connect, Seed: seed, Writers: writers, Approve: approve, OnEvent: func(ev team.Event) {
		out.printf("  %8s  %-10s  %s\n", fmt.Sprintf("+%.1fms", float64(ev.At.Microseconds())/1000), ev.Agent, ev.Text)
		if ev.Kind == team.Approval && approve {
			out.printf("\n  your turn, as the editor: coagent case show %s --nats %s\n", ev.Case, ns.ClientURL())
			out.printf("                            coagent case approve %s --agent editor --nats %s\n\n", ev.Case, ns.ClientURL())
		}
	}})
	cancel()
	stop, cancelStop := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelStop()
	if err := svc.Shutdown(stop); err != nil {
		return errors.Join(runErr, fmt.Errorf("shutdown: %w", err))
	}
	if runErr != nil {
		return runErr
	}
	// The coordinator has stopped: its engine is the live state as it
	// ended, which the replay below must reproduce from the log alone.
	live := svc.Core().Engine()
	liveHash, liveRev, liveSeq := replay.Hash(live.State()), live.State().Rev(), live.Seq()
	nc.Close()
	ns.Shutdown()

	log, err := openLog(dir)
	if err != nil {
		return err
	}
	defer log.Close()
	var stats team.Stats
	if err := log.Scan(1, 0, func(ev *intents.Event) error { stats.AddEvent(ev); return nil }); err != nil {
		return fmt.Errorf("scan the log: %w", err)
	}
	replayed, err := replay.Run(log, replay.Options{})
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	replayHash, replayRev := replay.Hash(replayed.State()), replayed.State().Rev()

	out.printf("\nfinal report (read at rev %d, published at rev %d once the editor approved)\n\n", res.Rev, res.Published)
	for line := range strings.Lines(res.Report) {
		if line != "\n" {
			line = "  " + line
		}
		out.printf("%s", line)
	}
	out.printf("\nstatistics (from the event log: %d events; the team ran %s)\n", stats.Events, round(res.Elapsed))
	printStats(out, &stats, res.Latencies)

	out.printf("\nreplay (the log folded from its first event, as `coagent replay` does)\n")
	out.printf("  live      seq %-5d rev %-5d sha256 %s\n", liveSeq, liveRev, liveHash)
	out.printf("  replayed  seq %-5d rev %-5d sha256 %s\n", replayed.Seq(), replayRev, replayHash)
	var bad []string
	if replayHash != liveHash || replayRev != liveRev {
		bad = append(bad, "the replayed state differs from the live one")
	}
	if !res.Told.SameDecisions(&stats) {
		bad = append(bad, fmt.Sprintf("the agents were told other decisions than the log recorded: told %s, logged %s",
			outcomeList(res.Told.Outcomes), outcomeList(stats.Outcomes)))
	}
	if len(bad) > 0 {
		out.printf("  MISMATCH: %s\n", strings.Join(bad, "; "))
		return exitError(1)
	}
	out.printf("  equal: the log alone rebuilds the state the coordinator ended with\n")
	return nil
}

// demoDir returns the data directory: keep if set (it must be new or
// empty, for the scenario starts from an empty state), else a temporary one
// that cleanup removes.
func demoDir(keep string) (dir string, cleanup func(), err error) {
	if keep == "" {
		dir, err := os.MkdirTemp("", "coagent-demo-")
		if err != nil {
			return "", nil, err
		}
		return dir, func() { os.RemoveAll(dir) }, nil
	}
	if err := os.MkdirAll(keep, 0o755); err != nil {
		return "", nil, fmt.Errorf("--keep: %w", err)
	}
	entries, err := os.ReadDir(keep)
	if err != nil {
		return "", nil, fmt.Errorf("--keep: %w", err)
	}
	if len(entries) > 0 {
		return "", nil, fmt.Errorf("--keep %s: the directory is not empty; the demo starts from an empty state", keep)
	}
	abs, err := filepath.Abs(keep)
	if err != nil {
		return "", nil, fmt.Errorf("--keep: %w", err)
	}
	return abs, func() {}, nil
}

func printStats(out *lockedWriter, s *team.Stats, latencies []time.Duration) {
	row := func(label string, n int, note string) {
		out.printf("%s\n", strings.TrimRight(fmt.Sprintf("  %-26s %5d   %s", label, n, note), " "))
	}
	row("intents", s.Intents, "")
	row("decisions", s.Decisions, "final and interim (queued, escalated)")
	for _, o := range intents.Outcomes {
		n := s.Outcomes[o]
		if n == 0 {
			continue
		}
		note := ""
		if o == intents.OutcomeRejected {
			var rs []string
			for _, r := range intents.Reasons {
				if s.Reasons[r] > 0 {
					rs = append(rs, fmt.Sprintf("%s %d", r, s.Reasons[r]))
				}
			}
			note = strings.Join(rs, ", ")
		}
		row("  "+string(o), n, note)
	}
	total, kinds := 0, []string{}
	for _, k := range slices.Sorted(maps.Keys(s.Conflicts)) {
		total += s.Conflicts[k]
		kinds = append(kinds, fmt.Sprintf("%s %d", k, s.Conflicts[k]))
	}
	row("conflicts", total, strings.Join(kinds, ", "))
	row("merges (disjoint edits)", s.Merges, "decisions naming merged_with")
	row("waits", s.Waits, "intents queued behind a transaction")
	row("escalations", s.Escalations, fmt.Sprintf("resolved by the arbiter: %d", s.Resolutions))
	row("approvals", s.Approvals, fmt.Sprintf("intents held for approval; votes: %d", s.Votes))
	row("notices", s.Notices, "advisories to transaction holders")
	out.printf("  %-26s p50 %s  p99 %s  (%d intents, from submission to final decision)\n", "decision latency",
		round(team.Percentile(latencies, 0.50)), round(team.Percentile(latencies, 0.99)), len(latencies))
}

func outcomeList(m map[intents.Outcome]int) string {
	var parts []string
	for _, o := range intents.Outcomes {
		if m[o] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", o, m[o]))
		}
	}
	return strings.Join(parts, ", ")
}

// lockedWriter serializes writes from several goroutines: the demo's
// team's live lines, serve's lines and a cluster member's.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format, args...)
}
