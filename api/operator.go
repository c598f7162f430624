package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/kilnsh/kiln"
)

// AdminRole is the role claim of a signed token whose holder is an operator (LibreChat
// names its administrators so).
const AdminRole = "ADMIN"

// requireOperator guards what only operators read: /metrics, /stats, /health/detailed.
// Their data spans every caller (sandbox ids, the image, each tenant's failures), so a
// user's token never opens them, whatever its tenant. With ADMIN_KEYS, an admin key or
// a token with the admin role does; without, an API key does too (its holder is the
// platform that runs kiln). With no credentials configured at all, as every route, they
// are open.
func (s *Server) requireOperator(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.keys.Enabled() && s.tokens == nil && !s.admins.Enabled() {
			next.ServeHTTP(w, r)
			return
		}
		s.operatorOnly(w, r, next)
	})
}

// requireAdminKey guards the monitoring address (Monitoring): open, as an address the
// operator keeps to its own network, unless ADMIN_KEYS are set.
func (s *Server) requireAdminKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.admins.Enabled() {
			next.ServeHTTP(w, r)
			return
		}
		s.operatorOnly(w, r, next)
	})
}

// operatorOnly serves next to an operator's credential: 401 for none or a wrong one,
// 403 for a valid one that is not an operator's.
func (s *Server) operatorOnly(w http.ResponseWriter, r *http.Request, next http.Handler) {
	id, err := s.identify(r)
	switch {
	case err != nil:
		writeError(w, r, err)
	case id.admin, id.kind == byKey && !s.admins.Enabled():
		next.ServeHTTP(w, r)
	case id.kind == byToken:
		writeError(w, r, kiln.Errorf(kiln.CodeForbidden, "operators only: %s needs an admin key (ADMIN_KEYS) or a token with the %s role", r.URL.Path, AdminRole))
	case id.kind == byKey:
		writeError(w, r, kiln.Errorf(kiln.CodeForbidden, "operators only: %s needs one of ADMIN_KEYS", r.URL.Path))
	default:
		unauthorized(w, r)
	}
}

// Monitoring is what METRICS_LISTEN_ADDR serves: /metrics, /stats, /health/detailed and
// the dashboard (also under /v1), and the probes, behind requireAdminKey.
func (s *Server) Monitoring() http.Handler {
	r := chi.NewRouter()
	r.Use(s.withRequest)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, kiln.Errorf(kiln.CodeNotFound, "no route %s %s on the monitoring address", r.Method, r.URL.Path))
	})
	mount := func(r chi.Router) {
		r.Get("/health/live", s.live)
		r.Get("/health/ready", s.ready)
		s.mountDashboard(r)
		r.Group(func(r chi.Router) {
			r.Use(s.requireAdminKey)
			r.Get("/health/detailed", s.detailed)
			s.mountMonitoring(r)
		})
	}
	mount(r)
	r.Route("/v1", mount)
	return r
}
