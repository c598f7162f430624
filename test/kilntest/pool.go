package kilntest

import (
	"encoding/json"
	"fmt"
	"net/http"
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
	resp, b, err := s.Request(http.MethodGet, "/health/detailed", nil, nil)
	if err != nil {
		return Pool{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Pool{}, fmt.Errorf("GET /health/detailed: status %d: %s", resp.StatusCode, b)
	}
	var body struct {
		Pool Pool `json:"pool"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return Pool{}, fmt.Errorf("GET /health/detailed: %v: %s", err, b)
	}
	return body.Pool, nil
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
	resp, b, err := s.Request(http.MethodGet, "/health/detailed", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Live Live `json:"live"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /health/detailed: status %d: %s", resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("GET /health/detailed: %v: %s", err, b)
	}
	return body.Live
}
