package coordinator

import (
	"context"
	"errors"
	"github.com/coagent/coagent/coordinator/notify"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// The service's Prometheus metrics. They are counted at the edges, never
// in the engine: the loop counts what it takes in, the output stage what
// each durable group holds (its decisions, conflicts, cases, dead letters,
// its size and how long it took to be durable), the event log's committer
// its syncs (eventlog.Options.OnSync), and the gauges of what is open now
// (transactions, waiters, cases) are read from the engine on the loop when
// Prometheus asks, so the hot path pays a few atomic adds per intent and
// nothing per scrape. Labels are bounded: the path an intent came by
// (api, stream), the SPEC §3 outcomes and reasons, the SPEC §4 conflict
// kinds; never an agent's name or a state path. docs/observability.md
// explains each.

// Path label values: how an intent came (Via).
const (
	pathAPI    = "api"
	pathStream = "stream"
)

// pathOf is the path label of via.
func pathOf(via Via) string {
	if via == ViaAPI {
		return pathAPI
	}
	return pathStream
}

// scrapeWait bounds how long a scrape waits for the loop to read the
// engine's gauges; past it they are left out of that scrape.
const scrapeWait = 2 * time.Second

// latencyBuckets are the decision latency histogram's buckets, in seconds:
// 100µs to 10s, the range between an unsynced group alone and a submit
// stuck behind a stalled disk.
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// decisionKey is the labels of coagent_decisions_total but the path.
type decisionKey struct {
	outcome intents.Outcome
	reason  intents.Reason
}

// metrics are one Service's collectors. The counters and histograms are
// safe for concurrent use; decided and conflicts, the resolved series,
// are read-only once built.
type metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector

	received    [2]prometheus.Counter // by Via
	latency     [2]prometheus.Observer
	duplicates  [2]prometheus.Counter
	decided     [2]map[decisionKey]prometheus.Counter
	decisions   *prometheus.CounterVec // for a decision decided holds no series of (none today)
	conflicts   map[intents.ConflictKind]prometheus.Counter
	conflictVec *prometheus.CounterVec

	escalations  prometheus.Counter
	shadow       *prometheus.CounterVec
	routedVec    *prometheus.CounterVec
	shard        string
	deadLetters  prometheus.Counter
	reclaims     prometheus.Counter
	deadTasks    prometheus.Counter
	reconciles   prometheus.Counter
	groupIntents prometheus.Observer
	groupDurable prometheus.Observer
	syncEvents   prometheus.Observer
	syncSeconds  prometheus.Observer
	// stages are where an intent's time went, by stage (see stageNames).
	stages [numStages]prometheus.Observer
}

// The stages of an intent's way through the coordinator, for
// coagent_intent_stage_seconds: from its arrival to its decision (the
// intake's queue and the engine), from its decision to its group's commit
// (waiting for the groups on their way to the disk), from the commit to
// the group being durable (the log's write and fsync), and from then to
// its answer being sent.
const (
	stageDecide = iota
	stageCommit
	stageDurable
	stageAnswer
	numStages
)

var stageNames = [numStages]string{"decide", "commit", "durable", "answer"}

// newMetrics builds the service's collectors; register puts them in reg.
// The gauges read s when collected, so s must be set up before the first
// scrape, which register makes possible.
func newMetrics(s *Service) *metrics {
	m := &metrics{}
	received := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coagent_intents_received_total",
		Help: "Intents taken in by the loop, by the path they came by (api: a submit request; stream: COAGENT_INTENTS)."}, []string{"path"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coagent_decision_latency_seconds",
		Help:    "Time from an intent's arrival at the coordinator to its first decision being durable, as it is sent (an interim queued or escalated one for an intent that waits), by path.",
		Buckets: latencyBuckets}, []string{"path"})
	duplicates := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coagent_duplicate_decisions_total",
		Help: "Recorded decisions sent again for an intent id already decided (duplicate: true), by path; not in coagent_decisions_total."}, []string{"path"})
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coagent_decisions_total",
		Help: "Decisions made durable, by path (api: answered to a request; stream: stored on COAGENT_DECISIONS), outcome and reason (reason is empty unless rejected)."},
		[]string{"path", "outcome", "reason"})
	m.conflictVec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coagent_conflicts_total",
		Help: "Conflicts decisions met, by kind (write-write, read-write, write-read, stale): each once, on the decision that met it (rejected, queued or escalated)."}, []string{"kind"})
	m.escalations = prometheus.NewCounter(prometheus.CounterOpts{Name: "coagent_escalations_total",
		Help: "Arbiter cases opened."})
	m.deadLetters = prometheus.NewCounter(prometheus.CounterOpts{Name: "coagent_dead_letters_total",
		Help: "Arbiter cases no arbiter resolved by their deadline, sent to the dead-letter stream."})
	m.reclaims = prometheus.NewCounter(prometheus.CounterOpts{Name: "coagent_task_reclaims_total",
		Help: "Task claims whose lease ended unrenewed: the task went back (its owner removed, its status the rule's reclaim_to) and the old owner was told."})
	m.deadTasks = prometheus.NewCounter(prometheus.CounterOpts{Name: "coagent_task_dead_letters_total",
		Help: "Tasks tried past their rule's max_retries: their status is the rule's dead_to and they are kept in the dead-letter stream."})
	m.reconciles = prometheus.NewCounter(prometheus.CounterOpts{Name: "coagent_task_reconciles_total",
		Help: "Task claims whose lease ended with effects pending: the task was left ownerless, out of the pool, until someone declares each effect (counted in coagent_task_reclaims_total too)."})
	m.shard = s.opts.Shard
	m.routedVec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coagent_routed_total",
		Help: "Submits sent on to the shard that owns their boards, by that shard (docs/sharding.md)."}, []string{"to"})
	m.shadow = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coagent_shadow_divergences_total",
		Help: "Decisions the shadow rules (rules in warn or audit mode, a shadow rules file) would have made otherwise, by the rule that would have (rules[N], invariant NAME, or empty) and the outcome it would have given (with its reason after a colon; error when deciding under them failed)."},
		[]string{"rule", "would_be"})
	groupIntents := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "coagent_group_intents",
		Help:    "Intents decided into one durable group (the batch one synced write makes durable).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12)})
	groupDurable := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "coagent_group_durable_seconds",
		Help:    "Time from a group's commit by the loop to its being durable (in a cluster: stored by a quorum of COAGENT_LOG, then in the local log).",
		Buckets: latencyBuckets})
	syncEvents := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "coagent_log_sync_events",
		Help:    "Events in one group commit of the event log (one synced Pebble write).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14)})
	syncSeconds := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "coagent_log_sync_seconds",
		Help:    "Time one group commit of the event log took, from its write to the end of its fsync.",
		Buckets: latencyBuckets})
	m.groupIntents, m.groupDurable, m.syncEvents, m.syncSeconds = groupIntents, groupDurable, syncEvents, syncSeconds
	stages := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "coagent_intent_stage_seconds",
		Help:    "Where an intent's time went, by stage: decide (arrival to decision: the intake's queue and the engine), commit (decision to its group's commit: the groups on their way to the disk), durable (commit to durable: the log's write and fsync), answer (durable to the output stage taking its group up, as its decision is about to be sent).",
		Buckets: prometheus.ExponentialBuckets(10e-6, 2, 18)}, []string{"stage"})
	for i, name := range stageNames {
		m.stages[i] = stages.WithLabelValues(name)
	}
	m.decided[ViaAPI], m.decided[ViaStream] = map[decisionKey]prometheus.Counter{}, map[decisionKey]prometheus.Counter{}
	for _, via := range []Via{ViaStream, ViaAPI} {
		p := pathOf(via)
		m.received[via] = received.WithLabelValues(p)
		m.latency[via] = latency.WithLabelValues(p)
		m.duplicates[via] = duplicates.WithLabelValues(p)
		// Every series exists from the start, at 0, so that a rate over
		// them is defined before the first such decision.
		for _, o := range intents.Outcomes {
			if o == intents.OutcomeRejected {
				for _, r := range intents.Reasons {
					k := decisionKey{o, r}
					m.decided[via][k] = m.decisions.WithLabelValues(p, string(o), string(r))
				}
				continue
			}
			m.decided[via][decisionKey{outcome: o}] = m.decisions.WithLabelValues(p, string(o), "")
		}
	}
	m.conflicts = map[intents.ConflictKind]prometheus.Counter{}
	for _, k := range []intents.ConflictKind{intents.ConflictWriteWrite, intents.ConflictReadWrite, intents.ConflictWriteRead, intents.ConflictStale} {
		m.conflicts[k] = m.conflictVec.WithLabelValues(string(k))
	}
	m.collectors = []prometheus.Collector{received, latency, duplicates, m.decisions, m.conflictVec,
		m.escalations, m.deadLetters, m.reclaims, m.deadTasks, m.reconciles, m.shadow, m.routedVec, groupIntents, groupDurable, syncEvents, syncSeconds, stages,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coagent_log_last_seq",
			Help: "The sequence number of the event log's last durable event (= the last revision, or past it)."},
			func() float64 { return float64(s.core.Log().LastSeq()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coagent_log_first_seq",
			Help: "The sequence number of the first event the log keeps (1 unless compacted)."},
			func() float64 { return float64(s.core.Log().FirstSeq()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coagent_log_size_bytes",
			Help: "Disk space the event log's store uses (Pebble's tables, WAL and manifests)."},
			func() float64 { return float64(s.core.Log().DiskSize()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "coagent_feed_publish_pending",
			Help: "Acknowledgements awaited from JetStream: one for each decision stored in COAGENT_DECISIONS and each case, and one for each run of up to 64 changes on COAGENT_EVENTS (each group's last change asks for one); the change feed's lag behind the log."},
			func() float64 { return float64(s.js.PublishAsyncPending() + s.feed.PublishAsyncPending()) }),
		&engineGauges{s: s},
		fsyncCollector{s: s},
	}
	if n := s.opts.Notify; n != nil {
		for _, r := range []struct {
			result string
			count  func(notify.Stats) uint64
		}{
			{"sent", func(st notify.Stats) uint64 { return st.Sent }},
			{"failed", func(st notify.Stats) uint64 { return st.Failed }},
			{"dropped", func(st notify.Stats) uint64 { return st.Dropped }},
		} {
			m.collectors = append(m.collectors, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "coagent_webhook_notices_total",
				Help:        "Notices for people (serve --notify) by what became of them: sent (the receiver took it), failed (refused, or the tries ran out), dropped (the queue was full, or the service stopped).",
				ConstLabels: prometheus.Labels{"result": r.result}}, func() float64 { return float64(r.count(n.Stats())) }))
		}
	}
	return m
}

// register puts m's collectors in reg, or, with reg nil, in a registry of
// the service's own with the Go and process collectors, which it returns.
func (m *metrics) register(reg prometheus.Registerer) (*prometheus.Registry, error) {
	var own *prometheus.Registry
	if reg == nil {
		own = prometheus.NewRegistry()
		own.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg = own
	}
	// Every series of a coordinator of a named shard names it, so that the
	// shards of one deployment scraped into one store stay apart; one that
	// names none (serve without --shard) labels them as it always did.
	if m.shard != "" {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"shard": m.shard}, reg)
	}
	var errs []error
	for _, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		m.unregisterFrom(reg)
		return nil, err
	}
	m.reg = reg
	return own, nil
}

// unregister takes m's collectors out of the registerer it was put in, so
// that the next Service of a cluster.Member registers its own in the same one.
func (m *metrics) unregister() {
	if m.reg != nil {
		m.unregisterFrom(m.reg)
		m.reg = nil
	}
}

func (m *metrics) unregisterFrom(reg prometheus.Registerer) {
	for _, c := range m.collectors {
		reg.Unregister(c)
	}
}

// group counts what a durable group holds; called by the output stage once
// it has answered and published the group. now is when it did.
func (m *metrics) group(o *output, now time.Time) {
	g := o.g
	for _, a := range o.arrivals {
		m.latency[a.via].Observe(now.Sub(a.at).Seconds())
		if !o.committed.IsZero() && !a.decided.IsZero() {
			m.stages[stageDecide].Observe(a.decided.Sub(a.at).Seconds())
			m.stages[stageCommit].Observe(o.committed.Sub(a.decided).Seconds())
			m.stages[stageDurable].Observe(o.durableAfter.Seconds())
		}
	}
	for _, r := range g.Decisions {
		d := r.Decision
		via := ViaStream
		if r.Known {
			via = r.Via
		}
		if d.Duplicate {
			m.duplicates[via].Inc()
			continue
		}
		k := decisionKey{outcome: d.Outcome}
		if d.Outcome == intents.OutcomeRejected {
			k.reason = d.Reason
		}
		if c, ok := m.decided[via][k]; ok {
			c.Inc()
		} else {
			m.decisions.WithLabelValues(pathOf(via), string(k.outcome), string(k.reason)).Inc()
		}
		if d.Reason == intents.ReasonArbiterRejected || d.Reason == intents.ReasonWaitTimeout {
			// The end of a wait or a case names the conflicts its queued
			// or escalated decision counted already.
			continue
		}
		for _, c := range d.Conflicts {
			if n, ok := m.conflicts[c.Kind]; ok {
				n.Inc()
			} else {
				m.conflictVec.WithLabelValues(string(c.Kind)).Inc()
			}
		}
	}
	if n := len(g.Cases); n > 0 {
		m.escalations.Add(float64(n))
	}
	for _, ev := range g.Batch.Events {
		if sh := ev.Shadow; sh != nil {
			m.shadow.WithLabelValues(sh.Rule, sh.WouldBeKey()).Inc()
		}
	}
	if n := len(g.Dead); n > 0 {
		m.deadLetters.Add(float64(n))
	}
	if n := len(g.DeadTasks); n > 0 {
		m.deadTasks.Add(float64(n))
	}
	if n := len(g.Reclaimed); n > 0 {
		m.reclaims.Add(float64(n))
		for _, r := range g.Reclaimed {
			if len(r.Reconcile) > 0 {
				m.reconciles.Inc()
			}
		}
	}
	if o.intents > 0 {
		m.groupIntents.Observe(float64(o.intents))
	}
	if !o.committed.IsZero() {
		m.groupDurable.Observe(o.durableAfter.Seconds())
	}
}

// received counts a batch the loop took in: api submits and stream
// messages.
func (m *metrics) receivedBatch(api, stream int) {
	if api > 0 {
		m.received[ViaAPI].Add(float64(api))
	}
	if stream > 0 {
		m.received[ViaStream].Add(float64(stream))
	}
}

// synced is the event log's OnSync: one group commit of events, which
// took took.
func (m *metrics) synced(events int, took time.Duration) {
	m.syncEvents.Observe(float64(events))
	m.syncSeconds.Observe(took.Seconds())
}

// arrival is when an input reached the service, and by which path.
type arrival struct {
	at  time.Time
	via Via
	// decided is when the loop had decided it.
	decided time.Time
}

// engineGauges are the gauges of what is open in the engine now, read on
// the loop when collected: the engine is the loop's alone.
type engineGauges struct{ s *Service }

var (
	descTxns = prometheus.NewDesc("coagent_txns_in_flight",
		"Transactions granted and not yet committed, aborted or expired.", nil, nil)
	descWaiters = prometheus.NewDesc("coagent_waiters_parked",
		"Intents parked with on_conflict wait, waiting for a transaction in their way to end.", nil, nil)
	descCases = prometheus.NewDesc("coagent_arbiter_cases_open",
		"Escalated intents whose arbiter case is open: not yet resolved, by an arbiter or the fallback.", nil, nil)
	descInDoubt = prometheus.NewDesc("coagent_xshard_in_doubt",
		"Parts of other shards' cross-shard applies prepared here, holding their paths until their coordinator's decision.", nil, nil)
	descUnanswered = prometheus.NewDesc("coagent_xshard_unanswered",
		"Cross-shard applies this shard coordinates and has not answered: waiting for votes, or for the other shards to apply their parts.", nil, nil)
)

// fsyncCollector exports the write-ahead log's fsyncs as Pebble times
// them: the system call alone, which coagent_log_sync_seconds includes
// with the wait for the sync before it and the write.
type fsyncCollector struct{ s *Service }

var descFsync = prometheus.NewDesc("coagent_log_fsync_seconds",
	"Time each fsync of the event log's write-ahead log took: the system call alone (coagent_log_sync_seconds adds the wait for the sync before it and the write).", nil, nil)

func (c fsyncCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descFsync }

func (c fsyncCollector) Collect(ch chan<- prometheus.Metric) {
	f, ok := c.s.core.Log().Fsyncs()
	if !ok {
		return
	}
	buckets := make(map[float64]uint64, len(f.Buckets))
	for _, b := range f.Buckets {
		buckets[b.UpperBound.Seconds()] = b.Count
	}
	m, err := prometheus.NewConstHistogram(descFsync, f.Count, f.Sum.Seconds(), buckets)
	if err == nil {
		ch <- m
	}
}

func (g *engineGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- descTxns
	ch <- descWaiters
	ch <- descCases
	ch <- descInDoubt
	ch <- descUnanswered
}

func (g *engineGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeWait)
	defer cancel()
	var txns, waiters, cases, inDoubt, unanswered int
	ok := g.s.call(ctx, func() {
		eng := g.s.core.Engine()
		txns = len(eng.Txns())
		inDoubt, unanswered = eng.XCounts()
		for _, id := range eng.Parked() {
			if _, escalated := eng.Case(id); escalated {
				cases++
			} else {
				waiters++
			}
		}
	})
	if !ok {
		return // the loop is gone or busy past scrapeWait: no value rather than a stale one
	}
	ch <- prometheus.MustNewConstMetric(descTxns, prometheus.GaugeValue, float64(txns))
	ch <- prometheus.MustNewConstMetric(descWaiters, prometheus.GaugeValue, float64(waiters))
	ch <- prometheus.MustNewConstMetric(descCases, prometheus.GaugeValue, float64(cases))
	ch <- prometheus.MustNewConstMetric(descInDoubt, prometheus.GaugeValue, float64(inDoubt))
	ch <- prometheus.MustNewConstMetric(descUnanswered, prometheus.GaugeValue, float64(unanswered))
}

// routed counts a submit sent on to shard to.
func (m *metrics) routed(to string) { m.routedVec.WithLabelValues(to).Inc() }
