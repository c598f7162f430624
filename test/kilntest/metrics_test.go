package kilntest

import "testing"

func TestMetricSum(t *testing.T) {
	text := []byte(`# HELP kiln_replica_forwards_total Requests that crossed replicas.
# TYPE kiln_replica_forwards_total counter
kiln_replica_forwards_total{how="from_replica",route="/exec"} 4
kiln_replica_forwards_total{how="to_owner",route="/exec"} 3
kiln_replica_forwards_total{how="to_owner",route="/mcp"} 2
kiln_pool_checkouts_total{outcome="ok"} 7
kiln_pool_checkouts_total_extra 100
go_goroutines 25
`)
	for series, want := range map[string]float64{
		"kiln_replica_forwards_total":                     9,
		`kiln_replica_forwards_total{how="to_owner",`:     5,
		`kiln_replica_forwards_total{how="from_replica",`: 4,
		"kiln_pool_checkouts_total":                       7,
		"go_goroutines":                                   25,
		"kiln_absent_total":                               0,
	} {
		if got := MetricSum(text, series); got != want {
			t.Errorf("MetricSum(%s) = %v, want %v", series, got, want)
		}
	}
}
