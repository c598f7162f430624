package metrics

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every decision code of the egress package is a series from the first scrape, and a
// recorded connection counts under its decision with its bytes.
func TestEgressSeriesCoverEveryDecision(t *testing.T) {
	src, err := os.ReadFile("../egress/policy.go")
	if err != nil {
		t.Fatal(err)
	}
	codes := regexp.MustCompile(`Code[A-Za-z]+ +Code = "([a-z]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(codes) < 10 {
		t.Fatalf("found %d decision codes in egress/policy.go", len(codes))
	}
	m := New()
	m.Egress("host", 0, 0)
	m.Egress("allowed", 100, 5000)
	text := scrapeText(t, m)
	for _, c := range codes {
		if !strings.Contains(text, `kiln_egress_connections_total{decision="`+c[1]+`"}`) {
			t.Errorf("no series for decision %q", c[1])
		}
	}
	for _, want := range []string{
		`kiln_egress_connections_total{decision="host"} 1`,
		`kiln_egress_connections_total{decision="allowed"} 1`,
		`kiln_egress_connections_total{decision="sni"} 0`,
		`kiln_egress_bytes_total{direction="up"} 100`,
		`kiln_egress_bytes_total{direction="down"} 5000`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("no line %q", want)
		}
	}
}
