package main

import (
	"encoding/xml"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	tests := []struct {
		name                string
		in                  []time.Duration
		p50, p90, p99, maxi float64
	}{
		{"hundred", d, 50, 90, 99, 100},
		{"one", []time.Duration{7 * time.Millisecond}, 7, 7, 7, 7},
		{"empty", nil, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := summarize(tt.name, tt.in, 0, "")
			if s.P50 != tt.p50 || s.P90 != tt.p90 || s.P99 != tt.p99 || s.Max != tt.maxi {
				t.Errorf("got p50 %v p90 %v p99 %v max %v, want %v %v %v %v", s.P50, s.P90, s.P99, s.Max, tt.p50, tt.p90, tt.p99, tt.maxi)
			}
		})
	}
}

func TestChartIsWellFormedSVG(t *testing.T) {
	r := newResults()
	r.Latency = []Summary{
		summarize("warm <print(1)> & co", []time.Duration{2 * time.Millisecond, 9 * time.Millisecond}, 0, ""),
		summarize("cold docker run", []time.Duration{5 * time.Second}, 0, ""),
		summarize("nothing measured", nil, 1, ""),
	}
	svg := chart(r)
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("chart is not well-formed XML: %v\n%s", err, svg)
			}
			break
		}
	}
	if !strings.Contains(svg, "&lt;print(1)&gt; &amp; co") {
		t.Errorf("got no escaped case name in\n%s", svg)
	}
	if strings.Contains(svg, "nothing measured") {
		t.Errorf("a case without samples was drawn")
	}
}

func TestABText(t *testing.T) {
	r := &Results{AB: &AB{Before: "old", After: "new", Calls: 2, Rows: []ABRow{{
		Case:   "stateless print(1)",
		Before: Summary{N: 2, P50: 4, P90: 5},
		After:  Summary{N: 2, P50: 2, P90: 3, Fails: 1},
		Ratio:  0.5,
	}}}}
	for _, md := range []bool{false, true} {
		got := abText(r, md)
		for _, want := range []string{"before: old", "after: new", "stateless print(1)", "0.50", "0, 1"} {
			if !strings.Contains(got, want) {
				t.Errorf("md=%v: %q lacks %q", md, got, want)
			}
		}
	}
	if got := abText(&Results{}, true); got != "" {
		t.Errorf("without a comparison: got %q, want nothing", got)
	}
}
