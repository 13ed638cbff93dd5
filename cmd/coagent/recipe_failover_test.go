package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
)

// recipeKillsEnv names how many kills TestRecipeFailover makes; unset,
// one (ten take a few minutes).
const recipeKillsEnv = "COAGENT_RECIPE_KILLS"

// TestRecipeFailover measures a failover in the deployment the README
// gives first: three `coagent serve --cluster` nodes, each a NATS node and
// a coordinator in one process, with the default lease. Before each kill
// the active coordinator's node is made the leader of COAGENT_LOG and of
// the leadership bucket's stream, of every other stream and of the
// coordinator's durable consumers too, so that one SIGKILL takes them all
// and a takeover waits for JetStream's own elections. It logs, for each
// kill, when each stream answered with a new leader (the election), when a
// survivor said it was the active coordinator, and when the first probe
// increment was applied (decisions resumed), then the killed node is
// started again on its data. The load's checks close it, as in
// TestFailoverUnderLoad. go test ./... makes one kill; the figures of
// docs/cluster.md are of ten:
//
//	COAGENT_RECIPE_KILLS=10 go test ./cmd/coagent -run TestRecipeFailover -v -timeout 30m
func TestRecipeFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 serve --cluster nodes as processes")
	}
	kills := 1
	if env := os.Getenv(recipeKillsEnv); env != "" {
		n, err := strconv.Atoi(env)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of kills, 1 or more", recipeKillsEnv, env)
		}
		kills = n
	}
	c := startRecipeCluster(t)
	l := c.startLoad()
	l.awaitOps(50, 60*time.Second)
	nc, err := nats.Connect(strings.Join(c.urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The streams a coordinator uses, the log and the leadership bucket
	// first: the node killed leads them all.
	subj := intents.Subjects{}
	streams := []string{subj.Stream(intents.StreamLog), "KV_" + subj.LeaderBucket()}
	for _, s := range []string{intents.StreamIntents, intents.StreamDecisions, intents.StreamEvents, intents.StreamArbiter, intents.StreamDLQ} {
		streams = append(streams, subj.Stream(s))
	}
	// And the durable consumers, each a Raft group of its own too:
	// "STREAM.CONSUMER".
	streams = append(streams, subj.Stream(intents.StreamIntents)+".coordinator",
		subj.Stream(intents.StreamArbiter)+"."+intents.ArbitersConsumer)

	var rows []recipeKill
	for round := range kills {
		c.level(60 * time.Second)
		victim := c.activeCoord(30 * time.Second)
		for _, s := range streams {
			leadOn(t, nc, s, victim.name)
		}
		for _, co := range c.coords {
			drain(co.active)
		}
		marks := map[*coordProc]int{}
		for _, co := range c.coords {
			marks[co] = len(co.n.stderr.String())
		}
		killed := time.Now()
		victim.n.kill(t)
		elected := make([]chan time.Duration, len(streams))
		for i, s := range streams {
			elected[i] = make(chan time.Duration, 1)
			go func() { elected[i] <- awaitLeader(nc, s, victim.name, time.Minute).Sub(killed) }()
		}
		at, err := l.probeApplied(time.Minute)
		if err != nil {
			t.Fatalf("kill %d: %s killed: %v; stderr of the others:\n%s", round+1, victim.name, err, c.stderrs(victim))
		}
		r := recipeKill{victim: victim.name, resumed: at.Sub(killed)}
		r.log, r.bucket = <-elected[0], <-elected[1]
		r.all = max(r.log, r.bucket)
		for _, e := range elected[2:] {
			r.all = max(r.all, <-e)
		}
		for _, co := range c.coords {
			select {
			case a := <-co.active:
				r.active, r.next = a.Sub(killed), co.name
			default:
			}
		}
		rows = append(rows, r)
		t.Logf("kill %d: %s (active, leading %s): %s", round+1, victim.name, strings.Join(streams, ", "), r)
		if testing.Verbose() {
			for _, co := range c.coords {
				if co != victim {
					t.Logf("%s after the kill:\n%s", co.name, co.n.stderr.String()[marks[co]:])
				}
			}
		}
		victim.launch(t)
		victim.await(t)
	}
	l.awaitOps(50, 60*time.Second)
	c.finish(l)
	t.Log(recipeSummary(rows))
}

// startRecipeCluster starts three `serve --cluster` nodes, the README's
// recipe, and waits until one coordinator is active.
func startRecipeCluster(t *testing.T) *failoverCluster {
	t.Helper()
	c := &failoverCluster{t: t, dir: t.TempDir()}
	var args [][]string
	c.urls, args = clusterNodes(t, c.dir)
	for i := range 3 {
		name := fmt.Sprintf("n%d", i+1)
		co := &coordProc{name: name, data: filepath.Join(c.dir, name),
			args: append(append([]string{"serve"}, args[i]...), "--http", "off", "-v")}
		co.launch(t)
		c.coords = append(c.coords, co)
	}
	for _, co := range c.coords {
		co.await(t)
	}
	c.activeCoord(60 * time.Second)
	return c
}

// recipeKill is what one kill of TestRecipeFailover measured, each from
// the kill.
type recipeKill struct {
	victim, next string
	log, bucket  time.Duration // the stream answered with a new leader
	all          time.Duration // every stream and consumer had
	active       time.Duration // next said it was active (0: no line seen)
	resumed      time.Duration // the first probe increment applied
}

// election is when every stream and consumer had a leader again.
func (r recipeKill) election() time.Duration { return r.all }

func (r recipeKill) String() string {
	ms := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	return fmt.Sprintf("log's leader %s, bucket's %s, every stream's and consumer's %s, %s active %s, decisions resumed %s (%s past the election)",
		ms(r.log), ms(r.bucket), ms(r.all), r.next, ms(r.active), ms(r.resumed), ms(r.resumed-r.election()))
}

// recipeSummary gives the distributions of rows' figures.
func recipeSummary(rows []recipeKill) string {
	dist := func(f func(recipeKill) time.Duration) string {
		var ds []time.Duration
		for _, r := range rows {
			ds = append(ds, f(r))
		}
		slices.Sort(ds)
		var parts []string
		for _, d := range ds {
			parts = append(parts, strconv.FormatFloat(d.Seconds(), 'f', 2, 64))
		}
		return fmt.Sprintf("median %.2fs, max %.2fs (%s)", ds[len(ds)/2].Seconds(), ds[len(ds)-1].Seconds(), strings.Join(parts, " "))
	}
	return fmt.Sprintf("%d kills of the node leading everything:\n  election (every stream and consumer led again): %s\n  decisions resumed: %s\n  resumed past the election: %s",
		len(rows), dist(recipeKill.election), dist(func(r recipeKill) time.Duration { return r.resumed }),
		dist(func(r recipeKill) time.Duration { return r.resumed - r.election() }))
}

// leadOn makes node the leader of asset (a stream, or "STREAM.CONSUMER"),
// stepping its leader down with node preferred until it is.
func leadOn(t *testing.T, nc *nats.Conn, asset, node string) {
	t.Helper()
	natstest.CheckFor(t, time.Minute, asset+" led by "+node, func() error {
		leader, err := leaderOf(nc, asset)
		if err != nil || leader == node {
			return err
		}
		req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": node}})
		_, err = nc.Request("$JS.API."+apiKind(asset)+".LEADER.STEPDOWN."+asset, req, 2*time.Second)
		return fmt.Errorf("led by %s; asked to step down for %s (%v)", leader, node, err)
	})
}

// apiKind is the JetStream API's word for asset.
func apiKind(asset string) string {
	if strings.Contains(asset, ".") {
		return "CONSUMER"
	}
	return "STREAM"
}

// leaderOf asks for asset's info and returns its leader.
func leaderOf(nc *nats.Conn, stream string) (string, error) {
	m, err := nc.Request("$JS.API."+apiKind(stream)+".INFO."+stream, nil, 500*time.Millisecond)
	if err != nil {
		return "", err
	}
	var info struct {
		Cluster *struct {
			Leader string `json:"leader"`
		} `json:"cluster"`
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return "", err
	}
	if info.Error != nil {
		return "", fmt.Errorf("%s", info.Error.Description)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", fmt.Errorf("%s has no leader", stream)
	}
	return info.Cluster.Leader, nil
}

// awaitLeader returns when stream first answered with a leader other than
// gone, asking every 50ms for at most d.
func awaitLeader(nc *nats.Conn, stream, gone string, d time.Duration) time.Time {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if l, err := leaderOf(nc, stream); err == nil && l != gone {
			return time.Now()
		}
	}
	return time.Now()
}

// drain empties ch.
func drain[T any](ch chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
