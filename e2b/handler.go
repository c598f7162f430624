package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/egress"
	"github.com/kilnsh/kiln/session"
)

// EnvdVersion is the envd version kiln reports: the SDKs turn features on by it, and
// kiln implements what they expect of it: stdin, the default user, CloseStdin, octet-stream
// and gzip uploads, file metadata (0.6.2), the watchers' entry info (0.6.3) and their
// network-mount flag (0.6.4, which changes nothing here: a sandbox mounts no network file
// system).
const EnvdVersion = "0.6.4"

// Sandboxes is what the front end needs of the session layer.
type Sandboxes interface {
	Hold(ctx context.Context, c session.Caller, req session.HoldRequest) (*session.Held, error)
}

// Config is what a Handler needs.
type Config struct {
	Sandboxes Sandboxes
	// Caller returns who sent a control-plane request; kiln's key check has passed.
	Caller func(r *http.Request) session.Caller
	Log    *slog.Logger
	// Templates maps an E2B template id to the language of the pool that serves it.
	Templates map[string]string
	// DefaultTimeout and MaxTimeout bound a sandbox's life (E2B's timeout); zero takes
	// 300 s and an hour.
	DefaultTimeout, MaxTimeout time.Duration
	// MaxPerCaller bounds the sandboxes one caller holds at once; zero is 8.
	MaxPerCaller int
	// MilliCPU and MemoryMB are what a sandbox has, as the control plane reports it.
	MilliCPU, MemoryMB, DiskMB int64
}

// Handler serves the control plane (ServeHTTP) and the sandboxes' envd (Sandbox).
type Handler struct {
	cfg   Config
	log   *slog.Logger
	boxes boxes
	envd  http.Handler

	closeOnce sync.Once
	closed    chan struct{}
}

// New returns a Handler.
func New(cfg Config) *Handler {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = 300 * time.Second
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = time.Hour
	}
	cfg.DefaultTimeout = min(cfg.DefaultTimeout, cfg.MaxTimeout)
	if cfg.MaxPerCaller <= 0 {
		cfg.MaxPerCaller = 8
	}
	h := &Handler{cfg: cfg, log: cfg.Log, closed: make(chan struct{})}
	h.envd = h.envdMux()
	return h
}

// ServeHTTP serves the control plane's routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/v2")
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) == 0 || parts[0] != "sandboxes" {
		writeError(w, http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path)
		return
	}
	switch {
	case len(parts) == 1 && r.Method == http.MethodPost:
		h.create(w, r)
	case len(parts) == 1 && r.Method == http.MethodGet:
		h.list(w, r)
	case len(parts) == 2 && r.Method == http.MethodGet:
		h.info(w, r, parts[1])
	case len(parts) == 2 && r.Method == http.MethodDelete:
		h.kill(w, r, parts[1])
	case len(parts) == 3 && parts[2] == "timeout" && r.Method == http.MethodPost:
		h.setTimeout(w, r, parts[1])
	case len(parts) == 3 && parts[2] == "connect" && r.Method == http.MethodPost:
		h.connect(w, r, parts[1])
	case len(parts) == 3 && parts[2] == "metrics" && r.Method == http.MethodGet:
		h.metrics(w, r, parts[1])
	case len(parts) == 3 && (parts[2] == "pause" || parts[2] == "resume" || parts[2] == "snapshots" || parts[2] == "fork" || parts[2] == "network"):
		writeError(w, http.StatusNotImplemented, "kiln does not %s E2B sandboxes yet", parts[2])
	default:
		writeError(w, http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path)
	}
}

// Close kills every held sandbox: at shutdown, none outlives the process that holds it.
func (h *Handler) Close() {
	h.closeOnce.Do(func() { close(h.closed) })
	for _, b := range h.boxes.close() {
		h.end(b.id, "kiln is shutting down")
	}
}

type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkConfig    `json:"network"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AutoPause           bool              `json:"autoPause"`
	MCP                 json.RawMessage   `json:"mcp"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
}

type networkConfig struct {
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
	Rules              json.RawMessage `json:"rules"`
}

// sandboxJSON is E2B's Sandbox, SandboxDetail and ListedSandbox in one: the fields each
// answer does not carry are left empty.
type sandboxJSON struct {
	TemplateID      string            `json:"templateID"`
	SandboxID       string            `json:"sandboxID"`
	Alias           string            `json:"alias,omitempty"`
	ClientID        string            `json:"clientID"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	StartedAt       string            `json:"startedAt,omitempty"`
	EndAt           string            `json:"endAt,omitempty"`
	CPUCount        int64             `json:"cpuCount,omitempty"`
	MemoryMB        int64             `json:"memoryMB,omitempty"`
	DiskSizeMB      int64             `json:"diskSizeMB,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	State           string            `json:"state,omitempty"`
}

// clientID is what E2B's answers call the host that runs a sandbox.
const clientID = "kiln"

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var req newSandbox
	if !readJSON(w, r, &req) {
		return
	}
	if req.TemplateID == "" {
		writeError(w, http.StatusBadRequest, "templateID is required")
		return
	}
	lang, ok := h.cfg.Templates[req.TemplateID]
	if !ok {
		writeError(w, http.StatusNotFound, "template '%s' not found: this kiln serves %s", req.TemplateID, h.templateNames())
		return
	}
	if req.AutoPause {
		writeError(w, http.StatusBadRequest, "autoPause is not supported by kiln yet: a sandbox is killed at its timeout")
		return
	}
	// Refused rather than ignored: a sandbox without what its caller asked for would fail
	// later, and less clearly.
	switch {
	case given(req.MCP):
		writeError(w, http.StatusBadRequest, "mcp is not supported by kiln: kiln is an MCP server itself, at /mcp")
		return
	case given(req.VolumeMounts):
		writeError(w, http.StatusBadRequest, "volumeMounts are not supported by kiln")
		return
	case req.Network != nil && (given(req.Network.EgressProxy) || given(req.Network.Rules)):
		writeError(w, http.StatusBadRequest, "network.egressProxy and network.rules are not supported by kiln: its sandboxes reach out through kiln's own egress proxy")
		return
	}
	timeout, err := h.timeout(req.Timeout)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	network, err := narrowing(req.AllowInternetAccess, req.Network)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	c := h.cfg.Caller(r)
	owner := c.Principal()
	if !h.boxes.reserve(owner, h.cfg.MaxPerCaller) {
		writeError(w, http.StatusTooManyRequests, "this caller holds %d sandboxes, the most it may (E2B_MAX_SANDBOXES_PER_CALLER); kill one first", h.cfg.MaxPerCaller)
		return
	}
	defer h.boxes.unreserve(owner)
	id := newID()
	held, err := h.cfg.Sandboxes.Hold(r.Context(), c, session.HoldRequest{Lang: lang, Network: network, Name: "e2b-" + id})
	if err != nil {
		writeKilnError(w, err)
		return
	}
	now := time.Now()
	b := &box{id: id, template: req.TemplateID, owner: owner, metadata: req.Metadata, envs: req.EnvVars, held: held, started: now}
	if req.Secure == nil || *req.Secure {
		b.token = newToken()
	}
	b.end = now.Add(timeout)
	if !h.boxes.add(b) {
		// Close has killed the table's sandboxes already: this one would outlive it.
		held.Release()
		writeError(w, http.StatusServiceUnavailable, "kiln is shutting down")
		return
	}
	b.mu.Lock()
	b.timer = time.AfterFunc(timeout, func() { h.end(id, "its timeout passed") })
	b.mu.Unlock()
	go h.watch(b)
	h.log.Info("e2b sandbox created", "sandbox", id, "template", req.TemplateID, "runtime_id", held.ID(), "timeout_s", timeout.Seconds())
	writeJSON(w, http.StatusCreated, h.describe(b, true, false))
}

// given reports whether a JSON member was sent with a value.
func given(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// watch ends the box when its sandbox dies first.
func (h *Handler) watch(b *box) {
	select {
	case <-b.held.Done():
		h.end(b.id, "its sandbox died")
	case <-h.closed:
	}
}

// end kills the box, once.
func (h *Handler) end(id, why string) {
	b := h.boxes.take(id)
	if b == nil {
		return
	}
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	b.held.Release()
	h.log.Info("e2b sandbox ended", "sandbox", id, "why", why)
}

func (h *Handler) templateNames() string {
	names := make([]string, 0, len(h.cfg.Templates))
	for name := range h.cfg.Templates {
		names = append(names, name)
	}
	if len(names) == 0 {
		return "no templates"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// timeout reads E2B's timeout in seconds: absent is the default, and more than the
// operator's bound is refused rather than cut, so a caller never holds less than it thinks.
func (h *Handler) timeout(seconds *int64) (time.Duration, error) {
	if seconds == nil {
		return h.cfg.DefaultTimeout, nil
	}
	if *seconds <= 0 {
		return 0, fmt.Errorf("timeout must be a positive number of seconds, not %d", *seconds)
	}
	d := time.Duration(*seconds) * time.Second
	if d > h.cfg.MaxTimeout {
		return 0, fmt.Errorf("timeout %d s is over this kiln's bound, %d s (E2B_MAX_TIMEOUT_SECONDS)", *seconds, int64(h.cfg.MaxTimeout/time.Second))
	}
	return d, nil
}

// narrowing turns E2B's network settings into kiln's narrowing of the operator's
// policy, which they can only narrow.
func narrowing(internet *bool, n *networkConfig) (*egress.Network, error) {
	if internet != nil && !*internet {
		return &egress.Network{Off: true}, nil
	}
	if n == nil {
		return nil, nil
	}
	if len(n.DenyOut) > 0 {
		return nil, errors.New("network.denyOut is not supported by kiln: name what the sandbox may reach in network.allowOut, within the operator's policy")
	}
	if len(n.AllowOut) > 0 {
		return &egress.Network{Allow: n.AllowOut}, nil
	}
	return nil, nil
}

func (h *Handler) owned(w http.ResponseWriter, r *http.Request, id string) *box {
	b := h.boxes.get(id)
	if b == nil || b.owner != h.cfg.Caller(r).Principal() {
		// Another caller's sandbox is as unknown as one that never was.
		writeError(w, http.StatusNotFound, "sandbox %q not found", id)
		return nil
	}
	return b
}

func (h *Handler) describe(b *box, withToken, detail bool) sandboxJSON {
	out := sandboxJSON{TemplateID: b.template, SandboxID: b.id, Alias: b.template, ClientID: clientID, EnvdVersion: EnvdVersion}
	if withToken {
		out.EnvdAccessToken = b.token
	}
	if detail {
		out.StartedAt = b.started.UTC().Format(time.RFC3339Nano)
		out.EndAt = b.endAt().UTC().Format(time.RFC3339Nano)
		out.CPUCount = max(1, (h.cfg.MilliCPU+999)/1000)
		out.MemoryMB = h.cfg.MemoryMB
		out.DiskSizeMB = h.cfg.DiskMB
		out.Metadata = b.metadata
		if out.Metadata == nil {
			out.Metadata = map[string]string{}
		}
		out.State = "running"
	}
	return out
}

func (h *Handler) info(w http.ResponseWriter, r *http.Request, id string) {
	if b := h.owned(w, r, id); b != nil {
		writeJSON(w, http.StatusOK, h.describe(b, true, true))
	}
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request, id string) {
	if b := h.owned(w, r, id); b != nil {
		h.end(b.id, "its owner killed it")
		w.WriteHeader(http.StatusNoContent)
	}
}

func (h *Handler) extend(b *box, d time.Duration, onlyLonger bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	end := time.Now().Add(d)
	if onlyLonger && end.Before(b.end) {
		return
	}
	b.end = end
	if b.timer != nil {
		b.timer.Reset(d)
	}
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, id string) {
	b := h.owned(w, r, id)
	if b == nil {
		return
	}
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	if req.Timeout == nil {
		writeError(w, http.StatusBadRequest, "timeout is required")
		return
	}
	d, err := h.timeout(req.Timeout)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	h.extend(b, d, false)
	w.WriteHeader(http.StatusNoContent)
}

// connect is how an SDK's Sandbox.connect finds a running sandbox: its timeout is
// extended to the one asked for, never shortened.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request, id string) {
	b := h.owned(w, r, id)
	if b == nil {
		return
	}
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	d, err := h.timeout(req.Timeout)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	h.extend(b, d, true)
	writeJSON(w, http.StatusOK, h.describe(b, true, false))
}

// readJSON decodes a request's body, of at most 1 MiB; an empty body is an empty object.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "the request body could not be read: %v", err)
		return false
	}
	if len(body) > 1<<20 {
		writeError(w, http.StatusRequestEntityTooLarge, "the request body is over 1 MiB")
		return false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return true
	}
	if err := json.Unmarshal(body, v); err != nil {
		writeError(w, http.StatusBadRequest, "the request body is not valid JSON for this route: %v", err)
		return false
	}
	return true
}

// errorBody is E2B's error: code is the HTTP status, which the SDKs branch on.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, errorBody{Code: status, Message: fmt.Sprintf(format, args...)})
}

// writeKilnError answers with a kiln error's status, in E2B's shape.
func writeKilnError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	var e *kiln.Error
	msg := "internal error"
	if errors.As(err, &e) {
		msg = e.Message
		switch e.Code {
		case kiln.CodeInvalid:
			status = http.StatusBadRequest
		case kiln.CodeNotFound:
			status = http.StatusNotFound
		case kiln.CodeRateLimited, kiln.CodeBusy:
			status = http.StatusTooManyRequests
			if e.RetryAfter > 0 {
				w.Header().Set("Retry-After", fmt.Sprint(e.RetryAfter))
			}
		case kiln.CodeUnavailable:
			status = http.StatusServiceUnavailable
		}
	} else if errors.Is(err, kiln.ErrQueueFull) || errors.Is(err, kiln.ErrQueueTimeout) || errors.Is(err, context.DeadlineExceeded) {
		status, msg = http.StatusServiceUnavailable, "no warm sandbox came free in time; try again"
	} else if errors.Is(err, kiln.ErrUnsupportedLanguage) {
		status, msg = http.StatusNotFound, "no pool of this kiln serves the template's language"
	} else if errors.Is(err, kiln.ErrShuttingDown) {
		status, msg = http.StatusServiceUnavailable, "kiln is shutting down"
	}
	writeError(w, status, "%s", msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"code":500,"message":"response encoding failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
