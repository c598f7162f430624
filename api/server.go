package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/programmatic"
	"github.com/kilnsh/kiln/replica"
)

// Health answers the health routes.
type Health interface {
	// Ready returns nil when kiln can serve executions, else why not.
	Ready(ctx context.Context) error
	// Detailed returns the body of /health/detailed and whether kiln is healthy.
	Detailed(ctx context.Context) any
}

// Observer is told about every HTTP request; kiln's metrics implement it.
type Observer interface {
	Request(route, method string, status int, d time.Duration)
	// Forwarded is told, after Request, how a request crossed replicas: ForwardedOut
	// (sent to its owner), ForwardedIn (sent here by another replica) or PassedOver
	// (its owner could not be reached: served here).
	Forwarded(route, how string)
	// QuotaRefused is told, after Request, of a request refused for the rate quota
	// (kiln.QuotaRate); the session layer tells of the others, whichever front end
	// asked (session.Config.Refused).
	QuotaRefused(kind string)
}

// How a request crossed replicas (Observer.Forwarded).
const (
	ForwardedOut = "to_owner"
	ForwardedIn  = "from_replica"
	PassedOver   = "owner_unreachable"
)

// Config is what a Server needs.
type Config struct {
	Keys *Keys
	// Tokens verifies signed user identities (LibreChat's tokens, in Authorization:
	// Bearer); nil when none are configured.
	Tokens         Tokens
	Sessions       Sessions // executions, sessions, state and files
	Health         Health
	Log            *slog.Logger
	MaxFileBytes   int64 // largest file an upload or a run keeps
	MaxStateBytes  int64 // largest state blob a client puts (POST /state)
	MaxBodyBytes   int64 // largest JSON body accepted
	MaxUploadBytes int64 // largest upload body accepted
	MaxFiles       int   // files in one upload, and per session
	Observer       Observer
	Metrics        http.Handler // served at /metrics (behind the key) when set
	Stats          StatsSource  // feeds GET /stats, the dashboard's data, when set
	RateLimit      RateLimit    // per-caller limits; zero values are off
	// SpoolDir is where uploaded files past spoolPast wait for the store, rather than in
	// memory; empty is the system's temporary directory.
	SpoolDir string
	// MCP is served at /mcp (not under /v1) behind the key and the rate limit, when set.
	MCP http.Handler
	// Jupyter is served under /jupyter (the Jupyter Server API: /jupyter/api/...) behind
	// the key, which Jupyter's clients also send as "Authorization: token KEY" or
	// ?token=KEY, when set.
	Jupyter http.Handler
	// E2B serves E2B's SDKs, when set: its control plane at /sandboxes and
	// /v2/sandboxes behind the key (sent as X-API-KEY), its errors in E2B's shape; and
	// every request that names a sandbox in E2b-Sandbox-Id, whatever its path, or is a
	// signed /files URL, with no key (a sandbox's access token guards it).
	E2B E2B
	// InstanceID names this kiln in continuation tokens, so that another instance that
	// gets one can say where it belongs.
	InstanceID string
	// Profiles are the execution profiles served (ProfileDefault, ProfileStateful), the
	// first named by answers to requests that expect none; nil serves both.
	Profiles []string
	// Replicas lets several kilns that share a store answer any request (forward.go);
	// the zero value is a lone kiln.
	Replicas replica.Config
	// AdminKeys are the operators' keys: with any, only they (and tokens with the admin
	// role) read /metrics, /stats and /health/detailed (requireOperator).
	AdminKeys *Keys
	// SeparateMonitoring leaves /metrics, /stats, /health/detailed and the dashboard off
	// this handler: Monitoring serves them on an address of their own.
	SeparateMonitoring bool
}

// Server is kiln's HTTP handler.
type Server struct {
	keys      *Keys
	tokens    Tokens
	sessions  Sessions
	maxUpload int64
	maxState  int64
	maxFile   int64
	spoolDir  string
	maxFiles  int
	health    Health
	log       *slog.Logger
	maxBody   int64
	obs       Observer
	metrics   http.Handler
	stats     StatsSource
	limiter   *limiter
	router    chi.Router
	mcp       http.Handler
	jupyter   http.Handler
	e2b       E2B
	e2bBox    http.Handler  // the requests for a sandbox, through withRequest
	keepAlive time.Duration // between comments on a quiet event stream
	instance  string
	profiles  []string
	ptc       programmatic.Runs // programmatic runs under way
	replicas  *replica.Forwarder
	admins    *Keys
	separate  bool // monitoring is served by Monitoring, not here
}

// New returns a Server with every route mounted at / and under /v1.
func New(cfg Config) *Server {
	s := &Server{
		keys: cfg.Keys, tokens: cfg.Tokens, sessions: cfg.Sessions, health: cfg.Health, log: cfg.Log,
		maxState: cfg.MaxStateBytes, maxUpload: cfg.MaxUploadBytes, spoolDir: cfg.SpoolDir, maxFile: cfg.MaxFileBytes, maxFiles: cfg.MaxFiles,
		maxBody: cfg.MaxBodyBytes, obs: cfg.Observer, metrics: cfg.Metrics,
		stats: cfg.Stats, limiter: newLimiter(cfg.RateLimit), keepAlive: keepAliveEvery,
		mcp: cfg.MCP, jupyter: cfg.Jupyter, e2b: cfg.E2B, instance: cfg.InstanceID, profiles: cfg.Profiles,
		replicas: replica.NewForwarder(cfg.InstanceID, cfg.Replicas),
		admins:   cfg.AdminKeys, separate: cfg.SeparateMonitoring,
	}
	if s.admins == nil {
		s.admins = &Keys{}
	}
	if len(s.profiles) == 0 {
		s.profiles = []string{ProfileDefault, ProfileStateful}
	}
	if s.keys == nil {
		s.keys = &Keys{}
	}
	r := chi.NewRouter()
	r.Use(s.withRequest, s.verifyPeer, s.withProfile)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, kiln.Errorf(kiln.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, kiln.Errorf(kiln.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	s.mount(r)
	r.Route("/v1", s.mount)
	if s.mcp != nil {
		// Every MCP message is a request to /mcp: a wrong key is refused before any
		// MCP session exists, and each message counts against the rate limit.
		r.With(s.requireKey, s.limitRate, s.routeBy(s.byMCPSession), s.ownMCP).Handle("/mcp", s.mcp)
	}
	if s.jupyter != nil {
		r.With(tokenFromQuery, s.requireKey, s.limitRate).Mount("/jupyter", http.StripPrefix("/jupyter", s.jupyter))
	}
	if s.e2b != nil {
		control := r.With(e2bShape, s.requireKey, s.limitRate)
		for _, p := range []string{"/sandboxes", "/sandboxes/*", "/v2/sandboxes", "/v2/sandboxes/*"} {
			control.Handle(p, s.e2b)
		}
		s.e2bBox = s.withRequest(http.HandlerFunc(s.e2b.Sandbox))
	}
	s.router = r
	return s
}

// E2B is the E2B front end (package e2b): its control plane, and what it serves for one
// sandbox.
type E2B interface {
	http.Handler
	Sandbox(w http.ResponseWriter, r *http.Request)
}

// e2bSandboxHeader names the sandbox a request of E2B's SDKs is for.
const e2bSandboxHeader = "E2b-Sandbox-Id"

// signedFileURL reports whether r is a URL that an E2B SDK's downloadUrl or uploadUrl
// made, opened without the SDK: it names its sandbox by its signature alone.
func signedFileURL(r *http.Request) bool {
	return r.URL.Path == "/files" && r.URL.Query().Has("signature")
}

type e2bShapeKey struct{}

// e2bShape makes the errors kiln's middleware writes E2B's ({code, message}), which
// the SDKs read.
func e2bShape(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), e2bShapeKey{}, true)))
	})
}

// tokenFromQuery takes a Jupyter client's ?token=KEY, which a browser's WebSocket
// cannot send as a header, as its credential when it sends none other.
func tokenFromQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t := r.URL.Query().Get("token"); t != "" && r.Header.Get("Authorization") == "" && r.Header.Get("X-Api-Key") == "" {
			r.Header.Set("Authorization", "token "+t)
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) mount(r chi.Router) {
	r.Get("/health", s.live)
	r.Get("/health/live", s.live)
	r.Get("/health/ready", s.ready)
	r.Get("/openapi.json", s.openAPI)
	if !s.separate {
		s.mountDashboard(r)
		r.Group(func(r chi.Router) {
			r.Use(s.requireOperator)
			r.Get("/health/detailed", s.detailed)
			s.mountMonitoring(r)
		})
	}
	r.Group(func(r chi.Router) {
		r.Use(s.requireKey)
		// The execution and data routes count against the caller's rate limit.
		r.Group(func(r chi.Router) {
			r.Use(s.limitRate)
			// Requests about what one replica holds (a live session, a run, an MCP
			// session) go to that replica (forward.go).
			r.With(s.routeBy(s.bySession)).Post("/exec", s.exec)
			r.With(s.routeBy(s.byExecution)).Post("/executions/{execution_id}/cancel", s.cancelExecution)
			r.With(s.routeBy(s.bySession)).Post("/exec/programmatic", s.execProgrammatic)
			r.With(s.routeBy(s.byRequestID)).Post("/exec/programmatic/cancel", s.cancelProgrammatic)
			r.Post("/upload", s.upload)
			r.Post("/upload/batch", s.uploadBatch)
			r.Get("/sessions/{session_id}/objects/{file_id}", s.objectInfo)
			r.Delete("/sessions/{session_id}/objects/{file_id}", s.objectDelete)
			r.Get("/files/{session_id}", s.listFiles)
			r.Delete("/files/{session_id}/{file_id}", s.deleteFile)
			r.Get("/download/{session_id}/{file_id}", s.download)
			// A session's state is read and changed on the replica that holds its live
			// sandbox: only there is a state that waits for its store (state_pending)
			// stored first, and the sandbox let go when the state is replaced.
			r.With(s.routeBy(s.bySessionPath)).Get("/state/{session_id}", s.getState)
			r.With(s.routeBy(s.bySessionPath)).Post("/state/{session_id}", s.putState)
			r.With(s.routeBy(s.bySessionPath)).Get("/state/{session_id}/info", s.stateInfo)
			r.With(s.routeBy(s.bySessionPath)).Delete("/state/{session_id}", s.deleteState)
			r.Get("/sessions", s.listSessions)
			r.Get("/sessions/{session_id}", s.getSession)
			r.With(s.routeBy(s.bySessionPath)).Post("/sessions/{session_id}/fork", s.forkSession)
			r.With(s.routeBy(s.bySessionPath)).Delete("/sessions/{session_id}", s.deleteSession)
		})
	})
}

// ServeHTTP makes Server an http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.e2bBox != nil && (r.Header.Get(e2bSandboxHeader) != "" || signedFileURL(r)) {
		s.e2bBox.ServeHTTP(w, r)
		return
	}
	s.router.ServeHTTP(w, r)
}
