package api

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/kilnsh/kiln"
)

// Replicas: several kilns behind one load balancer, sharing a store, each answering any
// request. What lives in one replica's memory (a live session's interpreter, a run under
// way, an MCP session) is claimed in the shared directory by that replica, and a request
// about it that reaches another replica is forwarded to the owner over HTTP, signed with
// the replicas' shared secret. An owner that is gone owns nothing: the request is served
// where it landed (a session resumes from its stored state). Clients never route.

// Peers is the directory of replicas (replica.Directory).
type Peers interface {
	// Claim makes this replica the owner of key for ttl, unless another replica that is
	// up owns it: then it returns that replica's URL.
	Claim(ctx context.Context, key string, ttl time.Duration) (url, owner string, err error)
	// Owner returns the URL of the replica that owns key when it is another one and up.
	Owner(ctx context.Context, key string) (url, owner string, err error)
	// Peer returns the URL of a replica by instance id, "" when it is not up.
	Peer(ctx context.Context, instance string) (string, error)
	// Release gives up this replica's claim of key.
	Release(ctx context.Context, key string) error
	// TakeOver makes this replica the owner of key if gone, an owner that could not be
	// reached, still holds it.
	TakeOver(ctx context.Context, key, gone string, ttl time.Duration) (bool, error)
}

// Replicas configures forwarding between replicas; the zero value is a lone kiln.
type Replicas struct {
	Peers  Peers
	Secret []byte // PEER_SECRET, shared by every replica
	// SessionTTL is how long a replica owns a session after its last call there: the
	// life of an idle live session.
	SessionTTL time.Duration
	// RunTTL is how long a replica owns a run it started (for cancels and continuations).
	RunTTL time.Duration
	// MCPTTL is how long a replica owns an MCP session after its last message.
	MCPTTL time.Duration
}

// The headers of a forwarded request: the replica that sent it, when, and its signature.
const (
	peerHeader     = "X-Kiln-Peer"
	peerTimeHeader = "X-Kiln-Peer-Time"
	peerSigHeader  = "X-Kiln-Peer-Signature"
	// A forwarded request older or newer than this is refused: replicas' clocks agree
	// to within seconds.
	peerClockSkew = 60 * time.Second
)

// What a replica owns, by kind, in the directory's keys.
func sessionKey(id string) string { return "s:" + id }
func runKey(id string) string     { return "x:" + id }
func requestKey(id string) string { return "r:" + id }
func mcpKey(id string) string     { return "m:" + id }

// peerSignature signs what a forwarded request cannot change without the secret: the
// sender, the time, the method and the target. The body is not signed: the caller's own
// credentials travel with it, and the owner checks them as if the caller had come
// straight to it.
func peerSignature(secret []byte, instance, at, method, target string) string {
	mac := hmac.New(sha256.New, secret)
	for _, part := range []string{"kiln-peer-v1", instance, at, method, target} {
		mac.Write([]byte(part))
		mac.Write([]byte{'\n'})
	}
	return hex.EncodeToString(mac.Sum(nil))
}

// signPeer marks out as forwarded by this replica.
func (s *Server) signPeer(out *http.Request) {
	at := strconv.FormatInt(time.Now().Unix(), 10)
	out.Header.Set(peerHeader, s.instance)
	out.Header.Set(peerTimeHeader, at)
	out.Header.Set(peerSigHeader, peerSignature(s.replicas.Secret, s.instance, at, out.Method, out.URL.RequestURI()))
}

// verifyPeer accepts a request forwarded by another replica, which is then served here
// whatever the directory says, and refuses one whose signature does not hold. Requests
// without the header pass as they are.
func (s *Server) verifyPeer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from := r.Header.Get(peerHeader)
		if from == "" {
			next.ServeHTTP(w, r)
			return
		}
		at := r.Header.Get(peerTimeHeader)
		sig, _ := hex.DecodeString(r.Header.Get(peerSigHeader))
		sec, err := strconv.ParseInt(at, 10, 64)
		want, _ := hex.DecodeString(peerSignature(s.replicas.Secret, from, at, r.Method, r.URL.RequestURI()))
		skew := time.Since(time.Unix(sec, 0))
		if len(s.replicas.Secret) == 0 || err != nil || skew > peerClockSkew || skew < -peerClockSkew || !hmac.Equal(sig, want) {
			writeError(w, r, kiln.Errorf(kiln.CodeUnauthorized, "the request claims to come from kiln replica %q, and its signature does not hold (PEER_SECRET differs, or the clocks are more than %s apart)", from, peerClockSkew))
			return
		}
		info(r).forwardedFrom = from
		next.ServeHTTP(w, r)
	})
}

// forwarded reports whether another replica sent r here to be served.
func forwarded(r *http.Request) bool { return info(r).forwardedFrom != "" }

// owned is what a request is about, for routing: a key of the directory, claimed for
// this replica when it is free (claim), or an instance named by the request itself (a
// continuation token).
type owned struct {
	key      string
	claim    bool
	ttl      time.Duration
	instance string
}

// routeBy forwards a request to the replica that owns what it is about, as of(r) says;
// one about nothing owned elsewhere is served here. of may read the body: it gets a
// copy.
func (s *Server) routeBy(of func(r *http.Request, body []byte) owned) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s.replicas.Peers == nil || forwarded(r) {
				next.ServeHTTP(w, r)
				return
			}
			body, err := s.bufferBody(r)
			if err != nil {
				writeError(w, r, err)
				return
			}
			o := of(r, body)
			target, owner, err := s.ownerOf(r.Context(), o)
			if err != nil {
				// The directory is unreachable: serve here. The stored state keeps the
				// answer right; only a live interpreter elsewhere is not used.
				logger(r).Warn("replica directory unavailable: serving here", "err", err)
			}
			if target == "" {
				next.ServeHTTP(w, r)
				return
			}
			s.forward(w, r, o, target, owner, body, next)
		})
	}
}

// ownerOf returns the URL and instance of the replica that owns o, when it is another
// one and up; empty when it is this one, or nobody.
func (s *Server) ownerOf(ctx context.Context, o owned) (string, string, error) {
	p := s.replicas.Peers
	switch {
	case o.instance != "":
		if o.instance == s.instance {
			return "", "", nil
		}
		url, err := p.Peer(ctx, o.instance)
		return url, o.instance, err
	case o.key == "":
		return "", "", nil
	case o.claim:
		return p.Claim(ctx, o.key, o.ttl)
	default:
		return p.Owner(ctx, o.key)
	}
}

// own claims key for this replica, for ttl, when replicas share a directory. A claim
// that fails is logged: requests about key are then served where they land.
func (s *Server) own(ctx context.Context, key string, ttl time.Duration) {
	if s.replicas.Peers == nil || key == "" {
		return
	}
	if _, owner, err := s.replicas.Peers.Claim(ctx, key, ttl); err != nil {
		s.log.Warn("claiming in the replica directory failed", "key", key, "err", err)
	} else if owner != s.instance {
		// Another replica took it between this replica's start of the call and now:
		// both served it, one at a time in the store's order; the next call goes there.
		s.log.Info("another replica owns this now", "key", key, "owner", owner)
	}
}

// bufferBody reads the body (at most the JSON body limit) so that it can be read by
// the router and again by whoever serves the request.
func (s *Server) bufferBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, s.maxBody+1))
	if err != nil {
		return nil, kiln.Errorf(kiln.CodeInvalid, "reading the request body: %v", err)
	}
	if int64(len(b)) > s.maxBody {
		return nil, kiln.Errorf(kiln.CodeTooLarge, "request body is over %d bytes", s.maxBody)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b, nil
}

// forward hands r, about o, to the replica at target and relays its answer. A replica
// that cannot be reached at all (it died since its last announcement) is passed over: the
// request is served here, and what o names becomes this replica's, so that the next
// requests about it do not try the dead one again.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, o owned, target, owner string, body []byte, local http.Handler) {
	u, err := url.Parse(target)
	if err != nil {
		writeError(w, r, kiln.Errorf(kiln.CodeInternal, "replica %s announced a malformed URL %q", owner, target))
		return
	}
	logger(r).Debug("forwarding to the owner", "owner", owner, "url", target)
	info(r).forwardedTo = owner
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = u.Host
			pr.Out.Body = io.NopCloser(bytes.NewReader(body))
			s.signPeer(pr.Out)
		},
		Transport:     s.peerTransport,
		FlushInterval: -1, // streams (SSE, MCP) pass each event on at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// No answer came (the handler is called before any byte of one). A dial that
			// failed, or a kept-alive connection that broke on an owner that no longer
			// takes connections, is an owner gone: the request is served here.
			var op *net.OpError
			gone := errors.As(err, &op) && op.Op == "dial"
			if !gone && r.Context().Err() == nil {
				gone = !s.answers(r.Context(), u.Host)
			}
			if gone {
				logger(r).Warn("the owner cannot be reached: serving here", "owner", owner, "err", err)
				info(r).forwardedTo, info(r).passedOver = "", owner
				if o.claim {
					if _, err := s.replicas.Peers.TakeOver(r.Context(), o.key, owner, o.ttl); err != nil {
						logger(r).Warn("taking over from an unreachable owner failed", "key", o.key, "err", err)
					}
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
				local.ServeHTTP(w, r)
				return
			}
			if r.Context().Err() != nil {
				return // the client went away
			}
			logger(r).Warn("forwarding to the owner failed", "owner", owner, "err", err)
			writeError(w, r, &kiln.Error{Code: kiln.CodeUnavailable, RetryAfter: 1, Message: "the kiln replica that holds this " +
				"session or run (" + owner + ") failed while answering; retry: the session resumes from its stored state if that replica is gone"})
		},
	}
	proxy.ServeHTTP(w, r)
}

// answers reports whether a replica at host takes connections at all.
func (s *Server) answers(ctx context.Context, host string) bool {
	c, err := (&net.Dialer{Timeout: peerDialTimeout}).DialContext(ctx, "tcp", host)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// peerDialTimeout bounds a connection to another replica: a dead owner is passed over
// after at most this long.
const peerDialTimeout = 2 * time.Second

// newPeerTransport is the HTTP transport between replicas: no proxy from the
// environment, short dials (a dead owner is passed over quickly), long streams.
func newPeerTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: peerDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
	}
}

// Routing rules, one per kind of request.

// bySession routes a call of a session (POST /exec, and a programmatic start) to the
// replica that owns the session, claiming it for this replica when nobody does; a
// continuation goes to the replica its token names.
func (s *Server) bySession(r *http.Request, body []byte) owned {
	var b struct {
		SessionID         string `json:"session_id"`
		ContinuationToken string `json:"continuation_token"`
	}
	_ = json.Unmarshal(body, &b) // a malformed body is for the handler to refuse
	if b.ContinuationToken != "" {
		if instance, _, _, ok := parseToken(b.ContinuationToken); ok {
			return owned{instance: instance}
		}
		return owned{}
	}
	if !kiln.ValidID(b.SessionID) {
		return owned{}
	}
	return owned{key: sessionKey(b.SessionID), claim: true, ttl: s.replicas.SessionTTL}
}

// bySessionPath routes a request about the session in the path (its deletion) to its owner.
func (s *Server) bySessionPath(r *http.Request, _ []byte) owned {
	if id := chi.URLParam(r, "session_id"); kiln.ValidID(id) {
		return owned{key: sessionKey(id)}
	}
	return owned{}
}

// byExecution routes a cancel of an execution to the replica running it.
func (s *Server) byExecution(r *http.Request, _ []byte) owned {
	if id := chi.URLParam(r, "execution_id"); kiln.ValidID(id) {
		return owned{key: runKey(id)}
	}
	return owned{}
}

// byRequestID routes a programmatic cancel to the replica that has the request.
func (s *Server) byRequestID(r *http.Request, body []byte) owned {
	var b struct {
		RequestID string `json:"request_id"`
	}
	_ = json.Unmarshal(body, &b)
	if b.RequestID == "" {
		b.RequestID = r.Header.Get(requestIDHeader)
	}
	if !requestIDPattern.MatchString(b.RequestID) {
		return owned{}
	}
	return owned{key: requestKey(b.RequestID)}
}

// byMCPSession routes an MCP message to the replica that holds its MCP session.
func (s *Server) byMCPSession(r *http.Request, _ []byte) owned {
	if id := r.Header.Get(mcpSessionHeader); id != "" && len(id) <= 256 {
		return owned{key: mcpKey(id)}
	}
	return owned{}
}

// mcpSessionHeader names an MCP session in the Streamable HTTP transport.
const mcpSessionHeader = "Mcp-Session-Id"

// ownMCP claims the MCP session that a message served here opened or used.
func (s *Server) ownMCP(next http.Handler) http.Handler {
	if s.replicas.Peers == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(mcpSessionHeader)
		cw := &claimWriter{ResponseWriter: w, claim: func(h http.Header) {
			if opened := h.Get(mcpSessionHeader); opened != "" {
				id = opened
			}
			if id != "" && r.Method != http.MethodDelete {
				s.own(r.Context(), mcpKey(id), s.replicas.MCPTTL)
			}
		}}
		next.ServeHTTP(cw, r)
		if r.Method == http.MethodDelete && id != "" {
			_ = s.replicas.Peers.Release(context.WithoutCancel(r.Context()), mcpKey(id))
		}
	})
}

// claimWriter calls claim with the answer's headers just before they go out.
type claimWriter struct {
	http.ResponseWriter
	claim   func(http.Header)
	claimed bool
}

func (c *claimWriter) WriteHeader(code int) {
	if !c.claimed {
		c.claimed = true
		c.claim(c.Header())
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *claimWriter) Write(b []byte) (int, error) {
	if !c.claimed {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the flusher underneath.
func (c *claimWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// Flush sends what is written so far, the headers first.
func (c *claimWriter) Flush() {
	if !c.claimed {
		c.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(c.ResponseWriter).Flush()
}
