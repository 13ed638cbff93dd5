package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
)

// shardBoard is the traffic's board that shard s2 owns in a sharded run;
// rb0 and rb2 stay the default shard's.
const shardBoard = "rb1"

// TestShardKill is the single-node run with two shards: the default
// shard's coordinator and shard s2's, each a process of its own on its
// own data directory, s2 owning the board rb1 (a third of the paths and
// one task). The agents know nothing of shards: they send everything to
// the default shard, which sends on to s2 what s2 decides (by board, or,
// for a claim's renewal that names no path, round the shards). At
// moments the seed chooses, one of the two coordinators, chosen by the
// seed too, is SIGKILLed and started again (with -fault power-cut,
// losing what it had not fsynced). The history is checked as one:
// linearizable path by path; and each shard's own: its log holds every
// decision its agents were told, none twice, its revisions and fences
// only grow.
func TestShardKill(t *testing.T) {
	planted := runsPlanted(t)
	forSeeds(t, func(t *testing.T, seed uint64) {
		fault := *faultFlag
		if fault == "" {
			fault = []string{faultKill, faultPowerCut}[seed%2]
		}
		t.Logf("seed %d, fault %s: go test ./tests/robustness -run 'TestShardKill' -seed %d -fault %s -bugs '%s'", seed, fault, seed, fault, planted)
		if err := shardRun(t, run{seed: seed, planted: planted, fault: fault, traffic: *forFlag,
			every: [2]time.Duration{500 * time.Millisecond, 2 * time.Second}, resends: true, report: true, sharded: true}); err != nil {
			t.Fatal(err)
		}
	})
}

// shardRun runs the traffic against two shards with the faults the seed
// chooses, and returns what the checks found.
func shardRun(t *testing.T, r run) error {
	if r.fault != faultKill && r.fault != faultPowerCut {
		t.Fatalf("fault %q: a sharded run kills a coordinator (kill or power-cut)", r.fault)
	}
	rng := rand.New(rand.NewPCG(r.seed, 0))
	ns := runNATS(t)
	url := ns.url()
	connect := func() *nats.Conn {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	shards := []struct {
		name, dir string
		env       []string
		c         *child
	}{{name: intents.DefaultShard, dir: t.TempDir()}, {name: "s2", dir: t.TempDir(), env: []string{envChildShard + "=s2"}}}
	for i := range shards {
		sh := &shards[i]
		sh.c = startChild(t, url, sh.dir, "", r.planted, r.fault, sh.env...)
		t.Cleanup(func() { sh.c.kill() })
	}
	nc := connect()
	moveBoard(t, nc, shardBoard, "s2")
	setRulesOn(t, nc, intents.Subjects{}.Shard("s2"))

	ctx, cancel := context.WithTimeout(context.Background(), r.traffic)
	defer cancel()
	tr := startTraffic(ctx, t, r, connect)
	kills := map[string]int{}
	for {
		pause := r.every[0] + time.Duration(rng.Int64N(int64(r.every[1]-r.every[0])))
		select {
		case <-ctx.Done():
		case <-time.After(pause):
			sh := &shards[rng.IntN(len(shards))]
			kills[sh.name]++
			sh.c.kill()
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			sh.c = startChild(t, url, sh.dir, "", r.planted, r.fault, sh.env...)
			continue
		}
		break
	}
	tr.wg.Wait()
	st := tr.settle(t, nc)
	t.Logf("%d operations (%s), kills %v (%s), %s", len(tr.h.ops), tr.h.mix(tr.reclaimed()), kills, r.fault, st)
	errs := []error{check(t, r.seed, tr.h.ops, r.report)}
	for i := range shards {
		sh := &shards[i]
		sh.c.stop()
		ops := opsOf(tr.h.ops, sh.name)
		t.Logf("shard %s: %d operations on its boards", sh.name, len(ops))
		errs = append(errs, prefixed("shard "+sh.name, errors.Join(checkLog(t, "shard "+sh.name, sh.dir, ops), checkRevs(ops), checkFences(ops))))
	}
	return errors.Join(errs...)
}

// opsOf are the operations on the paths of shard's boards.
func opsOf(ops []porcupine.Operation, shard string) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range ops {
		if (intents.Board(op.Input.(Input).Path) == shardBoard) == (shard == "s2") {
			out = append(out, op)
		}
	}
	return out
}

func prefixed(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// moveBoard gives board to shard, as coagent shards assign does, once
// both coordinators answer.
func moveBoard(t *testing.T, nc *nats.Conn, board, shard string) {
	t.Helper()
	natstest.CheckFor(t, 30*time.Second, "board "+board+" to shard "+shard, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		_, err := agents.MoveBoard(ctx, nc, intents.Subjects{}, board, intents.DefaultShard, shard)
		return err
	})
}

// setRulesOn puts rulesFile in force on the coordinator of subj.
func setRulesOn(t *testing.T, nc *nats.Conn, subj intents.Subjects) {
	t.Helper()
	file, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 30*time.Second, "rules.set on "+subj.APIGroup(), func() error {
		m, err := nc.Request(subj.API(intents.APIRulesSet), file, requestTimeout)
		if err != nil {
			return err
		}
		if code := apiError(m); code != "" {
			return fmt.Errorf("rules.set: %s %s", code, m.Data)
		}
		return nil
	})
}
