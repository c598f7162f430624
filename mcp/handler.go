package mcp

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kilnsh/kiln/session"
)

// Config is what a Handler needs.
type Config struct {
	Sessions Sessions
	// Caller returns who sent r, as the HTTP layer in front of the handler authenticated
	// them: the request has passed kiln's key check already.
	Caller func(r *http.Request) session.Caller
	Log    *slog.Logger
	// Version is kiln's, told to clients in the initialize answer.
	Version string
	// MaxImageBytes bounds a PNG returned as an image block; a larger one is a
	// resource link. Default 1 MiB.
	MaxImageBytes int64
	// IdleTimeout closes an MCP session that has seen no request for that long.
	// Default 30 minutes.
	IdleTimeout time.Duration
	// ProgressEvery is the longest a run goes without a progress notification, when
	// the client asked for progress. Default 5 s.
	ProgressEvery time.Duration
}

// Handler serves MCP Streamable HTTP. Each MCP session is bound to the caller who
// created it: a request that names the session with another key is refused, and the
// session's tools act as that caller. MCP sessions live in this process's memory.
//
// The SDK's closing of a session waits for the calls in flight, so whatever closes one
// (the client's DELETE, Close) first ends the session's own context, which ends its
// runs. A session closed for idleness (no request for longer than any run) has none.
type Handler struct {
	cfg      Config
	sessions Sessions
	server   *sdk.Server
	http     *sdk.StreamableHTTPHandler
	log      *slog.Logger

	mu     sync.Mutex
	states map[string]*mcpSession // by MCP session id
	closed bool
	wg     sync.WaitGroup // one watcher per MCP session
}

// New returns a Handler.
func New(cfg Config) *Handler {
	if cfg.MaxImageBytes <= 0 {
		cfg.MaxImageBytes = 1 << 20
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 30 * time.Minute
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{cfg: cfg, sessions: cfg.Sessions, log: cfg.Log, states: map[string]*mcpSession{}}
	h.server = newServer(cfg.Version, cfg.Log)
	h.addTools(h.server)
	h.http = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return h.server }, &sdk.StreamableHTTPOptions{
		Logger:         cfg.Log,
		SessionTimeout: cfg.IdleTimeout,
		// kiln checks the key itself and is usually reached through a proxy under
		// another host name: the Host of a request says nothing about its origin.
		DisableLocalhostProtection: true,
		// A client that hangs up on a call (protocols that allow it) cancels the call.
		PropagateRequestCancellation: true,
	})
	return h
}

// newServer returns an MCP server with kiln's name and instructions and no tools.
func newServer(version string, log *slog.Logger) *sdk.Server {
	if version == "" {
		version = "dev"
	}
	return sdk.NewServer(&sdk.Implementation{Name: "kiln", Title: "kiln code execution", Version: version}, &sdk.ServerOptions{
		Instructions: instructions,
		Logger:       log,
		Capabilities: &sdk.ServerCapabilities{
			Tools:     &sdk.ToolCapabilities{},
			Resources: &sdk.ResourceCapabilities{},
		},
	})
}

// instructions tell a model what kiln is, in the initialize answer.
const instructions = `kiln runs Python (and bash, and with its polyglot pool js, ts, c, cpp, java, php, rs, go, d, f90 and r) ` +
	`in a hardened sandbox of its own per session, with Python state kept between calls: ` +
	`variables, imports and files in /mnt/data survive from one execute to the next in the same session. ` +
	`Without a session_id, execute uses this connection's default session. Figures (plt.show or plt.savefig) ` +
	`come back as images; other files as resource links you can read. The sandbox has no network.`

// ServeHTTP serves one HTTP request of the MCP transport.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := h.cfg.Caller(r)
	if id := r.Header.Get("Mcp-Session-Id"); id != "" {
		st := h.state(id)
		if st != nil && st.caller.Principal() != c.Principal() {
			// Another key naming this session: as if it did not exist.
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		if st != nil && r.Method == http.MethodDelete {
			// The SDK's close waits for the calls in flight: their runs end first.
			st.end()
		}
		h.http.ServeHTTP(w, r)
		return
	}
	h.http.ServeHTTP(&bindWriter{ResponseWriter: w, bind: func(id string) { h.bind(id, c) }}, r)
}

// Close ends every MCP session, which interrupts their runs, and waits for their
// watchers. It is idempotent; requests after it find no session.
func (h *Handler) Close() {
	h.mu.Lock()
	h.closed = true
	for _, st := range h.states {
		st.end() // first: closing a session waits for its calls in flight
	}
	h.mu.Unlock()
	for ss := range h.server.Sessions() {
		_ = ss.Close()
	}
	h.wg.Wait()
}

// bind records the caller of a new MCP session and watches for its end.
func (h *Handler) bind(id string, c session.Caller) {
	var ss *sdk.ServerSession
	for s := range h.server.Sessions() {
		if s.ID() == id {
			ss = s
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || ss == nil || h.states[id] != nil {
		return
	}
	st := newMCPSession(c)
	h.states[id] = st
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		_ = ss.Wait()
		st.end()
		h.mu.Lock()
		delete(h.states, id)
		h.mu.Unlock()
	}()
}

// state returns the MCP session's state, nil when there is none.
func (h *Handler) state(id string) *mcpSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.states[id]
}

// bindWriter learns the id of a new MCP session from the first response's header.
type bindWriter struct {
	http.ResponseWriter
	bind  func(id string)
	bound bool
}

func (w *bindWriter) learn() {
	if !w.bound {
		w.bound = true
		if id := w.Header().Get("Mcp-Session-Id"); id != "" {
			w.bind(id)
		}
	}
}

func (w *bindWriter) WriteHeader(code int) {
	w.learn()
	w.ResponseWriter.WriteHeader(code)
}

func (w *bindWriter) Write(p []byte) (int, error) {
	w.learn()
	return w.ResponseWriter.Write(p)
}

func (w *bindWriter) Flush() {
	w.learn()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *bindWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// mcpSession is what kiln keeps of one MCP session: who it acts for, its default
// Python session, and the runs going on in it, by Python session.
type mcpSession struct {
	caller session.Caller
	ctx    context.Context // ends with the MCP session, interrupting its runs
	cancel context.CancelFunc

	mu      sync.Mutex
	dflt    string            // the default Python session's id, "" until the first run
	running map[string]string // Python session id → execution id
}

func newMCPSession(c session.Caller) *mcpSession {
	ctx, cancel := context.WithCancel(context.Background())
	return &mcpSession{caller: c, ctx: ctx, cancel: cancel, running: map[string]string{}}
}

func (s *mcpSession) end() { s.cancel() }

func (s *mcpSession) defaultSession() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dflt
}

func (s *mcpSession) setDefault(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dflt = id
}

// started records the run going on in a Python session; the returned function
// forgets it.
func (s *mcpSession) started(sid, executionID string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[sid] = executionID
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.running[sid] == executionID {
			delete(s.running, sid)
		}
	}
}

func (s *mcpSession) runningIn(sid string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.running[sid]
	return id, ok
}
