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
	ReasonDocker  = "docker"
	ReasonOther   = "other"
)

// Outcomes of a checkout, as kiln_pool_checkouts_total labels them.
var checkoutOutcomes = []string{"ok", "timeout", "queue_full", "closed", "canceled"}

// Warmed implements pool.Observer: a sandbox became ready after d.
func (m *Metrics) Warmed(d time.Duration) {
	m.created.Inc()
	m.warmup.Observe(d.Seconds())
}

// WarmFailed implements pool.Observer.
func (m *Metrics) WarmFailed(err error) { m.warmFailures.WithLabelValues(WarmupReason(err)).Inc() }

// Removed implements pool.Observer; a failed removal is a possible leak.
func (m *Metrics) Removed(err error) {
	if err != nil {
		m.leaked.Inc()
		return
	}
	m.removed.Inc()
}

// Waited implements pool.Observer: a checkout waited d and ended with err.
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
	case errors.Is(err, kiln.ErrDaemon):
		return ReasonDocker
	}
	return ReasonOther
}

// StatsSource is what the pool gauges read at scrape time; *pool.Pool implements it.
type StatsSource interface {
	Stats() pool.Stats
}

// WatchPool registers the pool gauges, read from src on every scrape so they are
// never stale. Call it once, after the pool exists.
func (m *Metrics) WatchPool(src StatsSource) {
	m.reg.MustRegister(&poolCollector{src: src})
}

var (
	descTarget  = prometheus.NewDesc("kiln_pool_target", "Sandboxes the pool keeps warm (POOL_SIZE).", nil, nil)
	descReady   = prometheus.NewDesc("kiln_pool_ready", "Warm sandboxes waiting for an execution.", nil, nil)
	descWarming = prometheus.NewDesc("kiln_pool_warming", "Sandboxes being created and started right now.", nil, nil)
	descInUse   = prometheus.NewDesc("kiln_pool_in_use", "Sandboxes checked out, running an execution.", nil, nil)
	descWaiting = prometheus.NewDesc("kiln_pool_waiting", "Executions queued for a sandbox right now.", nil, nil)
	descDied    = prometheus.NewDesc("kiln_sandboxes_died_total",
		"Warm sandboxes whose process died while waiting in the pool (they are replaced).", nil, nil)
)

// poolCollector reads one pool snapshot per scrape.
type poolCollector struct{ src StatsSource }

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTarget, descReady, descWarming, descInUse, descWaiting, descDied} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	gauge := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	gauge(descTarget, st.Target)
	gauge(descReady, st.Ready)
	gauge(descWarming, st.Warming)
	gauge(descInUse, st.InUse)
	gauge(descWaiting, st.Waiting)
	ch <- prometheus.MustNewConstMetric(descDied, prometheus.CounterValue, float64(st.Counts.Died))
}
