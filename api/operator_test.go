package api_test

import (
	"net/http"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
)

var monitoringRoutes = []string{"/metrics", "/stats", "/health/detailed", "/v1/metrics"}

func metricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("kiln_up 1\n")) })
}

// Without ADMIN_KEYS an API key reads the monitoring routes, a user's token never does,
// whatever its tenant; a token with the admin role does.
func TestMonitoringIsForOperators(t *testing.T) {
	h := api.NewHarness(t, api.HarnessConfig{Keys: []string{"k1"}, Tokens: fakeTokens{}, Metrics: metricsHandler()})
	bearer := func(v string) http.Header { return http.Header{"Authorization": {"Bearer " + v}} }
	for _, path := range monitoringRoutes {
		if rec := serve(t, h, "GET", path, "", "", http.Header{"X-Api-Key": {"k1"}}); rec.Code != http.StatusOK {
			t.Errorf("%s with the API key: %d, want 200", path, rec.Code)
		}
		for _, user := range []string{"user-a", "user-c"} {
			rec := serve(t, h, "GET", path, "", "", bearer(token(user)))
			if e := checkError(t, rec, http.StatusForbidden, kiln.CodeForbidden); e.Message == "" {
				t.Errorf("%s refused to %s without a reason", path, user)
			}
		}
		if rec := serve(t, h, "GET", path, "", "", bearer(token("admin-a"))); rec.Code != http.StatusOK {
			t.Errorf("%s with an admin's token: %d, want 200", path, rec.Code)
		}
		checkError(t, serve(t, h, "GET", path, "", "", nil), http.StatusUnauthorized, kiln.CodeUnauthorized)
		checkError(t, serve(t, h, "GET", path, "", "", http.Header{"X-Api-Key": {"wrong"}}), http.StatusUnauthorized, kiln.CodeUnauthorized)
	}
	// The probes stay open.
	for _, path := range []string{"/health/live", "/health/ready"} {
		if rec := serve(t, h, "GET", path, "", "", nil); rec.Code != http.StatusOK {
			t.Errorf("%s without credentials: %d, want 200", path, rec.Code)
		}
	}
}

// With ADMIN_KEYS only they (and admins' tokens) read the monitoring routes; an API key
// is refused them, and an admin key runs no code.
func TestAdminKeys(t *testing.T) {
	h := api.NewHarness(t, api.HarnessConfig{Keys: []string{"k1"}, AdminKeys: []string{"ops"}, Tokens: fakeTokens{}, Metrics: metricsHandler()})
	for _, path := range monitoringRoutes {
		if rec := serve(t, h, "GET", path, "", "", http.Header{"Authorization": {"Bearer ops"}}); rec.Code != http.StatusOK {
			t.Errorf("%s with the admin key: %d, want 200", path, rec.Code)
		}
		checkError(t, serve(t, h, "GET", path, "", "", http.Header{"X-Api-Key": {"k1"}}), http.StatusForbidden, kiln.CodeForbidden)
		if rec := serve(t, h, "GET", path, "", "", http.Header{"Authorization": {"Bearer " + token("admin-a")}}); rec.Code != http.StatusOK {
			t.Errorf("%s with an admin's token: %d, want 200", path, rec.Code)
		}
	}
	checkError(t, serve(t, h, "POST", "/exec", jsonCT, `{"code":"1"}`, http.Header{"X-Api-Key": {"ops"}}), http.StatusUnauthorized, kiln.CodeUnauthorized)
}

// With the monitoring on an address of its own, the main handler has none of it, and the
// monitoring handler serves it: open, or to ADMIN_KEYS when there are some.
func TestSeparateMonitoring(t *testing.T) {
	h := api.NewHarness(t, api.HarnessConfig{Keys: []string{"k1"}, SeparateMonitoring: true, Metrics: metricsHandler()})
	mon := h.Monitoring()
	for _, path := range monitoringRoutes {
		checkError(t, serve(t, h, "GET", path, "", "", http.Header{"X-Api-Key": {"k1"}}), http.StatusNotFound, kiln.CodeNotFound)
		if rec := serve(t, mon, "GET", path, "", "", nil); rec.Code != http.StatusOK {
			t.Errorf("%s on the monitoring address: %d, want 200", path, rec.Code)
		}
	}
	if rec := serve(t, mon, "GET", "/dashboard/", "", "", nil); rec.Code != http.StatusOK {
		t.Errorf("the dashboard on the monitoring address: %d", rec.Code)
	}
	checkError(t, serve(t, mon, "POST", "/exec", jsonCT, `{"code":"1"}`, nil), http.StatusNotFound, kiln.CodeNotFound)

	h = api.NewHarness(t, api.HarnessConfig{Keys: []string{"k1"}, AdminKeys: []string{"ops"}, SeparateMonitoring: true, Metrics: metricsHandler()})
	mon = h.Monitoring()
	checkError(t, serve(t, mon, "GET", "/metrics", "", "", nil), http.StatusUnauthorized, kiln.CodeUnauthorized)
	if rec := serve(t, mon, "GET", "/metrics", "", "", http.Header{"X-Api-Key": {"ops"}}); rec.Code != http.StatusOK {
		t.Errorf("/metrics with the admin key on the monitoring address: %d", rec.Code)
	}
}
