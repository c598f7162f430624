package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/session"
)

// KernelName is the one kernel spec served, the default.
const KernelName = "python3"

// entity marks the sessions that are kernels, so that a kernel is found by id on a
// replica that did not start it.
const entity = "jupyter-kernel"

// Config is what a Handler needs.
type Config struct {
	Sessions *session.Service
	// Caller returns who sent r; the request has passed kiln's key check already.
	Caller func(r *http.Request) session.Caller
	Log    *slog.Logger
	// Version is kiln's, told in GET /api and in kernel_info.
	Version string
	// PythonVersion is the sandboxes' Python, told in kernel_info.
	PythonVersion string
	// CellTimeout bounds one cell; zero is the executor's default.
	CellTimeout time.Duration
}

// Handler serves the Jupyter Server API under its mount point (the paths it sees begin
// with /api).
type Handler struct {
	cfg      Config
	sessions *session.Service
	log      *slog.Logger
	mux      *http.ServeMux

	mu      sync.Mutex
	kernels map[string]*kernel
}

// New returns a Handler.
func New(cfg Config) *Handler {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	h := &Handler{cfg: cfg, sessions: cfg.Sessions, log: cfg.Log, kernels: map[string]*kernel{}, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /api", h.api)
	h.mux.HandleFunc("GET /api/{$}", h.api)
	h.mux.HandleFunc("GET /api/status", h.apiStatus)
	h.mux.HandleFunc("GET /api/kernelspecs", h.kernelSpecs)
	h.mux.HandleFunc("GET /api/kernelspecs/{name}", h.kernelSpec)
	h.mux.HandleFunc("GET /api/kernels", h.list)
	h.mux.HandleFunc("POST /api/kernels", h.start)
	h.mux.HandleFunc("GET /api/kernels/{id}", h.get)
	h.mux.HandleFunc("DELETE /api/kernels/{id}", h.delete)
	h.mux.HandleFunc("POST /api/kernels/{id}/interrupt", h.interrupt)
	h.mux.HandleFunc("POST /api/kernels/{id}/restart", h.restart)
	h.mux.HandleFunc("GET /api/kernels/{id}/channels", h.channels)
	h.mux.HandleFunc("GET /api/sessions", h.noSessions)
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Close shuts every kernel's connections; the kernels' sessions stay.
func (h *Handler) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range h.kernels {
		k.mu.Lock()
		for c := range k.conns {
			c.close()
		}
		k.mu.Unlock()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers as Jupyter Server does: {"message", "reason"} with the status.
func fail(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"message": msg, "reason": http.StatusText(status)})
}

// failErr answers with kiln's error mapped onto a status.
func failErr(w http.ResponseWriter, err error) {
	var ke *kiln.Error
	status := http.StatusInternalServerError
	if errors.As(err, &ke) {
		switch ke.Code {
		case kiln.CodeNotFound:
			status = http.StatusNotFound
		case kiln.CodeInvalid:
			status = http.StatusBadRequest
		case kiln.CodeBusy, kiln.CodeRateLimited:
			status = http.StatusServiceUnavailable
		}
	}
	fail(w, status, err.Error())
}

func (h *Handler) api(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": "2.14.0", "kiln": h.cfg.Version})
}

func (h *Handler) apiStatus(w http.ResponseWriter, r *http.Request) {
	c := h.cfg.Caller(r)
	n := 0
	h.mu.Lock()
	for _, k := range h.kernels {
		if k.caller.Principal() == c.Principal() {
			n++
		}
	}
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"started": time.Now().UTC().Format(time.RFC3339), "kernels": n, "connections": 0})
}

// spec is the python3 kernel spec.
func (h *Handler) spec() map[string]any {
	return map[string]any{
		"name": KernelName,
		"spec": map[string]any{
			"argv": []string{}, "display_name": "Python 3 (kiln)", "language": "python",
			"interrupt_mode": "message", "env": map[string]string{}, "metadata": map[string]any{},
		},
		"resources": map[string]string{},
	}
}

func (h *Handler) kernelSpecs(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"default": KernelName, "kernelspecs": map[string]any{KernelName: h.spec()}})
}

func (h *Handler) kernelSpec(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("name") != KernelName {
		fail(w, http.StatusNotFound, "no such kernel spec: "+r.PathValue("name"))
		return
	}
	writeJSON(w, http.StatusOK, h.spec())
}

// noSessions answers Jupyter's sessions API, which kiln does not keep: gateway clients
// ask for it, and an empty list is true.
func (h *Handler) noSessions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, []any{})
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	c := h.cfg.Caller(r)
	out := []model{}
	h.mu.Lock()
	var mine []*kernel
	for _, k := range h.kernels {
		if k.caller.Principal() == c.Principal() {
			mine = append(mine, k)
		}
	}
	h.mu.Unlock()
	for _, k := range mine {
		out = append(out, k.model())
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) start(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Name string `json:"name"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&in); err != nil && r.ContentLength > 0 {
			fail(w, http.StatusBadRequest, "the body is not JSON: "+err.Error())
			return
		}
	}
	if in.Name == "" {
		in.Name = KernelName
	}
	if in.Name != KernelName {
		fail(w, http.StatusNotFound, "no such kernel spec: "+in.Name+" (kiln serves "+KernelName+")")
		return
	}
	c := h.cfg.Caller(r)
	sess, err := h.sessions.NewSession(r.Context(), c, entity)
	if err != nil {
		failErr(w, err)
		return
	}
	k := h.add(kernelID(sess.ID), sess.ID, c)
	k.touch("idle")
	w.Header().Set("Location", "/api/kernels/"+k.id)
	writeJSON(w, http.StatusCreated, k.model())
}

// forgetAfter is how long a kernel with no connection and no cell may sit in the table
// before add forgets it: a client that closed its page without shutting the kernel down
// leaves no entry for ever. Its session stays (until the store's TTL), and its id still
// reaches it (kernel reads it back), with its execution count from 0.
const forgetAfter = time.Hour

// add registers a kernel of c's for the session sid, or returns the one registered; it
// first forgets the kernels idle past forgetAfter.
func (h *Handler) add(id, sid string, c session.Caller) *kernel {
	h.mu.Lock()
	defer h.mu.Unlock()
	if k, ok := h.kernels[id]; ok {
		return k
	}
	now := time.Now()
	for kid, k := range h.kernels {
		if k.forgettable(now) {
			delete(h.kernels, kid)
		}
	}
	k := &kernel{id: id, sid: sid, name: KernelName, caller: c, h: h, state: "idle", last: now, conns: map[*conn]bool{}}
	h.kernels[id] = k
	return k
}

// kernel returns the caller's kernel with the id of r's path: one this process knows,
// or one whose session the caller owns (a kernel started on another replica, or before
// a restart). Another caller's kernel is not found.
func (h *Handler) kernel(w http.ResponseWriter, r *http.Request) (*kernel, bool) {
	id := r.PathValue("id")
	c := h.cfg.Caller(r)
	h.mu.Lock()
	k, ok := h.kernels[id]
	h.mu.Unlock()
	if ok {
		if k.caller.Principal() != c.Principal() {
			fail(w, http.StatusNotFound, "no such kernel: "+id)
			return nil, false
		}
		return k, true
	}
	sid, ok := sessionOf(id)
	if !ok {
		fail(w, http.StatusNotFound, "no such kernel: "+id)
		return nil, false
	}
	sess, err := h.sessions.Session(r.Context(), c, sid)
	if err != nil || sess.EntityID != entity {
		fail(w, http.StatusNotFound, "no such kernel: "+id)
		return nil, false
	}
	return h.add(id, sid, c), true
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	if k, ok := h.kernel(w, r); ok {
		writeJSON(w, http.StatusOK, k.model())
	}
}

func (h *Handler) delete(w http.ResponseWriter, r *http.Request) {
	k, ok := h.kernel(w, r)
	if !ok {
		return
	}
	if err := h.shutdown(r.Context(), k); err != nil {
		failErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// shutdown ends a kernel: its running cell, its connections and its session.
func (h *Handler) shutdown(ctx context.Context, k *kernel) error {
	_ = k.interrupt(ctx)
	h.mu.Lock()
	delete(h.kernels, k.id)
	h.mu.Unlock()
	k.mu.Lock()
	k.shutdown = true
	conns := k.conns
	k.conns = map[*conn]bool{}
	k.mu.Unlock()
	for c := range conns {
		c.close()
	}
	return h.sessions.DeleteSession(ctx, k.caller, k.sid)
}

func (h *Handler) interrupt(w http.ResponseWriter, r *http.Request) {
	k, ok := h.kernel(w, r)
	if !ok {
		return
	}
	if err := k.interrupt(r.Context()); err != nil {
		failErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) restart(w http.ResponseWriter, r *http.Request) {
	k, ok := h.kernel(w, r)
	if !ok {
		return
	}
	if err := k.restart(r.Context()); err != nil {
		failErr(w, err)
		return
	}
	k.status(nil, "", "idle")
	writeJSON(w, http.StatusOK, k.model())
}
