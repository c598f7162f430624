package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// durationBuckets span 1ms to 300s, the longest run kiln allows, in roughly 2.5x steps.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Metrics is kiln's instrumentation. Create it with New; it is safe for concurrent use.
type Metrics struct {
	reg   *prometheus.Registry
	start time.Time
	now   func() time.Time

	executions *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	queueWait  *prometheus.HistogramVec
	stateBytes prometheus.Histogram
	outBytes   prometheus.Histogram
	wireBytes  *prometheus.CounterVec

	checkouts    *prometheus.CounterVec
	created      *prometheus.CounterVec   // by pool
	warmup       *prometheus.HistogramVec // by pool
	warmFailures *prometheus.CounterVec   // by pool and reason
	removed      prometheus.Counter
	leaked       prometheus.Counter

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	forwards     *prometheus.CounterVec
	quotas       *prometheus.CounterVec

	egress      *prometheus.CounterVec // by decision
	egressBytes *prometheus.CounterVec // by direction

	recent *ring
}

// New returns Metrics registered on a registry of their own (never the global one),
// with the Go runtime and process collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	f := factory{reg}
	m := &Metrics{
		reg: reg, start: time.Now(), now: time.Now, recent: newRing(50),
		executions: f.counterVec("kiln_executions_total",
			"Executions by how they ended: ok, error, timeout, oom and sandbox_died are what the user's code did; "+
				"unavailable means no sandbox was free in time, rejected a request kiln refused (invalid, too large), "+
				"cancelled a run stopped by a cancel or by its client going away, internal a failure of kiln itself.", "status"),
		duration: f.histogramVec("kiln_execution_duration_seconds",
			"Execution latency by phase: queue is the wait for a warm sandbox (every checkout, served or not), "+
				"execution the run inside the sandbox, total the whole call as the API saw it.", durationBuckets, "phase"),
		queueWait: f.histogramVec("kiln_pool_queue_wait_seconds",
			"The wait for a warm sandbox by the caller's share: within when its caller had no other checkout "+
				"waiting (it waits at most one turn of each other caller), over when it had (one of a burst). "+
				"Callers are never named.", durationBuckets, "share"),
		stateBytes: f.histogram("kiln_execution_state_bytes",
			"Size of the compressed state blob an execution returned, for runs that returned one.",
			prometheus.ExponentialBuckets(1<<10, 4, 9)), // 1 KiB .. 64 MiB
		outBytes: f.histogram("kiln_execution_output_bytes",
			"Bytes of stdout plus stderr an execution returned (after kiln's output cap).",
			prometheus.ExponentialBuckets(64, 4, 10)), // 64 B .. 16 MiB
		wireBytes: f.counterVec("kiln_sandbox_wire_bytes_total",
			"Bytes of protocol frames kiln exchanged with sandboxes: in is what kiln sent (code, state, "+
				"input files), out what the sandboxes answered (output, state, files).", "direction"),
		checkouts: f.counterVec("kiln_pool_checkouts_total",
			"Requests for a warm sandbox by outcome: ok, timeout (none within the queue timeout), "+
				"queue_full, closed (shutting down) or canceled (the caller left).", "outcome"),
		created: f.counterVec("kiln_sandboxes_created_total",
			"Sandboxes that were created and became ready to serve, by pool.", "pool"),
		warmup: f.histogramVec("kiln_sandbox_warmup_duration_seconds",
			"Time from creating a sandbox to its REPL being ready, for successful warm-ups, by pool.",
			[]float64{.1, .25, .5, .75, 1, 1.5, 2, 3, 5, 10, 20, 30, 60}, "pool"),
		warmFailures: f.counterVec("kiln_sandbox_warmup_failures_total",
			"Sandbox warm-ups that failed, by pool and reason: timeout (no ready frame in time), exited (the REPL "+
				"died while starting), docker (the runtime refused or failed a create, attach, exec or start), other.", "pool", "reason"),
		removed: f.counter("kiln_sandboxes_removed_total",
			"Sandboxes removed after use, after dying, or at shutdown."),
		leaked: f.counter("kiln_sandboxes_leaked_total",
			"Sandbox removals that failed: sandboxes possibly left behind on the runtime; "+
				"a restart of the same INSTANCE_ID removes them."),
		httpRequests: f.counterVec("kiln_http_requests_total",
			"HTTP requests by route pattern, method and status code.", "route", "method", "code"),
		httpDuration: f.histogramVec("kiln_http_request_duration_seconds",
			"HTTP request latency by route pattern and method, until the answer was written.",
			durationBuckets, "route", "method"),
		forwards: f.counterVec("kiln_replica_forwards_total",
			"Requests that crossed replicas, by route pattern and how: to_owner (this replica sent it to the replica "+
				"that holds its session or run), from_replica (another replica sent it here), owner_unreachable "+
				"(the owner could not be reached, so this replica served it).", "route", "how"),
		quotas: f.counterVec("kiln_quota_refusals_total",
			"Requests refused for a per-caller quota, by kind: rate (RATE_LIMIT_PER_MINUTE), concurrency "+
				"(MAX_CONCURRENT_PER_KEY), storage (QUOTA_STORAGE_MB). Live sessions ended for QUOTA_LIVE_SESSIONS "+
				"are kiln_live_sessions_ended_total{reason=\"quota\"}.", "kind"),
		egress: f.counterVec("kiln_egress_connections_total",
			"Connections and plain HTTP requests from sandboxes through the egress proxy, by decision: allowed, or why "+
				"they were refused or cut (off, host, address, metadata, connections, bytes, sni, ended, malformed, "+
				"resolve, dial, timeout).", "decision"),
		egressBytes: f.counterVec("kiln_egress_bytes_total",
			"Bytes carried by the egress proxy: up from sandboxes to the hosts they reached, down back to them.", "direction"),
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Known label values start at zero, so that rates and alerts see every series
	// from the first scrape on.
	for _, s := range executionStatuses {
		m.executions.WithLabelValues(s)
	}
	for _, p := range []string{"queue", "execution", "total"} {
		m.duration.WithLabelValues(p)
	}
	for _, d := range []string{"in", "out"} {
		m.wireBytes.WithLabelValues(d)
	}
	for _, o := range checkoutOutcomes {
		m.checkouts.WithLabelValues(o)
	}
	for _, share := range []string{"within", "over"} {
		m.queueWait.WithLabelValues(share)
	}
	for _, d := range egressDecisions {
		m.egress.WithLabelValues(d)
	}
	for _, d := range []string{"up", "down"} {
		m.egressBytes.WithLabelValues(d)
	}
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry returns the registry, for tests and for extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Request implements api.Observer: one call per HTTP request, route being chi's
// pattern (or "unmatched"), so the label set stays bounded.
func (m *Metrics) Request(route, method string, status int, d time.Duration) {
	method = boundedMethod(method)
	m.httpRequests.WithLabelValues(route, method, statusCode(status)).Inc()
	m.httpDuration.WithLabelValues(route, method).Observe(d.Seconds())
}

// QuotaRefused implements api.Observer, and is session.Config.Refused: a request, call
// or store refused for a per-caller quota.
func (m *Metrics) QuotaRefused(kind string) {
	m.quotas.WithLabelValues(kind).Inc()
}

// Forwarded implements api.Observer: a request that crossed replicas.
func (m *Metrics) Forwarded(route, how string) {
	m.forwards.WithLabelValues(route, how).Inc()
}

// boundedMethod maps anything but the standard methods to "other": a client can send
// any token as a method, and labels must not grow with what clients send.
func boundedMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}

func statusCode(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	var b [3]byte
	b[0], b[1], b[2] = byte('0'+status/100), byte('0'+status/10%10), byte('0'+status%10)
	return string(b[:])
}

// factory registers what it builds on one registry.
type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	f.reg.MustRegister(h)
	return h
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}
