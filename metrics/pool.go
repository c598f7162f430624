package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/pool"
)

// Reasons a warm-up failed, as kiln_sandbox_warmup_failures_total labels them.
const (
	ReasonTimeout = "timeout"
	ReasonExited  = "exited"
	// ReasonRuntime: the runtime refused or failed an operation (kiln.ErrRuntime). Its
	// value is "docker" on every runtime, as dashboards and alerts have always read it.
	ReasonRuntime = "docker"
	ReasonOther   = "other"
)

// Outcomes of a checkout, as kiln_pool_checkouts_total labels them.
var checkoutOutcomes = []string{"ok", "timeout", "queue_full", "closed", "canceled"}

// Pool returns the pool.Observer of the pool with that name (a label value: POOLS
// names few pools).
func (m *Metrics) Pool(name string) pool.Observer {
	for _, r := range []string{ReasonTimeout, ReasonExited, ReasonRuntime, ReasonOther} {
		m.warmFailures.WithLabelValues(name, r)
	}
	return &poolObserver{m: m, name: name, created: m.created.WithLabelValues(name), warmup: m.warmup.WithLabelValues(name)}
}

// poolObserver is one pool's observer: warm-ups by pool, the rest into kiln's totals.
type poolObserver struct {
	m       *Metrics
	name    string
	created prometheus.Counter
	warmup  prometheus.Observer
}

// Warmed implements pool.Observer: a sandbox became ready after d.
func (o *poolObserver) Warmed(d time.Duration) {
	o.created.Inc()
	o.warmup.Observe(d.Seconds())
}

// WarmFailed implements pool.Observer.
func (o *poolObserver) WarmFailed(err error) {
	o.m.warmFailures.WithLabelValues(o.name, WarmupReason(err)).Inc()
}

func (o *poolObserver) Removed(err error) { o.m.Removed(err) }
func (o *poolObserver) Waited(d time.Duration, share pool.Share, err error) {
	o.m.Waited(d, err)
	o.m.queueWait.WithLabelValues(string(share)).Observe(d.Seconds())
}

// Removed counts a removal; a failed removal is a possible leak.
func (m *Metrics) Removed(err error) {
	if err != nil {
		m.leaked.Inc()
		return
	}
	m.removed.Inc()
}

// Waited counts a checkout that waited d and ended with err.
func (m *Metrics) Waited(d time.Duration, err error) {
	m.duration.WithLabelValues("queue").Observe(d.Seconds())
	m.checkouts.WithLabelValues(checkoutOutcome(err)).Inc()
}

func checkoutOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, kiln.ErrQueueTimeout):
		return "timeout"
	case errors.Is(err, kiln.ErrQueueFull):
		return "queue_full"
	case errors.Is(err, kiln.ErrShuttingDown):
		return "closed"
	}
	return "canceled"
}

// WarmupReason classifies a warm-up error into a bounded reason, by the kiln sentinel
// the sandbox's maker wrapped into it.
func WarmupReason(err error) string {
	switch {
	case errors.Is(err, kiln.ErrWarmupTimeout), errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, kiln.ErrSandboxExited):
		return ReasonExited
	case errors.Is(err, kiln.ErrRuntime):
		return ReasonRuntime
	}
	return ReasonOther
}

// PoolsSource is what the pool gauges read at scrape time; *pool.Set implements it.
type PoolsSource interface {
	PoolStats() []pool.MemberStats
}

// WatchPools registers the gauges of the pools, labelled by pool and read from src on
// every scrape so they are never stale. Call it once, after the pools exist.
func (m *Metrics) WatchPools(src PoolsSource) {
	m.reg.MustRegister(&poolCollector{src: src})
}

var poolLabel = []string{"pool"}

var (
	descTarget  = prometheus.NewDesc("kiln_pool_target", "Sandboxes the pool keeps warm (its size in POOLS).", poolLabel, nil)
	descReady   = prometheus.NewDesc("kiln_pool_ready", "Warm sandboxes waiting for an execution.", poolLabel, nil)
	descWarming = prometheus.NewDesc("kiln_pool_warming", "Sandboxes being created and started right now.", poolLabel, nil)
	descInUse   = prometheus.NewDesc("kiln_pool_in_use", "Sandboxes checked out, running an execution.", poolLabel, nil)
	descWaiting = prometheus.NewDesc("kiln_pool_waiting", "Executions queued for a sandbox right now.", poolLabel, nil)
	descKept    = prometheus.NewDesc("kiln_pool_kept",
		"Sandboxes kept by live sessions, between calls or serving one: outside the pool's other counts "+
			"(it replaced them), still its to remove when their session's live sandbox ends.", poolLabel, nil)
	descDied = prometheus.NewDesc("kiln_sandboxes_died_total",
		"Warm sandboxes whose process died while waiting in the pool (they are replaced).", poolLabel, nil)
)

// poolCollector reads one snapshot of the pools per scrape.
type poolCollector struct{ src PoolsSource }

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTarget, descReady, descWarming, descInUse, descWaiting, descKept, descDied} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.src.PoolStats() {
		st := p.Stats
		gauge := func(d *prometheus.Desc, v int) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), p.Name)
		}
		gauge(descTarget, st.Target)
		gauge(descReady, st.Ready)
		gauge(descWarming, st.Warming)
		gauge(descInUse, st.InUse)
		gauge(descWaiting, st.Waiting)
		gauge(descKept, st.Kept)
		ch <- prometheus.MustNewConstMetric(descDied, prometheus.CounterValue, float64(st.Counts.Died), p.Name)
	}
}
