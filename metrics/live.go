package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kilnsh/kiln/live"
	"github.com/kilnsh/kiln/session"
)

// LiveSource is what the live-session metrics read at scrape time; the registry of
// live sessions' sandboxes (session.Live) implements it.
type LiveSource interface {
	Stats() live.Stats
}

// WatchLive registers the metrics of live sessions, read from src on every scrape. Call
// it once, and only when live sessions are on: without them the series do not exist.
func (m *Metrics) WatchLive(src LiveSource) {
	m.reg.MustRegister(&liveCollector{src: src})
}

// liveCallStatuses and liveEndReasons are the label values exported from the first
// scrape on, at zero until they happen, so that rates see every series.
var (
	liveCallStatuses = []string{session.RuntimeNew, session.RuntimeReused, session.RuntimeResumed}
	liveEndReasons   = []string{live.EndIdle, live.EndLifetime, live.EndCapacity, live.EndQuota, live.EndDied,
		live.EndDiscard, live.EndStale, live.EndShutdown}
	liveFlushOutcomes = []string{live.FlushStored, live.FlushUnchanged, live.FlushStale, live.FlushFailed}
)

var (
	descLiveSessions = prometheus.NewDesc("kiln_live_sessions",
		"Sessions holding a live sandbox, by state: idle between calls, or busy serving one.", []string{"state"}, nil)
	descLiveMax = prometheus.NewDesc("kiln_live_sessions_max",
		"Live sandboxes allowed at once (LIVE_SESSIONS_MAX); past it the least recently used idle one ends.", nil, nil)
	descLiveMemory = prometheus.NewDesc("kiln_live_memory_bytes",
		"Resident memory of the live sandboxes' REPLs, as their last calls left it.", nil, nil)
	descLiveCalls = prometheus.NewDesc("kiln_live_calls_total",
		"Python calls of sessions that keep their state, by where they ran: new (the call made its session), "+
			"reused (the session's live sandbox: no restore, no new sandbox), resumed (a fresh sandbox, "+
			"from the session's stored state and files).", []string{"status"}, nil)
	descLiveEnded = prometheus.NewDesc("kiln_live_sessions_ended_total",
		"Live sandboxes ended, by reason: idle (no call for LIVE_SESSION_IDLE_SECONDS), lifetime (older than "+
			"LIVE_SESSION_LIFETIME_SECONDS), capacity (the least recently used, to make room under LIVE_SESSIONS_MAX), "+
			"died (it died, or its call left it unusable: a kill, out of memory, no answer), discard (its session let it go: "+
			"a rollback, a state put, a deleted session), shutdown.", []string{"reason"}, nil)
	descLiveFlushes = prometheus.NewDesc("kiln_live_flushes_total",
		"Captures of a live session's namespace after its calls answered (STATE_SAVE_DELAY_MS), by outcome: stored "+
			"(a new state, stored within the delay), unchanged (nothing new since the last one), stale (the session's "+
			"stored state had changed elsewhere: not written back), failed (the session goes on from the state kiln "+
			"held before, which its next answer says).",
		[]string{"outcome"}, nil)
)

// liveCollector reads one snapshot of the registry per scrape.
type liveCollector struct{ src LiveSource }

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLiveSessions, descLiveMax, descLiveMemory, descLiveCalls, descLiveEnded, descLiveFlushes} {
		ch <- d
	}
}

func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descLiveSessions, float64(st.Idle), "idle")
	gauge(descLiveSessions, float64(st.Busy), "busy")
	gauge(descLiveMax, float64(st.Max))
	gauge(descLiveMemory, float64(st.Memory))
	counters(ch, descLiveCalls, liveCallStatuses, st.Counts.Calls)
	counters(ch, descLiveEnded, liveEndReasons, st.Counts.Ended)
	counters(ch, descLiveFlushes, liveFlushOutcomes, st.Counts.Flushes)
}

// counters sends one counter per known label value, and one for any other the counts
// hold: the registry names its own values, from a fixed set of constants.
func counters(ch chan<- prometheus.Metric, d *prometheus.Desc, known []string, counts map[string]int64) {
	for _, k := range known {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(counts[k]), k)
	}
	for k, v := range counts {
		if !slices.Contains(known, k) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), k)
		}
	}
}
