package jupyter

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

// KernelName is the one kernel spec served, the default.
const KernelName = "python3"

// entity marks the sessions that are kernels, so that a kernel is found by id on a
// replica that did not start it.
const entity = "jupyter-kernel"

// Config is what a Handler needs.
type Config struct {
	Sessions Sessions
	// Caller returns who sent r; the request has passed kiln's key check already.
	Caller func(r *http.Request) session.Caller
	Log    *slog.Logger
	// Version is kiln's, told in GET /api and in kernel_info.
	Version string
	// PythonVersion is the sandboxes' Python, told in kernel_info.
	PythonVersion string
	// CellTimeout bounds one cell; zero is the executor's default.
	CellTimeout time.Duration
	// MaxKernels bounds the kernels one caller holds in this process's table
	// (JUPYTER_MAX_KERNELS), MaxConnections the WebSockets open on one kernel
	// (JUPYTER_MAX_CONNECTIONS), and MaxQueuedBytes the cells one connection has waiting
	// (JUPYTER_MAX_QUEUED_MB); zero takes the defaults below.
	MaxKernels     int
	MaxConnections int
	MaxQueuedBytes int64
	// MaxCellBytes bounds one message that holds a cell (its code, with room for the
	// envelope); zero is 16 MiB. Any other message is bounded by maxControl.
	MaxCellBytes int64
}

// The bounds a Config that names none takes.
const (
	DefaultMaxKernels     = 16
	DefaultMaxConnections = 8
	DefaultMaxQueuedBytes = 16 << 20
	defaultMaxCellBytes   = 16 << 20
)

// Handler serves the Jupyter Server API under its mount point (the paths it sees begin
// with /api).
type Handler struct {
	cfg      Config
	sessions Sessions
	log      *slog.Logger
	mux      *http.ServeMux

	mu      sync.Mutex
	kernels map[string]*kernel
	// sockets counts the WebSocket connections being served, each until its running cell
	// has ended; closing refuses new ones (Close). Both under mu.
	sockets sync.WaitGroup
	closing bool
}

// New returns a Handler.
func New(cfg Config) *Handler {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	cfg.MaxKernels = cmp.Or(cfg.MaxKernels, DefaultMaxKernels)
	cfg.MaxConnections = cmp.Or(cfg.MaxConnections, DefaultMaxConnections)
	cfg.MaxQueuedBytes = cmp.Or(cfg.MaxQueuedBytes, DefaultMaxQueuedBytes)
	cfg.MaxCellBytes = cmp.Or(cfg.MaxCellBytes, defaultMaxCellBytes)
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

// Close shuts every kernel's connections, refuses new ones, and waits, within ctx, for
// the cells they were running to end: an HTTP server's Shutdown does not wait for a
// WebSocket, and a cell's results must be stored before the store closes. The kernels'
// sessions stay.
func (h *Handler) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closing = true
	for _, k := range h.kernels {
		k.mu.Lock()
		for c := range k.conns {
			// Each close waits for its client's answering frame: not one after another.
			go c.close(websocket.StatusGoingAway, "kiln is shutting down")
		}
		k.mu.Unlock()
	}
	h.mu.Unlock()
	done := make(chan struct{})
	go func() {
		h.sockets.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kernel connections still running cells: %w", ctx.Err())
	}
}

// serving counts a WebSocket connection as served until the returned done is called;
// false once Close has begun.
func (h *Handler) serving() (done func(), ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return nil, false
	}
	h.sockets.Add(1)
	return h.sockets.Done, true
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
		case kiln.CodeTooLarge:
			status = http.StatusRequestEntityTooLarge
		case kiln.CodeForbidden:
			status = http.StatusForbidden
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
		if c.Owns(k.owner) {
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
		if c.Owns(k.owner) {
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
	if n := h.held(c); n >= h.cfg.MaxKernels {
		fail(w, http.StatusTooManyRequests, fmt.Sprintf(
			"kernel limit reached: this caller holds %d kernels and JUPYTER_MAX_KERNELS is %d; shut one down first", n, h.cfg.MaxKernels))
		return
	}
	sess, err := h.sessions.NewSession(r.Context(), c, entity)
	if err != nil {
		failErr(w, err)
		return
	}
	k := h.add(kernelID(sess.ID), sess, c)
	k.touch("idle")
	w.Header().Set("Location", "/api/kernels/"+k.id)
	writeJSON(w, http.StatusCreated, k.model())
}

// forgetAfter is how long a kernel with no connection and no cell may sit in the table
// before add forgets it: a client that closed its page without shutting the kernel down
// leaves no entry for ever. Its session stays (until the store's TTL), and its id still
// reaches it (kernel reads it back), with its execution count from 0.
const forgetAfter = time.Hour

// held counts the kernels in the table that c made: those written with its owner.
func (h *Handler) held(c session.Caller) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, k := range h.kernels {
		if k.owner == c.Owner() {
			n++
		}
	}
	return n
}

// add registers the kernel of sess, reached by c, or returns the one registered; it
// first forgets the kernels idle past forgetAfter.
func (h *Handler) add(id string, sess *store.Session, c session.Caller) *kernel {
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
	k := &kernel{id: id, sid: sess.ID, owner: sess.Owner, name: KernelName, caller: c, h: h, state: "idle", last: now,
		conns: map[*conn]bool{}}
	h.kernels[id] = k
	return k
}

// kernel returns the caller's kernel with the id of r's path: one this process knows,
// or one whose session the caller owns (a kernel started on another replica, or before
// a restart). Either is found by the rule of the sessions themselves (key and user, or
// tenant and user under tokens): another caller's kernel is not found. So is an id in
// any spelling but the one kiln writes (lower-case).
func (h *Handler) kernel(w http.ResponseWriter, r *http.Request) (*kernel, bool) {
	id := r.PathValue("id")
	c := h.cfg.Caller(r)
	sid, ok := sessionOf(id)
	if !ok {
		fail(w, http.StatusNotFound, "no such kernel: "+id+" (a kernel id is a UUID in lower case)")
		return nil, false
	}
	h.mu.Lock()
	k, ok := h.kernels[id]
	h.mu.Unlock()
	if ok {
		if !c.Owns(k.owner) {
			fail(w, http.StatusNotFound, "no such kernel: "+id)
			return nil, false
		}
		return k, true
	}
	sess, err := h.sessions.Session(r.Context(), c, sid)
	if err != nil || sess.EntityID != entity {
		fail(w, http.StatusNotFound, "no such kernel: "+id)
		return nil, false
	}
	return h.add(id, sess, c), true
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

// shutdown ends a kernel: no cell of it starts from now on (those queued get aborted
// replies), the running one is interrupted, its connections close, its session goes.
func (h *Handler) shutdown(ctx context.Context, k *kernel) error {
	k.mu.Lock()
	k.shutdown = true
	conns := k.conns
	k.conns = map[*conn]bool{}
	k.mu.Unlock()
	_ = k.interrupt(ctx)
	h.mu.Lock()
	delete(h.kernels, k.id)
	h.mu.Unlock()
	for c := range conns {
		c.abortQueued()
		c.close(websocket.StatusGoingAway, "the kernel was shut down")
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
