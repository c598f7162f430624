package kilntest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Pool is the pool part of /health/detailed.
type Pool struct {
	Target     int   `json:"target"`
	Ready      int   `json:"ready"`
	Warming    int   `json:"warming"`
	InUse      int   `json:"in_use"`
	Kept       int   `json:"kept"` // by live sessions, between their calls
	Waiting    int   `json:"waiting"`
	Created    int64 `json:"created"`
	Failed     int64 `json:"failed"`
	Removed    int64 `json:"removed"`
	Leaked     int64 `json:"leaked"`
	Died       int64 `json:"died"`
	Containers []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"containers"`
}

// Pool reads the pool's state from /health/detailed with the server's key.
func (s *Server) Pool() (Pool, error) {
	var body struct {
		Pool Pool `json:"pool"`
	}
	err := s.healthDetailed(&body)
	return body.Pool, err
}

// healthDetailed reads GET /health/detailed with the server's key into v.
func (s *Server) healthDetailed(v any) error {
	resp, b, err := s.Request(http.MethodGet, "/health/detailed", nil, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /health/detailed: status %d: %s", resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET /health/detailed: %v: %s", err, b)
	}
	return nil
}

// MustPool is Pool for tests: it fails the test on error.
func (s *Server) MustPool(t testing.TB) Pool {
	t.Helper()
	p, err := s.Pool()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// WaitFor polls cond every 100 ms until it holds, failing the test after d.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", d, what)
}

// Live is the live part of /health/detailed: live sessions' sandboxes and their counts.
type Live struct {
	Enabled bool             `json:"enabled"`
	Idle    int              `json:"idle"`
	Busy    int              `json:"busy"`
	Calls   map[string]int64 `json:"calls"`
	Ended   map[string]int64 `json:"ended"` // by reason: idle, died, capacity, ...
}

// Live reads the live sessions' state from /health/detailed with the server's key.
func (s *Server) Live(t testing.TB) Live {
	t.Helper()
	var body struct {
		Live Live `json:"live"`
	}
	if err := s.healthDetailed(&body); err != nil {
		t.Fatal(err)
	}
	return body.Live
}

// Metrics reads GET /metrics with the server's key.
func (s *Server) Metrics(t testing.TB) []byte {
	t.Helper()
	resp, b, err := s.Request(http.MethodGet, "/metrics", nil, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %v %s", err, b)
	}
	return b
}

// MetricSum adds up the series of Prometheus text whose lines start with series: a
// metric's name (all its series), or its name and its first labels in their order
// (`kiln_replica_forwards_total{how="to_owner",`).
func MetricSum(text []byte, series string) float64 {
	var sum float64
	for line := range strings.Lines(string(text)) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), series)
		if !ok || rest == "" || !strings.Contains(series, "{") && rest[0] != '{' && rest[0] != ' ' {
			continue
		}
		if f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:]); len(f) > 0 {
			v, _ := strconv.ParseFloat(f[0], 64)
			sum += v
		}
	}
	return sum
}
