package programmatic

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestRunsByIDAndRequest(t *testing.T) {
	var p Runs
	a1, a2, b := NewRun("a1", "alice"), NewRun("a2", "alice"), NewRun("b", "bob")
	if p.Get("a1") != nil || p.ByRequest("req") != nil {
		t.Fatal("an empty Runs holds something")
	}
	p.Name(a1, "req") // not held yet: names nothing
	if p.ByRequest("req") != nil {
		t.Error("a run not held was named")
	}
	for _, run := range []*Run{a1, a2, b} {
		p.Add(run)
	}
	if p.Get("a1") != a1 || p.Get("b") != b {
		t.Fatal("Get does not find the runs added")
	}
	p.Name(a1, "req")
	p.Name(a1, "")
	if p.ByRequest("req") != a1 {
		t.Fatalf("ByRequest(req) = %v, want a1", p.ByRequest("req"))
	}
	p.Name(b, "req") // bob may not take alice's id
	if p.ByRequest("req") != a1 {
		t.Errorf("another principal's run took the id: %v", p.ByRequest("req"))
	}
	p.Name(a2, "req") // alice's next run may
	if p.ByRequest("req") != a2 {
		t.Errorf("ByRequest(req) = %v after alice's second run took it, want a2", p.ByRequest("req"))
	}

	// a1 ends: the id stays a2's, and is not recorded as ended.
	p.Remove(a1)
	if p.Get("a1") != nil || p.ByRequest("req") != a2 {
		t.Errorf("after a1 ended: Get(a1) = %v, ByRequest(req) = %v, want nil, a2", p.Get("a1"), p.ByRequest("req"))
	}
	if got := p.RecordCancel("req", "alice"); got != CancelQueued {
		t.Errorf("RecordCancel of an id a run still holds = %v, want the ledger not to know it", got)
	}
	if !p.CancelledFirst("req", "alice") {
		t.Fatal("the cancel just recorded is not seen")
	}
	// a2 ends: the id is remembered as ended, alice's.
	p.Remove(a2)
	if p.ByRequest("req") != nil {
		t.Errorf("ByRequest(req) = %v after its run ended", p.ByRequest("req"))
	}
	if got := p.RecordCancel("req", "alice"); got != CancelEnded {
		t.Errorf("RecordCancel of an ended run's id = %v, want CancelEnded", got)
	}
	if got := p.RecordCancel("req", "bob"); got != CancelForeign {
		t.Errorf("RecordCancel of alice's ended run by bob = %v, want CancelForeign", got)
	}
}

// A cancel that comes before its run stops that run's start, once, for its own
// principal only, and only for a while.
func TestCancelBeforeTheRun(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := Runs{now: func() time.Time { return now }}
	if got := p.RecordCancel("req", "alice"); got != CancelQueued {
		t.Fatalf("RecordCancel of an unknown id = %v, want CancelQueued", got)
	}
	// bob's cancel of the same id is his own: it neither stands in alice's way nor
	// stops her run.
	if got := p.RecordCancel("req", "bob"); got != CancelQueued {
		t.Errorf("bob's cancel of the id alice's cancel holds = %v, want CancelQueued", got)
	}
	if got := p.RecordCancel("req", "alice"); got != CancelQueued {
		t.Errorf("alice's cancel again = %v, want CancelQueued", got)
	}
	if !p.CancelledFirst("req", "bob") || p.CancelledFirst("req", "bob") {
		t.Error("bob's run is not stopped, once, by his own cancel")
	}
	if p.CancelledFirst("req", "carol") {
		t.Error("carol's run is stopped by alice's or bob's cancel")
	}
	if !p.CancelledFirst("req", "alice") {
		t.Fatal("alice's run is not stopped by her cancel")
	}
	if p.CancelledFirst("req", "alice") {
		t.Error("a cancel stopped two runs")
	}

	p.RecordCancel("late", "alice")
	now = now.Add(recentFor + time.Second)
	if p.CancelledFirst("late", "alice") {
		t.Error("a cancel older than recentFor still stops a run")
	}
}

func TestLedgerBounds(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := Runs{now: func() time.Time { return now }}
	var m map[string]ledgerEntry
	m = p.remember(m, "old", "alice")
	now = now.Add(recentFor + time.Second)
	m = p.remember(m, "new", "alice")
	if _, ok := m["old"]; ok || len(m) != 1 {
		t.Errorf("entries %v: want the old one dropped", m)
	}
	for i := range recentMax { // full, none too old
		m[fmt.Sprint(i)] = ledgerEntry{principal: "alice", at: now}
	}
	m = p.remember(m, "newest", "alice")
	if len(m) > recentMax {
		t.Errorf("%d entries kept, want at most %d", len(m), recentMax)
	}
	if _, ok := m["newest"]; !ok {
		t.Error("the newest entry was dropped")
	}
}

func TestValidRequestID(t *testing.T) {
	for _, tt := range []struct {
		id   string
		want bool
	}{
		{"5f0e8c2a-7d4b-4f7e-9a53-1c2b3d4e5f60", true},
		{"a", true},
		{"A_z-9", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{"has space", false},
		{"dot.ted", false},
		{"ünï", false},
	} {
		if got := ValidRequestID(tt.id); got != tt.want {
			t.Errorf("ValidRequestID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}
