package e2b

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
)

// The ports E2B's SDKs name in E2b-Sandbox-Port: the sandbox's agent, and the code
// interpreter (not served yet).
const (
	EnvdPort        = "49983"
	InterpreterPort = "49999"
)

// HeaderSandboxID and HeaderSandboxPort are how an SDK with E2B_SANDBOX_URL set names
// the sandbox and port a request is for.
const (
	HeaderSandboxID   = "E2b-Sandbox-Id"
	HeaderSandboxPort = "E2b-Sandbox-Port"
)

type boxKey struct{}

// Sandbox serves a request for a sandbox (one that carries HeaderSandboxID, or a signed
// /files URL): envd's routes, behind the sandbox's access token.
func (h *Handler) Sandbox(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(HeaderSandboxID)
	var b *box
	if id != "" {
		b = h.boxes.get(id)
	} else if b = h.boxes.signedFor(r); b == nil {
		writeError(w, http.StatusUnauthorized, "the URL's signature is not one of a running sandbox: it is wrong or expired, or its sandbox has ended")
		return
	}
	if b == nil {
		// What E2B's edge answers for a sandbox that is not running: the SDKs read 502
		// as "not running" (Sandbox.isRunning) and as a timed-out sandbox elsewhere.
		writeError(w, http.StatusBadGateway, "The sandbox %s was not found: it was never created, was killed, or its timeout passed", id)
		return
	}
	switch port := r.Header.Get(HeaderSandboxPort); port {
	case "", EnvdPort:
	default:
		writeError(w, http.StatusBadGateway, "port %s of sandbox %s is not served by kiln: only envd's (%s) is", port, id, EnvdPort)
		return
	}
	if r.URL.Path == "/health" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if b.token != "" {
		if why := h.unauthorized(r, b); why != "" {
			writeError(w, http.StatusUnauthorized, "%s", why)
			return
		}
	}
	if user := requestUser(r); user != "" && user != "user" {
		writeError(w, http.StatusForbidden, "user %q is not available: kiln runs a sandbox's processes as its one unprivileged user, \"user\"", user)
		return
	}
	// A command's stream, a terminal or a large file lasts as long as its sandbox may, past
	// the server's deadlines for a REST call; the sandbox's end ends them.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	h.envd.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), boxKey{}, b)))
}

// unauthorized says why a request may not reach a secure sandbox, or "" when it may: it
// carries the sandbox's token, or is a /files URL the token signed that has not expired.
// The messages for a signature are envd's, which the SDKs' tests compare.
func (h *Handler) unauthorized(r *http.Request, b *box) string {
	if t := r.Header.Get("X-Access-Token"); t != "" {
		if subtle.ConstantTimeCompare([]byte(t), []byte(b.token)) == 1 {
			return ""
		}
		return "the access token is not this sandbox's"
	}
	if r.URL.Path == "/files" && r.URL.Query().Has("signature") {
		switch {
		case !signedBy(r, b):
			return "invalid signature"
		case signatureExpired(r):
			return "signature is already expired"
		}
		return ""
	}
	return "this sandbox is secure: send its envdAccessToken as X-Access-Token"
}

// requestUser is the user an SDK asks to act as: the Basic credentials' name on RPCs,
// the username parameter on /files; "" when it names none.
func requestUser(r *http.Request) string {
	if u := r.URL.Query().Get("username"); u != "" {
		return u
	}
	a := r.Header.Get("Authorization")
	if raw, ok := strings.CutPrefix(a, "Basic "); ok {
		if dec, err := base64.StdEncoding.DecodeString(raw); err == nil {
			name, _, _ := strings.Cut(string(dec), ":")
			return name
		}
	}
	return ""
}

func boxOf(ctx context.Context) *box { b, _ := ctx.Value(boxKey{}).(*box); return b }

func (h *Handler) envdMux() http.Handler {
	mux := http.NewServeMux()
	path, proc := processHandler(h)
	mux.Handle(path, proc)
	path, fs := filesystemHandler(h)
	mux.Handle(path, fs)
	mux.HandleFunc("GET /files", h.download)
	mux.HandleFunc("POST /files", h.upload)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "envd has no route %s %s", r.Method, r.URL.Path)
	})
	return mux
}

// agentError is an agent call's failure, with the Connect code the REPL named.
type agentError struct {
	code    connect.Code
	message string
}

func (e *agentError) Error() string { return e.message }

// codeOf maps the names the agent uses (Connect's) to codes.
func codeOf(name string) connect.Code {
	for c := connect.CodeCanceled; c <= connect.CodeUnauthenticated; c++ {
		if c.String() == name {
			return c
		}
	}
	return connect.CodeInternal
}

// call starts an agent call in the box's sandbox.
func (h *Handler) call(ctx context.Context, b *box, method string, args any, data []byte) (*sandbox.AgentStream, error) {
	st, err := b.held.Agent(ctx, method, args, data)
	if err != nil {
		return nil, h.gone(b, err)
	}
	return st, nil
}

// gone turns the failure of a sandbox into the error the SDKs read as "not running".
func (h *Handler) gone(b *box, err error) error {
	if errors.Is(err, kiln.ErrSandboxExited) {
		h.end(b.id, "its sandbox died")
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the sandbox %s has ended", b.id))
	}
	return err
}

// unary runs an agent call to its end and returns the end's event.
func (h *Handler) unary(ctx context.Context, b *box, method string, args any, data []byte) (protocol.AgentEvent, error) {
	st, err := h.call(ctx, b, method, args, data)
	if err != nil {
		return protocol.AgentEvent{}, err
	}
	defer st.Close()
	for {
		e, err := st.Next(ctx)
		if err != nil {
			return protocol.AgentEvent{}, h.gone(b, err)
		}
		if !e.End {
			continue
		}
		if e.Code != "" {
			return e, &agentError{code: codeOf(e.Code), message: e.Error}
		}
		return e, nil
	}
}

// next returns a stream's next event, calling keepalive each time every passes without
// one, as envd keeps its long streams open. Its error is the stream's, the request's end,
// or keepalive's.
func next(ctx context.Context, st *sandbox.AgentStream, every time.Duration, keepalive func() error) (protocol.AgentEvent, error) {
	for {
		wait, cancel := context.WithTimeout(ctx, every)
		e, err := st.Next(wait)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return e, err
		}
		if err := keepalive(); err != nil {
			return e, err
		}
	}
}

// rpcError is err as a Connect error.
func rpcError(err error) error {
	var ae *agentError
	if errors.As(err, &ae) {
		return connect.NewError(ae.code, errors.New(ae.message))
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	if errors.Is(err, context.Canceled) {
		return connect.NewError(connect.CodeCanceled, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

// decode reads an end event's result into v.
func decode(e protocol.AgentEvent, v any) error {
	if len(e.Event) == 0 {
		return nil
	}
	if err := json.Unmarshal(e.Event, v); err != nil {
		return fmt.Errorf("the sandbox's agent answered what kiln cannot read: %w", err)
	}
	return nil
}

// keepaliveEvery is how often a stream sends a keep-alive when it has nothing else to
// send: the SDK's Keepalive-Ping-Interval (seconds), else 50 s.
func keepaliveEvery(hdr http.Header) time.Duration {
	if n, err := strconv.Atoi(hdr.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 50 * time.Second
}
