package main

import (
	"math"
	"slices"
	"time"
)

// Summary is the latency distribution of one case, in milliseconds.
type Summary struct {
	Name  string  `json:"name"`
	N     int     `json:"n"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Fails int     `json:"failures"`
	Note  string  `json:"note,omitempty"`
	// WireIn and WireOut are the protocol bytes per call kiln sent to the sandbox and
	// got back (kiln_sandbox_wire_bytes_total); nil when kiln does not count them.
	WireIn  *int64 `json:"wire_in_bytes_per_call,omitempty"`
	WireOut *int64 `json:"wire_out_bytes_per_call,omitempty"`
	// ExecP50 is the median of kiln's own timing.exec_ms over the same calls: the
	// exchange with the sandbox, from the request's first byte out to the answer's last
	// in (0 when not recorded).
	ExecP50 float64 `json:"exec_p50_ms,omitempty"`
}

// summarize computes nearest-rank percentiles of d.
func summarize(name string, d []time.Duration, fails int, note string) Summary {
	s := Summary{Name: name, N: len(d), Fails: fails, Note: note}
	if len(d) == 0 {
		return s
	}
	ms := make([]float64, len(d))
	for i, x := range d {
		ms[i] = float64(x) / float64(time.Millisecond)
	}
	slices.Sort(ms)
	s.P50, s.P90, s.P99 = rank(ms, 50), rank(ms, 90), rank(ms, 99)
	s.Max = ms[len(ms)-1]
	return s
}

// rank returns the nearest-rank p-th percentile of sorted values.
func rank(sorted []float64, p float64) float64 {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func round(x float64, digits int) float64 {
	f := math.Pow(10, float64(digits))
	return math.Round(x*f) / f
}
