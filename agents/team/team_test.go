package team_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/agents/team"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
)

// coordinatorURL starts NATS with JetStream and a coordinator, in-process,
// for one test. Only the test reaches the coordinator; the team speaks the
// wire contract.
func coordinatorURL(t *testing.T) string {
	t.Helper()
	ns := natstest.Run(t)
	coordtest.Start(t, ns, coordinator.Options{})
	return ns.ClientURL()
}

func TestDemoTeamRun(t *testing.T) {
	const writers = 3
	winners := map[string]bool{}
	for _, seed := range []uint64{1, 2} {
		var mu sync.Mutex
		kinds := map[team.EventKind]int{}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := team.Run(ctx, team.Config{URL: coordinatorURL(t), Seed: seed, Writers: writers, OnEvent: func(ev team.Event) {
			mu.Lock()
			defer mu.Unlock()
			kinds[ev.Kind]++
		}})
		cancel()
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		winners[res.IntroBy] = true

		// Every writer owns one section; the report cites one material per
		// section, the demoted one among them.
		var owners []string
		demoted := 0
		for _, s := range res.Sections {
			owners = append(owners, s.Owner)
			if s.Text == "" || s.Source == "" {
				t.Errorf("seed %d: section %+v", seed, s)
			}
			if s.SourceStatus == "demoted" {
				demoted++
				if s.Cites != res.Demoted {
					t.Errorf("seed %d: %s is demoted, the editor demoted %s", seed, s.Cites, res.Demoted)
				}
			}
		}
		slices.Sort(owners)
		if !slices.Equal(owners, []string{"writer-1", "writer-2", "writer-3"}) || demoted != 1 {
			t.Errorf("seed %d: owners %v, %d demoted", seed, owners, demoted)
		}
		if !strings.Contains(res.Report, res.Intro[:40]) || !strings.Contains(res.Report, "demoted]") {
			t.Errorf("seed %d: report\n%s", seed, res.Report)
		}

		// What the agents were told: one claim lost, one wait, one
		// escalation, every grant but the first and every commit merged.
		s := res.Told
		// The clash's loser: writer-1's transaction preempted, or
		// writer-2's rewrite rejected.
		lost := s.Outcomes[intents.OutcomeAborted]
		if res.IntroBy == "writer-1" {
			lost = s.Reasons[intents.ReasonArbiterRejected]
		}
		if s.Reasons[intents.ReasonPreconditionFailed] != 1 || s.Waits != 1 || s.Escalations != 1 || lost != 1 ||
			s.Merges != 2*writers-1 || s.Conflicts[intents.ConflictReadWrite] != 2 || s.Conflicts[intents.ConflictWriteWrite] != 1 ||
			s.Outcomes[intents.OutcomeRenewed] != 0 {
			t.Errorf("seed %d (intro by %s): told %d intents, outcomes %v, reasons %v, conflicts %v, %d merges, %d waits, %d escalations",
				seed, res.IntroBy, s.Intents, s.Outcomes, s.Reasons, s.Conflicts, s.Merges, s.Waits, s.Escalations)
		}
		if len(res.Latencies) != s.Intents {
			t.Errorf("seed %d: %d latencies for %d intents", seed, len(res.Latencies), s.Intents)
		}
		mu.Lock()
		for _, k := range []team.EventKind{team.ClaimWon, team.ClaimLost, team.Merged, team.Queued, team.Told, team.Applied, team.Escalated, team.Settled} {
			if kinds[k] == 0 {
				t.Errorf("seed %d: no %s event (%v)", seed, k, kinds)
			}
		}
		mu.Unlock()
	}
	if len(winners) != 2 {
		t.Errorf("seeds 1 and 2 both kept the intro of %v; the test means to see both sides of the clash win", winners)
	}
}

func TestDemoTeamConfig(t *testing.T) {
	if _, err := team.Run(context.Background(), team.Config{Writers: 1}); err == nil ||
		!strings.Contains(err.Error(), "at least 2") || !strings.Contains(err.Error(), "URL") {
		t.Errorf("Run with 1 writer and no server: %v", err)
	}
}
