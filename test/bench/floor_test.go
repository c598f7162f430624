package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseDriver(t *testing.T) {
	tests := []struct {
		name         string
		out          string
		execs, pings []time.Duration
		wantErr      string
	}{
		{"both", "first exec 4.250\nfirst exec 5.000\nfirst ping 1.5\n",
			[]time.Duration{4250 * time.Microsecond, 5 * time.Millisecond}, []time.Duration{1500 * time.Microsecond}, ""},
		{"blank lines", "\n  \nfirst ping 2\n\n", nil, []time.Duration{2 * time.Millisecond}, ""},
		{"empty", "", nil, nil, ""},
		{"stray line", "first exec 1\nTraceback (most recent call last):\n", []time.Duration{time.Millisecond}, nil, "unexpected line"},
		{"bad number", "first exec fast\n", nil, nil, "bad time"},
		{"negative", "first exec -1\n", nil, nil, "bad time"},
		{"unknown op", "first fly 1\n", nil, nil, "unknown op"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			execs, pings, err := parseDriver(tt.out)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("got error %v, want one with %q", err, tt.wantErr)
			}
			if !equalDurations(execs, tt.execs) || !equalDurations(pings, tt.pings) {
				t.Errorf("got execs %v pings %v, want %v %v", execs, pings, tt.execs, tt.pings)
			}
		})
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// floorRows is a floor where moving in costs 1 ms per MB up to 10 MB and 2 ms per MB
// after, and moving out always 3 ms per MB, on top of a 0.5 ms round trip.
func floorRows() []BytesRow {
	return netBytes([]BytesRow{
		{Bytes: 0, InMS: 0.5, OutMS: 0.5},
		{Bytes: 1 << 20, InMS: 1.5, OutMS: 3.5},
		{Bytes: 10 << 20, InMS: 10.5, OutMS: 30.5},
		{Bytes: 100 << 20, InMS: 190.5, OutMS: 300.5},
	})
}

func TestNetBytes(t *testing.T) {
	rows := floorRows()
	want := []struct{ inNet, outNet, inPer, outPer float64 }{
		{0, 0, 0, 0}, {1, 3, 1, 3}, {10, 30, 1, 3}, {190, 300, 1.9, 3},
	}
	for i, w := range want {
		r := rows[i]
		if r.InNetMS != w.inNet || r.OutNetMS != w.outNet || r.InMSPerMB != w.inPer || r.OutMSPerMB != w.outPer {
			t.Errorf("row %d: got net %v/%v per MB %v/%v, want %v/%v %v/%v", i, r.InNetMS, r.OutNetMS, r.InMSPerMB, r.OutMSPerMB,
				w.inNet, w.outNet, w.inPer, w.outPer)
		}
	}
	if got := netBytes([]BytesRow{{Bytes: 5, InMS: 1}}); got[0].InNetMS != 0 {
		t.Errorf("without a zero row: got net %v, want it left at 0", got[0].InNetMS)
	}
}

func TestFloorNet(t *testing.T) {
	rows := floorRows()
	tests := []struct {
		name  string
		bytes int64
		in    bool
		want  float64
	}{
		{"nothing", 0, true, 0},
		{"half a MB in", 1 << 19, true, 0.5},
		{"a measured size", 10 << 20, false, 30},
		{"between sizes", 55 << 20, true, 100},
		{"past the largest", 200 << 20, true, 380},
		{"past the largest out", 200 << 20, false, 600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := floorNet(rows, tt.bytes, tt.in)
			if !ok || math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("got %v %v, want %v", got, ok, tt.want)
			}
		})
	}
	if _, ok := floorNet(nil, 1<<20, true); ok {
		t.Errorf("got a floor from no measurement")
	}
	if got, ok := transferFloor(rows, 10<<20, true, true); !ok || got != 40 {
		t.Errorf("in + out of 10 MB: got %v %v, want 40", got, ok)
	}
}

func TestRatios(t *testing.T) {
	i64 := func(n int64) *int64 { return &n }
	r := newResults()
	r.Floor = &Floor{BareExec: Summary{N: 8, P50: 2}, Bytes: floorRows()}
	r.Latency = []Summary{
		{Name: statelessRow, N: 30, P50: 2.6},
		{Name: resumedStateRow(10 << 20), N: 8, P50: 54.6, WireIn: i64(10 << 20), WireOut: i64(300)},
		{Name: resumedStateRow(10 << 10), N: 8, P50: 3},
		{Name: "output file 20 MB returned", N: 5, P50: 62.6},
		{Name: "input file 20 MB placed, read back", Fails: 1},
	}
	r.transfers = []transfer{
		{name: resumedStateRow(10 << 20), bytes: 10 << 20, in: true, out: true},
		{name: resumedStateRow(10 << 10), bytes: 10 << 10, in: true, out: true},
		{name: "output file 20 MB returned", bytes: 20 << 20, out: true, file: true},
		{name: "input file 20 MB placed, read back", bytes: 20 << 20, in: true, file: true},
	}
	// A file row is set against the same exchange with no kiln and, for an output file,
	// the disk store's synced write: 62.6 / (40 + 8).
	r.Floor.BareFileOut, r.Floor.DiskWrite = Summary{N: 5, P50: 40}, Summary{N: 5, P50: 8}
	got := ratios(r)
	want := []struct {
		name         string
		floor, ratio float64
		moved        float64
	}{
		{statelessRow, 2, 1.3, 0},
		{resumedStateRow(10 << 20), 40, 1.3, 5.2},
		{"output file 20 MB returned", 48, 1.3, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d ratios %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Case != w.name || g.FloorMS != w.floor || g.Ratio != w.ratio || g.MovedRatio != w.moved || g.Target != ratioTarget {
			t.Errorf("ratio %d: got %+v, want case %q floor %v ratio %v moved %v", i, g, w.name, w.floor, w.ratio, w.moved)
		}
	}
	if got := ratios(&Results{Floor: r.Floor}); got != nil {
		t.Errorf("without a stateless row: got %+v, want none", got)
	}
	// Without the disk write's floor the output file has no ratio: never one against
	// the bare exchange alone.
	r.Floor.DiskWrite = Summary{}
	for _, g := range ratios(r) {
		if g.Case == "output file 20 MB returned" {
			t.Errorf("without the disk floor: got %+v, want no output file ratio", g)
		}
	}
}

func TestMetricValue(t *testing.T) {
	body := "# HELP kiln_sandbox_wire_bytes_total Bytes.\n# TYPE kiln_sandbox_wire_bytes_total counter\n" +
		`kiln_sandbox_wire_bytes_total{direction="in"} 1.048876e+07` + "\n" +
		`kiln_sandbox_wire_bytes_total{direction="out"} 412 1700000000000` + "\n" +
		`kiln_sandbox_wire_bytes_total_extra{direction="in"} 5` + "\n"
	tests := []struct {
		series string
		want   float64
		ok     bool
	}{
		{wireMetric + `{direction="in"}`, 10488760, true},
		{wireMetric + `{direction="out"}`, 412, true},
		{wireMetric + `{direction="sideways"}`, 0, false},
		{wireMetric, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.series, func(t *testing.T) {
			got, ok := metricValue(body, tt.series)
			if got != tt.want || ok != tt.ok {
				t.Errorf("got %v %v, want %v %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestLastLines(t *testing.T) {
	if got, want := lastLines("a\n\nb\n c \n\n", 2), "b | c"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := lastLines("", 3); got != "" {
		t.Errorf("got %q from nothing", got)
	}
}

func TestBreakdown(t *testing.T) {
	r := newResults()
	r.Floor = &Floor{BareExec: Summary{N: 8, P50: 2}, BareState: Summary{N: 4, P50: 30}, Bytes: floorRows()}
	r.Latency = []Summary{
		{Name: statelessRow, N: 30, P50: 2.6},
		{Name: resumedStateRow(10 << 20), N: 8, P50: 54.6},
	}
	got := breakdown(r)
	want := []Part{
		{Case: statelessRow, KilnMS: 2.6, REPLMS: 2, OwnMS: 0.6},
		{Case: resumedStateRow(10 << 20), KilnMS: 54.6, TransportMS: 10, REPLMS: 20, OwnMS: 24.6},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %d parts", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Case != w.Case || g.KilnMS != w.KilnMS || g.TransportMS != w.TransportMS || g.REPLMS != w.REPLMS || g.OwnMS != w.OwnMS {
			t.Errorf("part %d: got %+v, want %+v", i, g, w)
		}
	}
	r.Floor.BareState = Summary{}
	if got := breakdown(r); len(got) != 1 {
		t.Errorf("without the bare state row: got %+v, want the stateless part only", got)
	}

	// The file rows: the input file's bare run less its 20 MB in, the output file's
	// less its 20 MB out and, for the disk store's synced write, kiln's own less it.
	r.Floor.BareFileIn = Summary{N: 4, P50: 70}
	r.Floor.BareFileOut = Summary{N: 4, P50: 110}
	r.Floor.DiskWrite = Summary{N: 4, P50: 50}
	r.Latency = append(r.Latency, Summary{Name: "in", N: 5, P50: 100, ExecP50: 80}, Summary{Name: "out", N: 5, P50: 200})
	r.transfers = []transfer{{name: "in", bytes: fileSize, in: true, file: true}, {name: "out", bytes: fileSize, out: true, file: true}}
	got = breakdown(r)
	want = []Part{
		{Case: "in", KilnMS: 100, TransportMS: 30, REPLMS: 40, OwnMS: 30},
		{Case: "out", KilnMS: 200, TransportMS: 60, REPLMS: 50, DiskMS: 50, OwnMS: 40},
	}
	if len(got) != 3 {
		t.Fatalf("got %+v, want the stateless part and two file parts", got)
	}
	if x := got[1].InExchangeMS; x == nil || *x != 10 {
		t.Errorf("input file: got kiln's own in the exchange %v, want 80 - 70 = 10", x)
	}
	if got[2].InExchangeMS != nil {
		t.Errorf("output file: got kiln's own in the exchange %v with no exec_ms recorded, want none", *got[2].InExchangeMS)
	}
	for i, w := range want {
		if g := got[i+1]; g.Case != w.Case || g.KilnMS != w.KilnMS || g.TransportMS != w.TransportMS || g.REPLMS != w.REPLMS || g.DiskMS != w.DiskMS || g.OwnMS != w.OwnMS {
			t.Errorf("file part %d: got %+v, want %+v", i, g, w)
		}
	}
}
