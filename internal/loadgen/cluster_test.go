package loadgen

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
)

// On a 3-node JetStream cluster the raw publish baseline's stream has the
// replicas asked for: the server's answer to its creation names a Raft
// group of 3 peers with Replicas 3 and of 1 without, so the baseline beside
// a coordinator whose streams are R3 is R3 sync publish. The agents,
// given every node's URL, connect across the nodes.
func TestClusterReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node JetStream cluster")
	}
	c := natstest.RunCluster(t, 3)
	coordtest.Start(t, c.Servers[0], coordinator.Options{Replicas: 3})
	urls := strings.Split(c.URLs(), ",")
	for _, replicas := range []int{3, 1} {
		cfg := Config{URL: c.URLs(), Replicas: replicas, Agents: 12, Duration: 200 * time.Millisecond}
		r, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatalf("replicas %d: %v", replicas, err)
		}
		checkCounts(t, cfg, r)
		if r.RawReplicas != replicas || r.RawThroughput <= 0 {
			t.Errorf("Replicas %d: the raw baseline's stream had %d replicas, %.0f messages a second", replicas, r.RawReplicas, r.RawThroughput)
		}
		agents := 0
		for url, n := range r.Servers {
			if !slices.Contains(urls, url) {
				t.Errorf("agents connected to %s, not one of %v", url, urls)
			}
			agents += n
		}
		// Each agent picks a node at random: all 12 on one node happens
		// once in 177,147 runs.
		if agents != cfg.Agents || len(r.Servers) < 2 {
			t.Errorf("%d agents on the servers %v: want all %d, spread over the nodes %v", agents, r.Servers, cfg.Agents, urls)
		}
	}
}
