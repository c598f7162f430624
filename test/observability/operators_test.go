package observability

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/kilnsh/kiln/test/kilntest"
)

// The monitoring routes are for operators: with METRICS_LISTEN_ADDR they leave the main
// address for their own, and with ADMIN_KEYS only an admin key reads them there; the API
// key runs code and reads none of them.
func TestMonitoringForOperatorsOnly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const admin = "observability-admin-key"
	s := start(t, "POOL_SIZE=1", "ADMIN_KEYS="+admin, "METRICS_LISTEN_ADDR="+addr)
	execOK(t, s, "import numpy as np\nprint(np.arange(10).sum())", "ok")

	for _, path := range []string{"/metrics", "/stats", "/health/detailed", "/dashboard/"} {
		resp, _, err := s.Request(http.MethodGet, path, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s on the main address with the API key = %d, want 404 (it is served on %s)", path, resp.StatusCode, addr)
		}
	}
	get := func(path, key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s on the monitoring address: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/metrics", admin); code != http.StatusOK || !strings.Contains(body, "kiln_executions_total") {
		t.Errorf("/metrics with the admin key = %d, want 200 with kiln's metrics", code)
	}
	for _, key := range []string{"", s.Key} {
		if code, _ := get("/metrics", key); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Errorf("/metrics with %q = %d, want a refusal", key, code)
		}
	}
	// The runtime says what isolates its sandboxes (sandbox.Traits), and the detailed
	// health tells it.
	isolation := kilntest.Runtime()
	if kilntest.OnKubernetes() {
		isolation = "default" // the cluster's RuntimeClass
	}
	code, body := get("/health/detailed", admin)
	var detailed struct {
		Pool struct {
			Runtime string `json:"runtime"`
		} `json:"pool"`
	}
	if err := json.Unmarshal([]byte(body), &detailed); code != http.StatusOK || err != nil || detailed.Pool.Runtime != isolation {
		t.Errorf("/health/detailed with the admin key = %d, pool.runtime %q (%v); want 200 naming %q", code, detailed.Pool.Runtime, err, isolation)
	}
	if code, _ := get("/health/ready", ""); code != http.StatusOK {
		t.Errorf("/health/ready on the monitoring address = %d, want 200 (open to probes)", code)
	}
	if code, body := get("/dashboard/", ""); code != http.StatusOK || !strings.Contains(body, "<html") {
		t.Errorf("the dashboard page on the monitoring address = %d", code)
	}
}
