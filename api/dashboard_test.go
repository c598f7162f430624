package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type fakeStats struct{}

func (fakeStats) Stats() any { return map[string]int{"answer": 42} }

func TestDashboardRoutes(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "kiln_up 1\n") })
	s := NewHarness(t, HarnessConfig{Keys: []string{"k"}, Metrics: metrics, Stats: fakeStats{}})
	tests := []struct {
		path, key    string
		wantStatus   int
		wantLocation string
		wantBody     string
	}{
		{path: "/dashboard/", wantStatus: 200, wantBody: "<title>kiln dashboard</title>"},
		{path: "/v1/dashboard/", wantStatus: 200, wantBody: "<title>kiln dashboard</title>"},
		{path: "/dashboard/app.js", wantStatus: 200, wantBody: "REFRESH_MS"},
		{path: "/dashboard/style.css", wantStatus: 200, wantBody: "--accent"},
		{path: "/dashboard/nope.js", wantStatus: 404},
		{path: "/dashboard", wantStatus: 302, wantLocation: "/dashboard/"},
		{path: "/", wantStatus: 302, wantLocation: "/dashboard/"},
		{path: "/v1/", wantStatus: 302, wantLocation: "/v1/dashboard/"},
		{path: "/stats", wantStatus: 401},
		{path: "/stats", key: "k", wantStatus: 200, wantBody: `"answer":42`},
		{path: "/metrics", wantStatus: 401},
		{path: "/metrics", key: "k", wantStatus: 200, wantBody: "kiln_up 1"},
		{path: "/v1/metrics", key: "k", wantStatus: 200, wantBody: "kiln_up 1"},
	}
	for _, tt := range tests {
		t.Run(tt.path+" key="+tt.key, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tt.path, nil)
			if tt.key != "" {
				req.Header.Set("Authorization", "Bearer "+tt.key) // as Prometheus sends it
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, tt.wantStatus, rec.Body)
			}
			if got := rec.Header().Get("Location"); got != tt.wantLocation {
				t.Errorf("Location = %q, want %q", got, tt.wantLocation)
			}
			if !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Errorf("body lacks %q: %.200s", tt.wantBody, rec.Body)
			}
			if strings.Contains(tt.path, "/dashboard/") && rec.Code == 200 {
				if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") {
					t.Errorf("Content-Security-Policy = %q, want the page limited to its origin", csp)
				}
			}
		})
	}
}

// TestDashboardSelfContained checks that the page loads nothing from elsewhere: no
// CDN, no external font, no inline script the policy would block.
func TestDashboardSelfContained(t *testing.T) {
	for _, name := range []string{"dashboard/index.html", "dashboard/app.js", "dashboard/style.css"} {
		b, err := dashboardFiles.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, bad := range []string{"http://", "https://", "//cdn", "@import", "<script>", "innerHTML"} {
			if bad == "http://" && strings.Contains(text, "http://www.w3.org/2000/svg") {
				text = strings.ReplaceAll(text, "http://www.w3.org/2000/svg", "")
			}
			if strings.Contains(text, bad) {
				t.Errorf("%s contains %q", name, bad)
			}
		}
	}
}

// TestStatsWithoutSource: without a StatsSource, /stats is an empty object.
func TestStatsWithoutSource(t *testing.T) {
	h := NewHarness(t, HarnessConfig{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stats", nil))
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != "{}" {
		t.Errorf("got %d %q, want 200 {}", rec.Code, rec.Body)
	}
}
