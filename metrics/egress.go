package metrics

// egressDecisions are the decision codes of egress.Record (egress.Code), each counted from
// zero. The egress package is not imported: metrics imports nothing above it.
var egressDecisions = []string{"allowed", "off", "host", "address", "metadata", "connections", "bytes", "sni",
	"ended", "malformed", "resolve", "dial", "timeout"}

// Egress counts one connection or request of a sandbox's through the egress proxy, by
// its decision, and the bytes it carried each way (up is from the sandbox).
func (m *Metrics) Egress(decision string, up, down int64) {
	m.egress.WithLabelValues(decision).Inc()
	m.egressBytes.WithLabelValues("up").Add(float64(max(up, 0)))
	m.egressBytes.WithLabelValues("down").Add(float64(max(down, 0)))
}
