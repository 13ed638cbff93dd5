package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/bugs"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
)

// The faults of a cluster run, chosen by its seed at each turn.
const (
	faultKillActive  = "kill-active"  // SIGKILL the active member, start it again
	faultPauseActive = "pause-active" // SIGSTOP it for 1.5–3 leases, then SIGCONT: it comes back deposed
	faultKillStandby = "kill-standby" // SIGKILL a standby, start it again
	faultRestartNode = "restart-node" // stop a NATS node, start it again on its store after up to a second
	faultJumpActive  = "jump-active"  // the active member's clock jumps forward by clockJump
	faultReplaceNode = "replace-node" // stop a NATS node, delete its JetStream store, start it again: a node replaced
)

// TestClusterFaults is the cluster's run: three NATS nodes, three
// coordinators as members of a cluster (leases of a second), the eight
// agents on all three nodes' URLs, and at moments the seed chooses the
// active member killed, a standby killed, or a NATS node stopped and
// started again on its store; with -fault pause-active, the active member
// paused past its lease too (another takes over, and the paused one
// resumes with groups in flight). The history is checked as in the
// single-node run, and so is every member's log, which must all end at
// the same event with the same state.
func TestClusterFaults(t *testing.T) {
	planted := runsPlanted(t)
	forSeeds(t, func(t *testing.T, seed uint64) {
		t.Logf("seed %d: go test ./tests/robustness -run 'TestClusterFaults' -seed %d -bugs '%s'", seed, seed, planted)
		var kinds []string
		if *faultFlag != "" {
			kinds = strings.Split(*faultFlag, ",")
		}
		if err := clusterRun(t, run{seed: seed, planted: planted, traffic: *forFlag, faults: kinds,
			every: [2]time.Duration{time.Second, 2500 * time.Millisecond}, resends: true, report: true}); err != nil {
			t.Fatal(err)
		}
	})
}

// member is one coordinator process of a cluster run.
type member struct {
	name, dir string
	proc      *child
}

// clusterRun runs the traffic against three members with the faults the
// seed chooses, and returns what the checks found.
func clusterRun(t *testing.T, r run) error {
	rng := rand.New(rand.NewPCG(r.seed, 0))
	c := natstest.RunCluster(t, 3)
	urls := c.URLs()
	connect := func() *nats.Conn {
		nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	var members []*member
	for i := range 3 {
		m := &member{name: fmt.Sprintf("c%d", i+1), dir: filepath.Join(t.TempDir(), "data")}
		m.proc = startChild(t, urls, m.dir, m.name, r.planted, faultKill)
		members = append(members, m)
	}
	t.Cleanup(func() {
		for _, m := range members {
			_ = m.proc.cmd.Process.Signal(syscall.SIGCONT)
			m.proc.kill()
		}
	})
	nc := connect()
	subj := intents.Subjects{}
	if err := awaitLevel(nc, subj, members, 60*time.Second); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), r.traffic)
	defer cancel()
	tr := startTraffic(ctx, t, r, connect)
	ws := startWatchers(t, connect)
	kinds := r.faults
	if len(kinds) == 0 {
		kinds = []string{faultKillActive, faultKillStandby, faultRestartNode, faultReplaceNode, faultPauseActive, faultJumpActive}
	}
	faults := map[string]int{}
	for {
		pause := r.every[0] + time.Duration(rng.Int64N(int64(r.every[1]-r.every[0])))
		select {
		case <-ctx.Done():
		case <-time.After(pause):
			fault := kinds[rng.IntN(len(kinds))]
			if fault == faultRestartNode || fault == faultReplaceNode {
				faults[fault]++
				n := rng.IntN(len(c.Servers))
				c.Stop(n)
				if fault == faultReplaceNode {
					c.Wipe(n)
				}
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
				c.Restart(n)
				continue
			}
			active, standbys := roles(nc, subj, members)
			var m *member
			switch {
			case fault == faultKillStandby && len(standbys) > 0:
				m = standbys[rng.IntN(len(standbys))]
			case fault != faultKillStandby && active != nil:
				m = active
			default:
				continue // no one in that role now
			}
			faults[fault]++
			if fault == faultJumpActive {
				m.proc.jump()
				continue
			}
			if fault == faultPauseActive {
				_ = m.proc.cmd.Process.Signal(syscall.SIGSTOP)
				time.Sleep(1500*time.Millisecond + time.Duration(rng.IntN(1500))*time.Millisecond)
				_ = m.proc.cmd.Process.Signal(syscall.SIGCONT)
				continue
			}
			m.proc.kill()
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			m.proc = startChild(t, urls, m.dir, m.name, r.planted, faultKill)
			continue
		}
		break
	}
	tr.wg.Wait()
	// A log the members cannot all follow is caught here: nothing else
	// can be asked of the cluster then.
	if err := awaitLevel(nc, subj, members, 30*time.Second); err != nil {
		return err
	}
	st := tr.settle(t, nc)
	t.Logf("%d operations (%s), faults %v, %s", len(tr.h.ops), tr.h.mix(tr.reclaimed()), faults, st)
	if err := awaitLevel(nc, subj, members, 60*time.Second); err != nil {
		return err
	}
	werr := awaitWatchers(ws, nc, subj, 30*time.Second)
	if err := awaitLevel(nc, subj, members, 60*time.Second); err != nil {
		return err
	}
	for _, m := range members {
		m.proc.stop()
	}
	errs := []error{werr, checkRevs(tr.h.ops), checkFences(tr.h.ops), check(t, r.seed, tr.h.ops, r.report)}
	errs = append(errs, checkMembers(t, members, tr.h)...)
	changes, err := logChanges(members[0].dir)
	if err == nil {
		err = checkWatchers(ws, changes, true)
	}
	return errors.Join(append(errs, err)...)
}

// checkMembers checks each member's log as checkLog does, and that all
// of them fold to the same state at the same event.
func checkMembers(t *testing.T, members []*member, h *history) []error {
	var errs []error
	var first string
	for _, m := range members {
		if err := checkLog(t, m.name, m.dir, h.ops); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
		}
		l, err := eventlog.Open(m.dir, &eventlog.Options{})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: open the log: %w", m.name, err))
			continue
		}
		hash, err := replay.Verify(l, coordinator.CoreOptions{}.Engine, nil)
		got := fmt.Sprintf("event %d, state %s", l.LastSeq(), hash)
		l.Close()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: verify the log: %w", m.name, err))
		case first == "":
			first = got
		case got != first:
			errs = append(errs, fmt.Errorf("%s's log ends at %s, %s's at %s", m.name, got, members[0].name, first))
		}
	}
	return errs
}

// statuses gathers the members' statuses (coagent.cluster.status), those
// that answer within a moment.
func statuses(nc *nats.Conn, subj intents.Subjects) []intents.MemberStatus {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subj.Status(), inbox, nil); err != nil {
		return nil
	}
	var out []intents.MemberStatus
	for deadline := time.Now().Add(500 * time.Millisecond); ; {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return out
		}
		var st intents.MemberStatus
		if json.Unmarshal(m.Data, &st) == nil {
			out = append(out, st)
		}
	}
}

// roles returns the active member, as the members say, and the standbys.
func roles(nc *nats.Conn, subj intents.Subjects, members []*member) (active *member, standbys []*member) {
	byName := map[string]*member{}
	for _, m := range members {
		byName[m.name] = m
	}
	for _, st := range statuses(nc, subj) {
		switch m := byName[st.Node]; {
		case m == nil:
		case st.Role == intents.RoleActive:
			active = m
		case st.Role == intents.RoleStandby:
			standbys = append(standbys, m)
		}
	}
	return active, standbys
}

// awaitLevel waits until every member answers, one of them active, each
// at the same event with nothing of the replicated log left to fold; it
// returns the last mismatch if that does not come within d.
func awaitLevel(nc *nats.Conn, subj intents.Subjects, members []*member, d time.Duration) error {
	level := func() error {
		sts := statuses(nc, subj)
		if len(sts) != len(members) {
			return fmt.Errorf("%d members of %d answered", len(sts), len(members))
		}
		active := 0
		for _, st := range sts {
			if st.Role == intents.RoleActive {
				active++
			}
			if st.Seq != sts[0].Seq || st.LagGroups != 0 || st.LogSeq != st.LogLast {
				return fmt.Errorf("members %+v", sts)
			}
		}
		if active != 1 {
			return fmt.Errorf("%d active: %+v", active, sts)
		}
		return nil
	}
	err := level()
	for deadline := time.Now().Add(d); err != nil && time.Now().Before(deadline); err = level() {
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("the members are not level after %s: %w", d, err)
	}
	return nil
}

// TestClusterChecksCatchBugs plants each bug of internal/bugs that shows
// in a cluster only and runs the cluster, the active member killed
// 0.3–0.8 s after it took over, until the checks catch it, six runs at
// most. unchained-reads is left to TestMemberSkipsOrphans (coordinator),
// which stores the orphans it needs: paused leaders leave one here in
// about one run of five, too seldom for six runs to catch it every time.
func TestClusterChecksCatchBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("the robustness runs take seconds each")
	}
	for _, name := range bugs.Names() {
		if !bugs.InCluster(name) {
			continue // TestChecksCatchBugs
		}
		if name == "unchained-reads" {
			continue // see above
		}
		t.Run(name, func(t *testing.T) {
			planted, err := bugs.Parse(name)
			if err != nil {
				t.Fatal(err)
			}
			for try := 1; try <= 6; try++ {
				seed := rand.Uint64()
				var found error
				t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
					found = clusterRun(t, run{seed: seed, planted: planted, traffic: 10 * time.Second, faults: []string{faultKillActive},
						every: [2]time.Duration{300 * time.Millisecond, 800 * time.Millisecond}})
				})
				if found != nil {
					t.Logf("caught at run %d: %v", try, found)
					return
				}
			}
			t.Errorf("six runs with %s planted passed the checks", name)
		})
	}
}
