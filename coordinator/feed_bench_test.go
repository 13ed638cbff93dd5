package coordinator

import (
	"strconv"
	"testing"
	"time"

	"github.com/coagent/coagent/internal/loadgen"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkFeedPublish measures what the change feed costs the process
// (an embedded server and the publisher, as in serve) per change message
// of 300 bytes into a file stream: acknowledged one by one (acks=1), or
// published plainly with one acknowledgement every 64 (acks=64, what
// publishChanges does). It reports the CPU time, user and system, per
// message.
func BenchmarkFeedPublish(b *testing.B) {
	for _, every := range []int{1, feedAckEvery + 1} {
		b.Run("acks="+strconv.Itoa(every), func(b *testing.B) {
			ns := natstest.Run(b)
			nc := natstest.Connect(b, ns)
			js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxFeedPending/every))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := js.CreateStream(b.Context(), jetstream.StreamConfig{Name: "FEED", Subjects: []string{"feed.>"}}); err != nil {
				b.Fatal(err)
			}
			data := make([]byte, 300)
			before := loadgen.ProcessCPU()
			b.ResetTimer()
			for i := range b.N {
				m := &nats.Msg{Subject: "feed.p" + strconv.Itoa(i%1024), Data: data}
				if (i+1)%every == 0 || i == b.N-1 {
					if _, err := js.PublishMsgAsync(m); err != nil {
						b.Fatal(err)
					}
				} else if err := nc.PublishMsg(m); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("acknowledgements missing")
			}
			b.StopTimer()
			b.ReportMetric(float64(loadgen.ProcessCPU()-before)/float64(b.N), "cpu-ns/msg")
		})
	}
}
