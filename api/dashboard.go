package api

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
)

// dashboardFiles is the dashboard page: plain HTML, CSS and JavaScript, no build step,
// nothing loaded from elsewhere.
//
//go:embed dashboard
var dashboardFiles embed.FS

// StatsSource feeds GET /stats, the dashboard's execution numbers; kiln's metrics
// implement it.
type StatsSource interface {
	// Stats returns a JSON-encodable snapshot: counts, latency buckets, recent failures.
	Stats() any
}

// dashboardPolicy lets the page load only its own files and talk only to this origin.
const dashboardPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// mountDashboard mounts the routes open in every mode: the dashboard's static page
// (its data calls need a key when auth is on) and a redirect to it from the root.
func (s *Server) mountDashboard(r chi.Router) {
	static, err := fs.Sub(dashboardFiles, "dashboard")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix("/dashboard/", http.FileServer(http.FS(static)))
	page := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", dashboardPolicy)
		// StripPrefix needs the path as the router saw it, also under /v1.
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/dashboard/" + chi.URLParam(r, "*")
		files.ServeHTTP(w, r2)
	}
	r.Get("/dashboard/*", page)
	r.Get("/dashboard", toDashboard)
	r.Get("/", toDashboard)
}

// mountMonitoring mounts the data routes behind the key: Prometheus metrics and the
// dashboard's stats. Prometheus sends the key as a bearer token (docs/operations.md).
func (s *Server) mountMonitoring(r chi.Router) {
	if s.metrics != nil {
		r.Method(http.MethodGet, "/metrics", s.metrics)
	}
	r.Get("/stats", func(w http.ResponseWriter, r *http.Request) {
		if s.stats == nil {
			writeJSON(w, http.StatusOK, map[string]any{})
			return
		}
		writeJSON(w, http.StatusOK, s.stats.Stats())
	})
}

// toDashboard redirects the root (of / or of /v1) and the page's bare name to the page.
func toDashboard(w http.ResponseWriter, r *http.Request) {
	target := "/dashboard/"
	if strings.HasPrefix(r.URL.Path, "/v1") {
		target = "/v1/dashboard/"
	}
	http.Redirect(w, r, target, http.StatusFound)
}
