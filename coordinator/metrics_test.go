package coordinator

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads reg as Prometheus does, over HTTP in the text format, and
// parses it with Prometheus's own text parser.
func scrape(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.PanicOnError}).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("scrape: content type %q", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	return fams
}

// countedMetrics are the counters (and the histogram counts) a decision
// moves; the scripted run checks each of their series after every step.
var countedMetrics = []string{"coagent_intents_received_total", "coagent_decisions_total",
	"coagent_duplicate_decisions_total", "coagent_conflicts_total", "coagent_escalations_total",
	"coagent_dead_letters_total", "coagent_decision_latency_seconds"}

// counts flattens the counted series of fams to name{labels} → value (a
// histogram's: its count).
func counts(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, name := range countedMetrics {
		f := fams[name]
		if f == nil {
			continue
		}
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				if l.GetValue() != "" {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Histogram != nil:
				out[key] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

// gauge is the value of a gauge without labels (-1: absent).
func gauge(fams map[string]*dto.MetricFamily, name string) float64 {
	f := fams[name]
	if f == nil || len(f.Metric) != 1 || f.Metric[0].Gauge == nil {
		return -1
	}
	return f.Metric[0].Gauge.GetValue()
}

// TestMetricsScriptedRun: an apply, a conflict, a wait, an expiry, an
// escalation, a duplicate and an arbiter's deadline each move exactly the
// counters they should, and nothing else; the gauges of what is open follow
// the engine; the exposition parses with Prometheus's text parser.
func TestMetricsScriptedRun(t *testing.T) {
	ns := natstest.Run(t)
	clock := &protoClock{}
	opts := Options{Now: clock.Now}
	opts.Core.Engine.ArbiterTimeout = 5 * time.Second
	svc := startService(t, ns, t.TempDir(), opts)
	if svc.Registry() == nil {
		t.Fatal("a service without Options.Metrics has no registry of its own")
	}
	w := &protoWire{t: t, nc: natstest.Connect(t, ns), clock: clock,
		dec: map[string]*nats.Subscription{}, notices: map[string]*nats.Subscription{}, waiting: map[string][]string{}}
	fams := scrape(t, svc.Registry())
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "coagent_log_last_seq", "coagent_log_size_bytes",
		"coagent_feed_publish_pending", "coagent_group_intents", "coagent_log_sync_seconds", "coagent_group_durable_seconds",
		"coagent_intent_stage_seconds", "coagent_log_fsync_seconds"} {
		if fams[name] == nil {
			t.Errorf("no %s in the exposition", name)
		}
	}
	before := counts(fams)
	if len(before) == 0 {
		t.Fatal("no counted series at start")
	}
	for k, v := range before {
		if v != 0 {
			t.Fatalf("%s = %v at start", k, v)
		}
	}
	// step checks that what ran since the last step moved exactly want
	// (series → increase), and returns the scrape.
	step := func(what string, want map[string]float64) map[string]*dto.MetricFamily {
		t.Helper()
		fams := scrape(t, svc.Registry())
		after := counts(fams)
		for _, k := range slices.Sorted(maps.Keys(after)) {
			if got := after[k] - before[k]; got != want[k] {
				t.Errorf("%s: %s moved by %v, want %v", what, k, got, want[k])
			}
		}
		for k := range want {
			if _, ok := after[k]; !ok {
				t.Errorf("%s: no series %s", what, k)
			}
		}
		before = after
		return fams
	}
	gauges := func(what string, fams map[string]*dto.MetricFamily, txns, waiters, cases float64) {
		t.Helper()
		for name, want := range map[string]float64{"coagent_txns_in_flight": txns, "coagent_waiters_parked": waiters, "coagent_arbiter_cases_open": cases} {
			if got := gauge(fams, name); got != want {
				t.Errorf("%s: %s = %v, want %v", what, name, got, want)
			}
		}
	}

	_, applyA := protoIntent(fmtSet, "a", "doc.a", "1")
	mustOutcome(t, w.submitAs("a", applyA, 0), intents.OutcomeApplied, "")
	fams = step("apply", map[string]float64{
		"coagent_intents_received_total{path=api}":          1,
		"coagent_decisions_total{outcome=applied,path=api}": 1,
		"coagent_decision_latency_seconds{path=api}":        1,
	})
	if gauge(fams, "coagent_log_last_seq") < 2 {
		t.Errorf("coagent_log_last_seq = %v after an apply", gauge(fams, "coagent_log_last_seq"))
	}
	gauges("apply", fams, 0, 0, 0)
	if f := fams["coagent_log_fsync_seconds"]; f == nil || f.Metric[0].Histogram.GetSampleCount() == 0 || f.Metric[0].Histogram.GetSampleSum() <= 0 {
		t.Errorf("coagent_log_fsync_seconds counts no fsync after a durable apply: %v", f)
	}

	_, propose := protoIntent(fmtProposeL, "b", 1000, "doc.t")
	mustOutcome(t, w.submitAs("b", propose, 0), intents.OutcomeGranted, "")
	fams = step("propose", map[string]float64{
		"coagent_intents_received_total{path=api}":          1,
		"coagent_decisions_total{outcome=granted,path=api}": 1,
		"coagent_decision_latency_seconds{path=api}":        1,
	})
	gauges("propose", fams, 1, 0, 0)

	_, clash := protoIntent(fmtSet, "c", "doc.t", "2")
	mustOutcome(t, w.submitAs("c", clash, 0), intents.OutcomeRejected, intents.ReasonConflict)
	step("conflict", map[string]float64{
		"coagent_intents_received_total{path=api}":                           1,
		"coagent_decisions_total{outcome=rejected,path=api,reason=conflict}": 1,
		"coagent_conflicts_total{kind=write-write}":                          1,
		"coagent_decision_latency_seconds{path=api}":                         1,
	})

	// A waiter, through the intents stream.
	_, wait := protoIntent(fmtWaitSet, "d", "doc.t", "3")
	w.publish("d", wait)
	mustOutcome(t, w.next("d"), intents.OutcomeQueued, "")
	fams = step("wait", map[string]float64{
		"coagent_intents_received_total{path=stream}":         1,
		"coagent_decisions_total{outcome=queued,path=stream}": 1,
		"coagent_conflicts_total{kind=write-write}":           1,
		"coagent_decision_latency_seconds{path=stream}":       1,
	})
	gauges("wait", fams, 1, 1, 0)

	// The lease ends: the transaction expires, and the waiter is decided
	// again, and applied.
	clock.Advance(2 * time.Second)
	w.poke()
	mustOutcome(t, w.next("d"), intents.OutcomeApplied, "")
	fams = step("expire", map[string]float64{
		"coagent_decisions_total{outcome=applied,path=stream}": 1,
	})
	gauges("expire", fams, 0, 0, 0)

	_, hold := protoIntent(fmtProposeL, "e", 600000, "doc.u")
	mustOutcome(t, w.submitAs("e", hold, 0), intents.OutcomeGranted, "")
	_, esc := protoIntent(`{"id":%q,"agent":%q,"kind":"apply","on_conflict":"escalate","writes":[{"path":%q,"op":"set","value":%s}]}`, "f", "doc.u", "4")
	w.decisions("f") // its final decision is stored: no request waits for it then
	mustOutcome(t, w.submitAs("f", esc, 0), intents.OutcomeEscalated, "")
	fams = step("escalate", map[string]float64{
		"coagent_intents_received_total{path=api}":            2,
		"coagent_decisions_total{outcome=granted,path=api}":   1,
		"coagent_decisions_total{outcome=escalated,path=api}": 1,
		"coagent_conflicts_total{kind=write-write}":           1,
		"coagent_escalations_total{}":                         1,
		"coagent_decision_latency_seconds{path=api}":          2,
	})
	gauges("escalate", fams, 1, 0, 1)

	// The same apply again: its recorded decision, a duplicate.
	if d := w.submitAs("a", applyA, 0); !d.Duplicate {
		t.Fatalf("the same intent again: %+v", d)
	}
	step("duplicate", map[string]float64{
		"coagent_intents_received_total{path=api}":    1,
		"coagent_duplicate_decisions_total{path=api}": 1,
		"coagent_decision_latency_seconds{path=api}":  1,
	})

	// No arbiter: at the deadline the fallback rejects the case, which goes
	// to the dead letters.
	clock.Advance(6 * time.Second)
	w.poke()
	mustOutcome(t, w.next("f"), intents.OutcomeRejected, intents.ReasonArbiterRejected)
	fams = step("deadline", map[string]float64{
		"coagent_decisions_total{outcome=rejected,path=api,reason=arbiter_rejected}": 1,
		"coagent_dead_letters_total{}": 1,
	})
	gauges("deadline", fams, 1, 0, 0)
	// Every intent's time is split into its stages, each observed once
	// per intent, as its decision latency is.
	fams = scrape(t, svc.Registry())
	var intentsSeen uint64
	for _, m := range fams["coagent_decision_latency_seconds"].GetMetric() {
		intentsSeen += m.GetHistogram().GetSampleCount()
	}
	stages := map[string]uint64{}
	for _, m := range fams["coagent_intent_stage_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			stages[l.GetValue()] = m.GetHistogram().GetSampleCount()
		}
	}
	for _, stage := range []string{"decide", "commit", "durable"} {
		if intentsSeen == 0 || stages[stage] != intentsSeen {
			t.Errorf("stage %s observed %d times, for %d intents", stage, stages[stage], intentsSeen)
		}
	}
	if t.Failed() {
		var lines []string
		for _, k := range slices.Sorted(maps.Keys(before)) {
			if before[k] != 0 {
				lines = append(lines, fmt.Sprintf("  %s %v", k, before[k]))
			}
		}
		t.Logf("counts at the end:\n%s", strings.Join(lines, "\n"))
	}
}

// TestMetricsRegisterer: a service registers in the registerer it is
// given, without Go or process collectors of its own, and leaves it at
// Shutdown, so that the next one registers there again.
func TestMetricsRegisterer(t *testing.T) {
	ns := natstest.Run(t)
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	for i := range 2 {
		svc, err := Start(t.Context(), natstest.Connect(t, ns), dir, Options{Metrics: reg})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Registry() != nil {
			t.Fatal("a service given Options.Metrics made a registry of its own")
		}
		fams := scrape(t, reg)
		if fams["coagent_decisions_total"] == nil || fams["coagent_txns_in_flight"] == nil {
			t.Fatalf("start %d: the service's metrics are not in the registerer given", i)
		}
		if fams["go_goroutines"] != nil {
			t.Fatal("the service registered Go collectors in a registerer it was given")
		}
		if err := svc.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		if fams := scrape(t, reg); len(fams) != 0 {
			t.Fatalf("after Shutdown the registerer still has %v", slices.Collect(maps.Keys(fams)))
		}
	}
}
