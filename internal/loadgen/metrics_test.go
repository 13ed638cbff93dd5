package loadgen

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// What the coordinator did between two readings of its registry: each
// stage's mean, the group commits and their events, the fsyncs with their
// median and 99th percentile as the upper bounds of their buckets.
func TestAddCoordinator(t *testing.T) {
	reg := prometheus.NewRegistry()
	stage := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coagent_intent_stage_seconds"}, []string{"stage"})
	syncs := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "coagent_log_sync_seconds"})
	events := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "coagent_log_sync_events"})
	fsync := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "coagent_log_fsync_seconds", Buckets: []float64{0.001, 0.01, 0.1}})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coagent_decision_latency_seconds"}, []string{"path"})
	reg.MustRegister(stage, syncs, events, fsync, latency)
	stage.WithLabelValues("decide").Observe(4)   // before: not counted
	latency.WithLabelValues("stream").Observe(9) // before: not counted
	fsync.Observe(0.05)
	before := readMetrics(reg)
	stage.WithLabelValues("decide").Observe(0.25)
	stage.WithLabelValues("decide").Observe(0.5)
	latency.WithLabelValues("api").Observe(0.001)
	latency.WithLabelValues("api").Observe(0.002)
	latency.WithLabelValues("stream").Observe(0.003)
	syncs.Observe(0.001)
	syncs.Observe(0.003)
	events.Observe(3)
	events.Observe(5)
	for range 98 {
		fsync.Observe(0.0005)
	}
	fsync.Observe(0.005)
	fsync.Observe(0.05)
	var r Result
	r.addCoordinator(before, readMetrics(reg))
	if r.Stages["decide"] != 375*time.Millisecond || r.Stages["sync"] != 2*time.Millisecond || r.Stages["coordinator"] != 2*time.Millisecond || len(r.Stages) != 3 {
		t.Errorf("stages %v", r.Stages)
	}
	if r.Syncs != 2 || r.EventsPerSync != 4 {
		t.Errorf("syncs %d, %v events each", r.Syncs, r.EventsPerSync)
	}
	if f := r.Fsyncs; f == nil || f.Count != 100 || f.P50 != time.Millisecond || f.P99 != 10*time.Millisecond {
		t.Errorf("fsyncs %+v", f)
	}
	var none Result
	none.addCoordinator(readMetrics(nil), readMetrics(nil))
	if none.Stages != nil || none.Fsyncs != nil || none.Syncs != 0 {
		t.Errorf("no registry: %+v", none)
	}
}
