package main

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestLivePairs checks that each live row is set against its own floor row, with its
// own target, and split by it.
func TestLivePairs(t *testing.T) {
	r := newResults()
	r.Floor = &Floor{BareExec: Summary{N: 8, P50: 2}, Bytes: floorRows(),
		Live: []Summary{{Name: livePrintFloor, N: 30, P50: 2}, {Name: cellsFloor, N: 3, P50: 200}}}
	r.Latency = []Summary{
		{Name: statelessRow, N: 30, P50: 2.6},
		{Name: livePrintRow, N: 30, P50: 3, ExecP50: 2.5},
		{Name: cellsRow, N: 3, P50: 260},
		{Name: liveStateRow(10 << 20), N: 8, P50: 9},
	}
	r.pairs = []pair{
		{row: livePrintRow, floor: livePrintFloor, target: ratioTarget, basis: "b1"},
		{row: cellsRow, floor: cellsFloor, target: cellsTarget, basis: "b2"},
		{row: liveStateRow(10 << 20), floor: liveStateFloor("10 MB state"), target: ratioTarget, basis: "b3"},
	}
	got := ratios(r)
	want := []Ratio{
		{Case: statelessRow, FloorMS: 2, Ratio: 1.3, Target: ratioTarget},
		{Case: livePrintRow, FloorMS: 2, Ratio: 1.5, Target: ratioTarget},
		{Case: cellsRow, FloorMS: 200, Ratio: 1.3, Target: cellsTarget},
	}
	if len(got) != len(want) {
		t.Fatalf("got ratios %+v, want %d (no floor measured: no ratio)", got, len(want))
	}
	for i, w := range want {
		if g := got[i]; g.Case != w.Case || g.FloorMS != w.FloorMS || g.Ratio != w.Ratio || g.Target != w.Target {
			t.Errorf("ratio %d: got %+v, want %+v", i, g, w)
		}
	}
	if !strings.Contains(got[1].Basis, "b1") {
		t.Errorf("got basis %q, want the pair's", got[1].Basis)
	}
	parts := breakdown(r)
	if len(parts) != 3 {
		t.Fatalf("got parts %+v, want the stateless part and two live parts", parts)
	}
	if g := parts[1]; g.Case != livePrintRow || g.REPLMS != 2 || g.OwnMS != 1 || g.InExchangeMS == nil || *g.InExchangeMS != 0.5 {
		t.Errorf("got %+v, want REPL 2, kiln's own 1, 0.5 of it in the exchange", g)
	}
	if g := parts[2]; g.Case != cellsRow || g.OwnMS != 60 || g.InExchangeMS != nil {
		t.Errorf("got %+v, want kiln's own 60 and nothing in the exchange", g)
	}
}

func TestLiveAnswer(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := []struct {
		name    string
		r       execResult
		want    string
		wantErr string
	}{
		{"printed", execResult{Code: http.StatusOK, Status: "ok", Stdout: "1\n", RuntimeStatus: "reused"}, "1", ""},
		{"final expression", execResult{Code: http.StatusOK, Status: "ok", Result: str("np.float64(5.5)"), RuntimeStatus: "reused"}, "5.5", ""},
		{"nothing to hold", execResult{Code: http.StatusOK, Status: "ok", RuntimeStatus: "reused"}, "", ""},
		{"resumed", execResult{Code: http.StatusOK, Status: "ok", Stdout: "1\n", RuntimeStatus: "resumed"}, "1", "not in the session's live sandbox"},
		{"no live sessions", execResult{Code: http.StatusOK, Status: "ok", Stdout: "1\n"}, "1", "not in the session's live sandbox"},
		{"wrong output", execResult{Code: http.StatusOK, Status: "ok", Stdout: "2\n", Result: str("3"), RuntimeStatus: "reused"}, "1", "stdout"},
		{"busy", execResult{Code: http.StatusConflict}, "1", "answered 409"},
		{"a name dropped", execResult{Code: http.StatusOK, Status: "ok", Stdout: "1\n", RuntimeStatus: "reused", StateError: str("not kept")}, "1", "state_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := liveAnswer(&tt.r, tt.want)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("got error %v, want one with %q", err, tt.wantErr)
			}
		})
	}
}

func TestSmallCells(t *testing.T) {
	if len(smallCells) == 0 || cellsCalls%len(smallCells) != 0 {
		t.Fatalf("%d calls do not run the %d cells a whole number of times", cellsCalls, len(smallCells))
	}
	if got := smallCellAt(len(smallCells) + 1); got != smallCells[1] {
		t.Errorf("got %+v after a round, want %+v", got, smallCells[1])
	}
}

func TestLiveSandboxes(t *testing.T) {
	ids := []string{"aaaaaaaaaaaa1111", "bbbbbbbbbbbb2222", "cccccccccccc3333"}
	p := poolStats{Containers: []poolContainer{{ID: "bbbbbbbbbbbb", State: "ready"}}}
	if got, want := liveSandboxes(ids, p), []string{ids[0], ids[2]}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestMemoryCgroup(t *testing.T) {
	tests := []struct {
		name, in, dir, usage string
		ok                   bool
	}{
		{"v1", "12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n", "/sys/fs/cgroup/memory/docker/abc", "memory.usage_in_bytes", true},
		{"v1 joined controllers", "3:memory,hugetlb:/docker/abc\n", "/sys/fs/cgroup/memory/docker/abc", "memory.usage_in_bytes", true},
		{"v2", "0::/system.slice/docker-abc.scope\n", "/sys/fs/cgroup/system.slice/docker-abc.scope", "memory.current", true},
		{"hybrid: v1's memory first", "0::/init.scope\n4:memory:/docker/abc\n", "/sys/fs/cgroup/memory/docker/abc", "memory.usage_in_bytes", true},
		{"none", "2:cpu:/docker/abc\n", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, usage, _, ok := memoryCgroup(tt.in)
			if dir != tt.dir || usage != tt.usage || ok != tt.ok {
				t.Errorf("got %q %q %v, want %q %q %v", dir, usage, ok, tt.dir, tt.usage, tt.ok)
			}
		})
	}
	stat := "cache 100\ntotal_inactive_file 4096\ninactive_file 2048\n"
	if got := statValue(stat, "total_inactive_file"); got != 4096 {
		t.Errorf("got %d, want 4096", got)
	}
	if got := statValue(stat, "inactive_file"); got != 2048 {
		t.Errorf("got %d, want 2048 (not a suffix of another key)", got)
	}
	if got := statValue(stat, "active_file"); got != 0 {
		t.Errorf("got %d for an absent key, want 0", got)
	}
}

// TestHeldPair checks that the row of a live session holding 48 MB is set against kiln's
// own live print(1) of the same run, with or without a floor, and never split by it.
func TestHeldPair(t *testing.T) {
	r := newResults()
	r.Latency = []Summary{
		{Name: livePrintRow, N: 30, P50: 3},
		{Name: heldRow, N: 30, P50: 4.2},
	}
	r.pairs = []pair{{row: heldRow, floor: livePrintRow, kiln: true, target: heldTarget, basis: "kiln's"}}
	for _, floor := range []*Floor{nil, {BareExec: Summary{N: 8, P50: 2}}} {
		r.Floor = floor
		if floor != nil {
			r.Latency = append(r.Latency, Summary{Name: statelessRow, N: 30, P50: 2.6})
		}
		got := ratios(r)
		i := slices.IndexFunc(got, func(x Ratio) bool { return x.Case == heldRow })
		if i < 0 {
			t.Fatalf("floor %v: got ratios %+v, want the held row's", floor != nil, got)
		}
		if g := got[i]; g.FloorMS != 3 || g.Ratio != 1.4 || g.Target != heldTarget || !strings.Contains(g.Basis, "kiln's") {
			t.Errorf("floor %v: got %+v, want 4.2 against kiln's 3: 1.4, target %v", floor != nil, g, heldTarget)
		}
		for _, p := range breakdown(r) {
			if p.Case == heldRow {
				t.Errorf("got part %+v: a row set against kiln's own has no bare exchange to split by", p)
			}
		}
	}
}
