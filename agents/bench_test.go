package agents_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/coordtest"
	"github.com/coagent/coagent/internal/natstest"
)

// BenchmarkClientApply is the round trip of Client.Apply through a real
// coordinator on an embedded server: each of the agents, on a connection
// of its own, sets its own path (no contention), one apply at a time.
func BenchmarkClientApply(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			ns := natstest.Run(b)
			coordtest.Start(b, ns, coordinator.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			clients := make([]*agents.Client, n)
			for i := range clients {
				var err error
				if clients[i], err = agents.Connect(ctx, natstest.Connect(b, ns), fmt.Sprintf("a%d", i)); err != nil {
					b.Fatal(err)
				}
				defer clients[i].Close()
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i, c := range clients {
				ops := b.N / n
				if i < b.N%n {
					ops++
				}
				wg.Go(func() {
					path := fmt.Sprintf("bench.a%d", i)
					for j := range ops {
						if _, err := c.Apply(ctx, intents.Apply("bench").Set(path, j)); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "applies/s")
		})
	}
}
