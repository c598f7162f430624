package api

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/kilnsh/kiln/replica"
)

// getState handles GET /state/{session_id}: the raw blob, with its sha256 as ETag.
func (s *Server) getState(w http.ResponseWriter, r *http.Request) {
	sid, err := pathID(r, "session_id")
	if err != nil {
		writeError(w, r, err)
		return
	}
	blob, sess, err := s.sessions.State(r.Context(), caller(r, ""), sid)
	if err != nil {
		writeError(w, r, err)
		return
	}
	etag := `"` + sess.StateSHA256 + `"`
	w.Header().Set("ETag", etag)
	if match := r.Header.Get("If-None-Match"); match != "" && (strings.Contains(match, etag) || strings.TrimSpace(match) == "*") {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(blob)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(blob)
}

// putState handles POST /state/{session_id}: the body, raw, becomes the session's state.
func (s *Server) putState(w http.ResponseWriter, r *http.Request) {
	sid, err := pathID(r, "session_id")
	if err != nil {
		writeError(w, r, err)
		return
	}
	blob, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxState))
	if err != nil {
		writeError(w, r, bodyError(err, s.maxState))
		return
	}
	sess, err := s.sessions.PutState(r.Context(), caller(r, ""), sid, blob)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"size": sess.StateSize})
}

// stateInfo handles GET /state/{session_id}/info.
func (s *Server) stateInfo(w http.ResponseWriter, r *http.Request) {
	sid, err := pathID(r, "session_id")
	if err != nil {
		writeError(w, r, err)
		return
	}
	sess, err := s.sessions.Stored(r.Context(), caller(r, ""), sid)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := map[string]any{"exists": sess.HasState, "size": sess.StateSize, "sha256": nil, "created_at": nil, "expires_at": timestamp(sess.ExpiresAt)}
	if sess.HasState {
		out["sha256"], out["created_at"] = sess.StateSHA256, timestamp(sess.StateCreatedAt)
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteState handles DELETE /state/{session_id}.
func (s *Server) deleteState(w http.ResponseWriter, r *http.Request) {
	sid, err := pathID(r, "session_id")
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.sessions.DeleteState(r.Context(), caller(r, ""), sid); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// getSession handles GET /sessions/{id}.
func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	sid, err := pathID(r, "session_id")
	if err != nil {
		writeError(w, r, err)
		return
	}
	c := caller(r, "")
	sess, err := s.sessions.Session(r.Context(), c, sid)
	if err != nil {
		writeError(w, r, err)
		return
	}
	files, err := s.sessions.Files(r.Context(), c, sid)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"session_id": sess.ID, "created_at": timestamp(sess.CreatedAt), "last_used_at": timestamp(sess.LastUsedAt),
		"expires_at": timestamp(sess.ExpiresAt), "has_state": sess.HasState, "state_size": sess.StateSize,
		"files": fileOutFromStore(files).out(),
	})
}

// deleteSession handles DELETE /sessions/{id}.
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	sid, err := pathID(r, "session_id")
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.sessions.DeleteSession(r.Context(), caller(r, ""), sid); err != nil {
		writeError(w, r, err)
		return
	}
	_ = s.replicas.Release(context.WithoutCancel(r.Context()), replica.Session, sid)
	w.WriteHeader(http.StatusNoContent)
}
