package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/auth"
)

type ctxKey int

const (
	keyRequest ctxKey = iota
)

// reqInfo travels in a request's context: who asked, and what to log about it.
type reqInfo struct {
	id        string
	log       *slog.Logger
	owner     string    // the caller's key fingerprint, or the token's tenant (jwtOwner); "" when auth is off
	user      string    // the user a verified token named; "" for an API key
	tenant    string    // the tenant a verified token named; "" for an API key
	admin     bool      // the verified token has the ADMIN role
	expires   time.Time // the verified token's last moment (auth.Principal.Expires); zero for a key
	quota     string    // kiln.QuotaRate when the request was refused for it
	client    string    // the address the connection comes from (clientAddr)
	poolWait  time.Duration
	runStatus string // how the request's run ended (ok, oom, timeout...); "" without one
	// forwardedFrom is the replica that forwarded the request here, forwardedTo the
	// one it was forwarded to; "" when none. passedOver is an owner that could not be
	// reached, so that the request was served here.
	forwardedFrom, forwardedTo, passedOver string
}

// crossed says how the request crossed replicas (Observer.Forwarded), or "".
func (ri *reqInfo) crossed() string {
	switch {
	case ri.forwardedTo != "":
		return ForwardedOut
	case ri.forwardedFrom != "":
		return ForwardedIn
	case ri.passedOver != "":
		return PassedOver
	}
	return ""
}

func info(r *http.Request) *reqInfo {
	if ri, ok := r.Context().Value(keyRequest).(*reqInfo); ok {
		return ri
	}
	return &reqInfo{log: slog.Default()}
}

func requestID(r *http.Request) string    { return info(r).id }
func logger(r *http.Request) *slog.Logger { return info(r).log }

// withRequest gives every request an id, a logger that carries it, security headers,
// panic recovery and one log line when it is done.
func (s *Server) withRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := kiln.NewID()
		ri := &reqInfo{id: id, log: s.log.With("request_id", id), client: clientAddr(r)}
		r = r.WithContext(context.WithValue(r.Context(), keyRequest, ri))
		h := w.Header()
		h.Set("X-Request-Id", id)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				writeError(sw, r, fmt.Errorf("panic: %v", p))
			}
			route := chi.RouteContext(r.Context()).RoutePattern()
			if route == "" {
				route = "unmatched"
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			if r.Context().Err() != nil && status == http.StatusOK && sw.status == 0 {
				status = 499 // the client went away before an answer
			}
			d := time.Since(start)
			attrs := []slog.Attr{slog.String("method", r.Method), slog.String("route", route),
				slog.Int("status", status), slog.Float64("duration_ms", ms(d)),
				slog.Float64("pool_wait_ms", ms(ri.poolWait))}
			if ri.runStatus != "" {
				attrs = append(attrs, slog.String("run_status", ri.runStatus))
			}
			if ri.forwardedFrom != "" {
				attrs = append(attrs, slog.String("forwarded_from", ri.forwardedFrom))
			}
			if ri.forwardedTo != "" {
				attrs = append(attrs, slog.String("forwarded_to", ri.forwardedTo))
			}
			if ri.passedOver != "" {
				attrs = append(attrs, slog.String("owner_unreachable", ri.passedOver))
			}
			ri.log.LogAttrs(r.Context(), levelFor(status), "request", attrs...)
			if s.obs != nil {
				s.obs.Request(route, r.Method, status, d)
				if how := ri.crossed(); how != "" {
					s.obs.Forwarded(route, how)
				}
				if ri.quota != "" {
					s.obs.QuotaRefused(ri.quota)
				}
			}
		}()
		next.ServeHTTP(sw, r)
	})
}

func levelFor(status int) slog.Level {
	if status >= 500 && status != 503 {
		return slog.LevelError
	}
	return slog.LevelInfo
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush is here because streaming handlers (Connect's among them) assert http.Flusher
// rather than asking an http.ResponseController.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Keys checks API keys in constant time. The zero value has no keys: auth is off.
type Keys struct {
	digests [][32]byte
}

// NewKeys returns the key set; empty strings are ignored.
func NewKeys(keys []string) *Keys {
	k := &Keys{}
	for _, key := range keys {
		if key = strings.TrimSpace(key); key != "" {
			k.digests = append(k.digests, sha256.Sum256([]byte(key)))
		}
	}
	return k
}

// Enabled reports whether any key is configured.
func (k *Keys) Enabled() bool { return len(k.digests) > 0 }

// match returns the fingerprint of key when it is one of the configured keys.
// Every configured key is compared, in constant time, whatever matches.
func (k *Keys) match(key string) (string, bool) {
	d := sha256.Sum256([]byte(key))
	found := 0
	for i := range k.digests {
		found |= subtle.ConstantTimeCompare(d[:], k.digests[i][:])
	}
	return hex.EncodeToString(d[:8]), found == 1
}

// credential finds what the request authenticates with: X-API-Key, "Authorization:
// Bearer KEY" or "Authorization: Basic base64(KEY:)". Two different ones are refused: the
// caller would be one or the other by kiln's choice.
func credential(r *http.Request) (string, error) {
	var found []string
	if k := r.Header.Get("X-Api-Key"); k != "" {
		found = append(found, k)
	}
	auth := r.Header.Get("Authorization")
	scheme, rest, _ := strings.Cut(auth, " ")
	switch strings.ToLower(scheme) {
	case "bearer", "token": // token: Jupyter's clients
		found = append(found, strings.TrimSpace(rest))
	case "basic":
		if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest)); err == nil {
			user, pass, _ := strings.Cut(string(raw), ":")
			if user == "" {
				user = pass
			}
			found = append(found, user)
		}
	}
	switch {
	case len(found) == 0:
		return "", nil
	case len(found) == 2 && found[0] != found[1]:
		return "", kiln.Errorf(kiln.CodeInvalid, "two different credentials: send an API key or a token, not both")
	}
	return found[0], nil
}

// Tokens verifies a signed identity (auth.Verifier).
type Tokens interface {
	Verify(token string) (auth.Principal, error)
}

// looksSigned tells a token (three dot-separated base64url parts, the first a JSON
// header) from an API key.
func looksSigned(cred string) bool {
	head, rest, ok := strings.Cut(cred, ".")
	if !ok || strings.Count(rest, ".") != 1 {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(head)
	return err == nil && len(raw) > 0 && raw[0] == '{'
}

// jwtOwner is the owner of a token's callers: its tenant, apart from every API key (whose
// fingerprints are hex), encoded so that no byte of the claim can break an owner apart.
func jwtOwner(tenant string) string {
	return "jwt:" + base64.RawURLEncoding.EncodeToString([]byte(tenant))
}

// requireKey lets a request through when auth is off, its key matches, or its token is
// valid. Every refusal is the same 401: why goes to the log, never to the client.
func (s *Server) requireKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.keys.Enabled() && s.tokens == nil {
			next.ServeHTTP(w, r)
			return
		}
		id, err := s.identify(r)
		switch {
		case err != nil:
			writeError(w, r, err)
		case id.kind == byKey || id.kind == byToken:
			next.ServeHTTP(w, r)
		default:
			unauthorized(w, r)
		}
	})
}

// How identify found a request's caller.
const (
	byNothing  = iota // no credential, or one that matched nothing
	byKey             // one of API_KEYS
	byToken           // a verified signed token
	byAdminKey        // one of ADMIN_KEYS and not of API_KEYS
)

// identity is who a request's credential names.
type identity struct {
	kind  int
	admin bool // an operator: one of ADMIN_KEYS, or a token with the ADMIN role
}

// identify reads r's credential, as requireKey and requireOperator both need it, and
// records its owner in r's info. A credential that matches nothing is byNothing (a refused
// token's reason goes to the log); err is a malformed one.
func (s *Server) identify(r *http.Request) (identity, error) {
	cred, err := credential(r)
	if err != nil || cred == "" {
		return identity{}, err
	}
	ri := info(r)
	if s.tokens != nil && looksSigned(cred) {
		p, err := s.tokens.Verify(cred)
		if err != nil {
			ri.log.Info("token refused", "err", err)
			return identity{}, nil
		}
		ri.owner, ri.user, ri.tenant, ri.expires = jwtOwner(p.Tenant), p.Subject, p.Tenant, p.Expires
		ri.admin = strings.EqualFold(p.Role, AdminRole)
		ri.log = ri.log.With("tenant", p.Tenant, "user", p.Subject)
		return identity{kind: byToken, admin: ri.admin}, nil
	}
	adminOwner, admin := s.admins.match(cred)
	if owner, ok := s.keys.match(cred); ok {
		ri.owner = owner
		return identity{kind: byKey, admin: admin}, nil
	}
	if admin {
		ri.owner = adminOwner
		return identity{kind: byAdminKey, admin: true}, nil
	}
	return identity{}, nil
}

// unauthorized is the one answer to a missing or invalid credential: why goes to the log,
// never to the client.
func unauthorized(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="kiln"`)
	writeError(w, r, kiln.Errorf(kiln.CodeUnauthorized, "missing or invalid API key or token"))
}
