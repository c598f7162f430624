package main

import (
	"strings"
	"testing"

	"github.com/kilnsh/kiln/protocol"
)

// TestRealStateRatios checks that a real state row is set against its own floor row,
// not the bytes floor, and split by it.
func TestRealStateRatios(t *testing.T) {
	s := realStates[0]
	r := newResults()
	r.Floor = &Floor{BareExec: Summary{N: 8, P50: 2}, Bytes: floorRows(),
		RealState: []Summary{{Name: s.floorName(0), N: 4, P50: 800}, {Name: s.floorName(1), N: 4, P50: 1000}}}
	r.Latency = []Summary{
		{Name: statelessRow, N: 30, P50: 2.6},
		{Name: s.rowName(0), N: 8, P50: 880, ExecP50: 850},
		{Name: s.rowName(1), N: 8, P50: 1300},
	}
	r.transfers = []transfer{
		{name: s.rowName(0), bytes: 10 << 20, in: true, bare: s.floorName(0)},
		{name: s.rowName(1), bytes: 10 << 20, in: true, out: true, bare: s.floorName(1)},
	}
	got := ratios(r)
	wantRatios := []Ratio{
		{Case: statelessRow, FloorMS: 2, Ratio: 1.3},
		{Case: s.rowName(0), FloorMS: 800, Ratio: 1.1},
		{Case: s.rowName(1), FloorMS: 1000, Ratio: 1.3},
	}
	if len(got) != len(wantRatios) {
		t.Fatalf("got ratios %+v, want %d", got, len(wantRatios))
	}
	for i, w := range wantRatios {
		if g := got[i]; g.Case != w.Case || g.FloorMS != w.FloorMS || g.Ratio != w.Ratio || g.MovedRatio != 0 {
			t.Errorf("ratio %d: got %+v, want %+v", i, g, w)
		}
	}

	parts := breakdown(r)
	wantParts := []Part{
		{Case: statelessRow, KilnMS: 2.6, REPLMS: 2, OwnMS: 0.6},
		{Case: s.rowName(0), KilnMS: 880, TransportMS: 10, REPLMS: 790, OwnMS: 80},
		{Case: s.rowName(1), KilnMS: 1300, TransportMS: 40, REPLMS: 960, OwnMS: 300},
	}
	if len(parts) != len(wantParts) {
		t.Fatalf("got parts %+v, want %d", parts, len(wantParts))
	}
	for i, w := range wantParts {
		if g := parts[i]; g.Case != w.Case || g.KilnMS != w.KilnMS || g.TransportMS != w.TransportMS || g.REPLMS != w.REPLMS || g.OwnMS != w.OwnMS {
			t.Errorf("part %d: got %+v, want %+v", i, g, w)
		}
	}
	if x := parts[1].InExchangeMS; x == nil || *x != 50 {
		t.Errorf("got kiln's own in the exchange %v, want 850 - 800 = 50", x)
	}

	r.Floor.RealState = nil
	if got = ratios(r); len(got) != 1 {
		t.Errorf("without the real state floor: got %+v, want the stateless ratio only", got)
	}
}

func TestBareAnswer(t *testing.T) {
	note := "not kept (unpicklable): gen (generator)"
	tests := []struct {
		name    string
		changed bool
		resp    protocol.Response
		wantErr string
	}{
		{"unchanged", false, protocol.Response{Status: "ok", Stdout: "1\n", StateUnchanged: true}, ""},
		{"unchanged but sent back", false, protocol.Response{Status: "ok", Stdout: "1\n", State: make([]byte, 1000)}, "sent its state back"},
		{"changed", true, protocol.Response{Status: "ok", Stdout: "1\n", State: make([]byte, 1005)}, ""},
		{"changed but kept", true, protocol.Response{Status: "ok", Stdout: "1\n", StateUnchanged: true}, "came back with 0 bytes"},
		{"changed and shrunk", true, protocol.Response{Status: "ok", Stdout: "1\n", State: make([]byte, 500)}, "came back with 500 bytes"},
		{"a name dropped", false, protocol.Response{Status: "ok", Stdout: "1\n", StateUnchanged: true, StateError: &note}, "state_error"},
		{"wrong output", false, protocol.Response{Status: "ok", Stdout: "2\n", StateUnchanged: true}, "stdout"},
		{"error", false, protocol.Response{Status: "error", StateUnchanged: true}, "status error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := bareAnswer(tt.changed, "1", 1000)(&tt.resp)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("got error %v, want one with %q", err, tt.wantErr)
			}
		})
	}
}
