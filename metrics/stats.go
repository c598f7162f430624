package metrics

import (
	"math"

	dto "github.com/prometheus/client_model/go"

	"github.com/kilnsh/kiln"
)

// Stats is the dashboard's view of executions. Its numbers are read back from the
// registry, so the dashboard shows exactly what /metrics exports.
type Stats struct {
	Time          kiln.Timestamp   `json:"time"`
	UptimeSeconds float64          `json:"uptime_seconds"`
	Executions    map[string]int64 `json:"executions"` // by status, since start
	// Buckets are the latency histogram's upper bounds in seconds (without +Inf);
	// Latency holds, per phase, the cumulative count of each bucket and then the total.
	// The dashboard diffs two snapshots to get a rate and recent percentiles.
	Buckets []float64           `json:"buckets"`
	Latency map[string][]uint64 `json:"latency"`
	Recent  []Failure           `json:"recent_failures"` // newest first
}

// Snapshot returns the current Stats.
func (m *Metrics) Snapshot() Stats {
	now := m.now()
	st := Stats{
		Time: kiln.Timestamp(now), UptimeSeconds: math.Round(now.Sub(m.start).Seconds()),
		Executions: map[string]int64{}, Buckets: durationBuckets, Latency: map[string][]uint64{},
		Recent: m.recent.list(),
	}
	families, err := m.reg.Gather()
	if err != nil {
		return st // Gather reports partial results with its error; ours are all local
	}
	for _, f := range families {
		switch f.GetName() {
		case "kiln_executions_total":
			for _, mt := range f.GetMetric() {
				st.Executions[label(mt, "status")] = int64(mt.GetCounter().GetValue())
			}
		case "kiln_execution_duration_seconds":
			for _, mt := range f.GetMetric() {
				h := mt.GetHistogram()
				counts := make([]uint64, 0, len(h.GetBucket())+1)
				for _, b := range h.GetBucket() {
					counts = append(counts, b.GetCumulativeCount())
				}
				st.Latency[label(mt, "phase")] = append(counts, h.GetSampleCount())
			}
		}
	}
	return st
}

// Stats implements the api's dashboard source.
func (m *Metrics) Stats() any { return m.Snapshot() }

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
