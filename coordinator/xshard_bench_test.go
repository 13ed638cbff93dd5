package coordinator

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// BenchmarkShardApply measures an apply of two paths on two shards
// (tasks on the default shard, report on s2) by agents that know nothing
// of shards, against the same apply with both paths on the default
// shard, in one run:
//
//	one-shard/agents=N     both paths on the default shard
//	cross-shard/agents=N   one path on each: two-phase commit
//
// Each agent writes paths of its own, so no apply conflicts with
// another's: what is measured is the protocol, two more round trips
// between coordinators and two more log appends, not contention. The
// durable figures are per apply (ns/op, and applies/s).
//
//	go test ./coordinator -run XXX -bench BenchmarkShardApply -benchtime 3s
func BenchmarkShardApply(b *testing.B) {
	ns := natstest.Run(b)
	def, _ := shardOf(b, ns, "")
	s2, _ := shardOf(b, ns, "s2")
	moveBoard(b, def, s2, "report")
	for _, agents := range []int{1, 16} {
		for _, c := range []struct {
			name  string
			other string
		}{{"one-shard", "tasks"}, {"cross-shard", "report"}} {
			b.Run(fmt.Sprintf("%s/agents=%d", c.name, agents), func(b *testing.B) {
				ncs := make([]*nats.Conn, agents)
				for i := range ncs {
					ncs[i] = natstest.Connect(b, ns)
				}
				var next atomic.Int64
				var failed atomic.Value
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for i := range agents {
					wg.Go(func() {
						agent := fmt.Sprintf("b%d", i)
						for next.Add(1) <= int64(b.N) {
							body := fmt.Sprintf(`{"id":%q,"agent":%q,"kind":"apply","writes":[{"path":"tasks.%s","op":"incr","value":1},{"path":"%s.%s","op":"incr","value":1}]}`,
								ulid.Make().String(), agent, agent, c.other, agent+"x")
							d, err := natstest.RequestErr[intents.Decision](ncs[i], intents.Subjects{}.Submit(agent), body, 30*time.Second)
							if err != nil || d.Outcome != intents.OutcomeApplied {
								failed.Store(fmt.Sprintf("%+v %v", d, err))
								return
							}
						}
					})
				}
				wg.Wait()
				if f := failed.Load(); f != nil {
					b.Fatal(f)
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "applies/s")
			})
		}
	}
}
