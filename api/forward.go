package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/programmatic"
	"github.com/kilnsh/kiln/replica"
)

// Replicas: several kilns behind one load balancer, sharing a store, each answering any
// request (package replica). A request about what another replica holds is forwarded to
// it; here is the HTTP side of that: which requests are about what, the middleware that
// routes them, and what is logged and counted on the way.

// verifyPeer accepts a request forwarded by another replica, which is then served here
// whatever the directory says, and refuses one whose signature does not hold (it covers
// the body, which is read here for it) or that came before. Requests without the header
// pass as they are.
func (s *Server) verifyPeer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Header.Get(replica.PeerHeader) != "" {
			var err error
			if body, err = s.bufferBody(r); err != nil {
				writeError(w, r, err)
				return
			}
		}
		from, err := s.replicas.Verify(r, body)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if from != "" {
			info(r).forwardedFrom = from
		}
		next.ServeHTTP(w, r)
	})
}

// forwarded reports whether another replica sent r here to be served.
func forwarded(r *http.Request) bool { return info(r).forwardedFrom != "" }

// routeBy forwards a request to the replica that owns what it is about, as of(r) says;
// one about nothing owned elsewhere is served here. of may read the body: it gets a
// copy.
func (s *Server) routeBy(of func(r *http.Request, body []byte) replica.Owned) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !s.replicas.Enabled() || forwarded(r) {
				next.ServeHTTP(w, r)
				return
			}
			body, err := s.bufferBody(r)
			if err != nil {
				writeError(w, r, err)
				return
			}
			o := of(r, body)
			target, owner, err := s.replicas.Owner(r.Context(), o)
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

// own claims the thing of kind named id for this replica, when replicas share a
// directory. A claim that fails is logged: requests about it are then served where they
// land.
func (s *Server) own(ctx context.Context, kind replica.Kind, id string) {
	if elsewhere, err := s.replicas.Own(ctx, kind, id); err != nil {
		s.log.Warn("claiming in the replica directory failed", "key", kind.Key(id), "err", err)
	} else if elsewhere != "" {
		// Another replica took it between this replica's start of the call and now:
		// both served it, one at a time in the store's order; the next call goes there.
		s.log.Info("another replica owns this now", "key", kind.Key(id), "owner", elsewhere)
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
func (s *Server) forward(w http.ResponseWriter, r *http.Request, o replica.Owned, target, owner string, body []byte, local http.Handler) {
	u, err := url.Parse(target)
	if err != nil {
		writeError(w, r, kiln.Errorf(kiln.CodeInternal, "replica %s announced a malformed URL %q", owner, target))
		return
	}
	logger(r).Debug("forwarding to the owner", "owner", owner, "url", target)
	info(r).forwardedTo = owner
	err = s.replicas.Forward(w, r, owner, u, body)
	switch {
	case err == nil:
	case errors.Is(err, replica.ErrOwnerGone):
		logger(r).Warn("the owner cannot be reached: serving here", "owner", owner, "err", err)
		info(r).forwardedTo, info(r).passedOver = "", owner
		if err := s.replicas.TakeOver(r.Context(), o, owner); err != nil {
			logger(r).Warn("taking over from an unreachable owner failed", "key", o.Key(), "err", err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		local.ServeHTTP(w, r)
	case r.Context().Err() != nil:
		// the client went away
	default:
		logger(r).Warn("forwarding to the owner failed", "owner", owner, "err", err)
		writeError(w, r, &kiln.Error{Code: kiln.CodeUnavailable, RetryAfter: 1, Message: "the kiln replica that holds this " +
			"session or run (" + owner + ") failed while answering; retry: the session resumes from its stored state if that replica is gone"})
	}
}

// Routing rules, one per kind of request.

// bySession routes a call of a session (POST /exec, and a programmatic start) to the
// replica that owns the session, claiming it for this replica when nobody does; a
// continuation goes to the replica its token names.
func (s *Server) bySession(r *http.Request, body []byte) replica.Owned {
	var b struct {
		SessionID         string `json:"session_id"`
		ContinuationToken string `json:"continuation_token"`
	}
	_ = json.Unmarshal(body, &b) // a malformed body is for the handler to refuse
	if b.ContinuationToken != "" {
		if instance, _, _, ok := parseToken(b.ContinuationToken); ok {
			return replica.At(instance)
		}
		return replica.Owned{}
	}
	if !kiln.ValidID(b.SessionID) {
		return replica.Owned{}
	}
	return replica.Claimed(replica.Session, b.SessionID)
}

// bySessionPath routes a request about the session in the path (its state, a fork, its
// deletion) to its owner.
func (s *Server) bySessionPath(r *http.Request, _ []byte) replica.Owned {
	if id := chi.URLParam(r, "session_id"); kiln.ValidID(id) {
		return replica.Of(replica.Session, id)
	}
	return replica.Owned{}
}

// byExecution routes a cancel of an execution to the replica running it.
func (s *Server) byExecution(r *http.Request, _ []byte) replica.Owned {
	if id := chi.URLParam(r, "execution_id"); kiln.ValidID(id) {
		return replica.Of(replica.Run, id)
	}
	return replica.Owned{}
}

// byRequestID routes a programmatic cancel to the replica that has the request.
func (s *Server) byRequestID(r *http.Request, body []byte) replica.Owned {
	var b struct {
		RequestID string `json:"request_id"`
	}
	_ = json.Unmarshal(body, &b)
	if b.RequestID == "" {
		b.RequestID = r.Header.Get(requestIDHeader)
	}
	if !programmatic.ValidRequestID(b.RequestID) {
		return replica.Owned{}
	}
	return replica.Of(replica.Request, b.RequestID)
}

// byMCPSession routes an MCP message to the replica that holds its MCP session.
func (s *Server) byMCPSession(r *http.Request, _ []byte) replica.Owned {
	if id := r.Header.Get(mcpSessionHeader); id != "" && len(id) <= 256 {
		return replica.Of(replica.MCP, id)
	}
	return replica.Owned{}
}

// mcpSessionHeader names an MCP session in the Streamable HTTP transport.
const mcpSessionHeader = "Mcp-Session-Id"

// ownMCP claims the MCP session that a message served here opened or used.
func (s *Server) ownMCP(next http.Handler) http.Handler {
	if !s.replicas.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(mcpSessionHeader)
		cw := &claimWriter{ResponseWriter: w, claim: func(h http.Header) {
			if opened := h.Get(mcpSessionHeader); opened != "" {
				id = opened
			}
			if id != "" && r.Method != http.MethodDelete {
				s.own(r.Context(), replica.MCP, id)
			}
		}}
		next.ServeHTTP(cw, r)
		if r.Method == http.MethodDelete && id != "" {
			_ = s.replicas.Release(context.WithoutCancel(r.Context()), replica.MCP, id)
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
