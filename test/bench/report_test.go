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
