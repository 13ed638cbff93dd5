package loadgen

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// coordinatorMetrics is what Config.Metrics says at one moment: the sum
// and count of each stage of coagent_intent_stage_seconds, of the event
// log's group commits, coagent_log_sync_seconds, as the stage "sync", of
// coagent_decision_latency_seconds (arrival to a durable decision) as
// "coordinator", and
// of coagent_log_sync_events as "sync_events" (its sum a count of events);
// and coagent_log_fsync_seconds.
type coordinatorMetrics struct {
	stages map[string][2]float64
	fsyncs *fsyncHist
}

// readMetrics reads g; nil g (no coordinator of the bench's own) reads
// nothing.
func readMetrics(g prometheus.Gatherer) coordinatorMetrics {
	return coordinatorMetrics{stages: stageTotals(g), fsyncs: fsyncsOf(g)}
}

// addCoordinator puts in r what the coordinator did between before and
// after: the mean of each stage, the group commits and the fsyncs.
func (r *Result) addCoordinator(before, after coordinatorMetrics) {
	r.Fsyncs = after.fsyncs.since(before.fsyncs)
	r.Stages = stageMeans(before.stages, after.stages)
	if ev, ok := after.stages["sync_events"]; ok {
		delete(r.Stages, "sync_events")
		r.Syncs = int(ev[1] - before.stages["sync_events"][1])
		if r.Syncs > 0 {
			r.EventsPerSync = (ev[0] - before.stages["sync_events"][0]) / float64(r.Syncs)
		}
	}
}

// stageTotals reads the stages' sums and counts from g (nil: none).
func stageTotals(g prometheus.Gatherer) map[string][2]float64 {
	if g == nil {
		return nil
	}
	fams, err := g.Gather()
	if err != nil {
		return nil
	}
	out := map[string][2]float64{}
	for _, f := range fams {
		switch f.GetName() {
		case "coagent_log_sync_seconds", "coagent_log_sync_events":
			if len(f.Metric) == 1 {
				h := f.Metric[0].Histogram
				name := "sync"
				if f.GetName() == "coagent_log_sync_events" {
					name = "sync_events"
				}
				out[name] = [2]float64{h.GetSampleSum(), float64(h.GetSampleCount())}
			}
			continue
		case "coagent_decision_latency_seconds":
			// Both paths together: a run sends by one.
			var sum, n float64
			for _, m := range f.Metric {
				sum += m.Histogram.GetSampleSum()
				n += float64(m.Histogram.GetSampleCount())
			}
			out["coordinator"] = [2]float64{sum, n}
			continue
		case "coagent_intent_stage_seconds":
		default:
			continue
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "stage" {
					out[l.GetValue()] = [2]float64{m.Histogram.GetSampleSum(), float64(m.Histogram.GetSampleCount())}
				}
			}
		}
	}
	return out
}

// fsyncHist is coagent_log_fsync_seconds at one moment.
type fsyncHist struct {
	count   uint64
	sum     float64
	buckets []*dto.Bucket
}

// fsyncsOf reads coagent_log_fsync_seconds from g (nil: none).
func fsyncsOf(g prometheus.Gatherer) *fsyncHist {
	if g == nil {
		return nil
	}
	fams, err := g.Gather()
	if err != nil {
		return nil
	}
	for _, f := range fams {
		if f.GetName() == "coagent_log_fsync_seconds" && len(f.Metric) == 1 {
			h := f.Metric[0].Histogram
			return &fsyncHist{count: h.GetSampleCount(), sum: h.GetSampleSum(), buckets: h.Bucket}
		}
	}
	return nil
}

// since is what was observed between before and h: the count, the mean
// and, from the buckets, the median and 99th percentile (each the upper
// bound of the bucket it falls in).
func (h *fsyncHist) since(before *fsyncHist) *Fsyncs {
	if h == nil || before == nil || h.count <= before.count || len(h.buckets) != len(before.buckets) {
		return nil
	}
	n := h.count - before.count
	out := &Fsyncs{Count: int(n), Mean: time.Duration((h.sum - before.sum) / float64(n) * float64(time.Second))}
	quantile := func(q float64) time.Duration {
		for i, b := range h.buckets {
			if float64(b.GetCumulativeCount()-before.buckets[i].GetCumulativeCount()) >= q*float64(n) {
				return time.Duration(b.GetUpperBound() * float64(time.Second))
			}
		}
		return 0
	}
	out.P50, out.P99 = quantile(0.5), quantile(0.99)
	return out
}

// stageMeans is the mean time of each stage between two stageTotals.
func stageMeans(before, after map[string][2]float64) map[string]time.Duration {
	var out map[string]time.Duration
	for stage, a := range after {
		b := before[stage]
		if n := a[1] - b[1]; n > 0 {
			if out == nil {
				out = map[string]time.Duration{}
			}
			out[stage] = time.Duration((a[0] - b[0]) / n * float64(time.Second))
		}
	}
	return out
}
