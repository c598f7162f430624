package api

import (
	"net/http"
	"strconv"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/store"
)

// Paging of GET /sessions.
const (
	defaultSessionsLimit = 50
	maxSessionsLimit     = 200
)

type sessionOut struct {
	SessionID  string `json:"session_id"`
	EntityID   string `json:"entity_id,omitempty"`
	CreatedAt  string `json:"created_at"`
	LastUsedAt string `json:"last_used_at"`
	ExpiresAt  string `json:"expires_at"`
	HasState   bool   `json:"has_state"`
	StateSize  int64  `json:"state_size"`
}

func newSessionOut(s *store.Session) sessionOut {
	return sessionOut{
		SessionID: s.ID, EntityID: s.EntityID, CreatedAt: timestamp(s.CreatedAt), LastUsedAt: timestamp(s.LastUsedAt),
		ExpiresAt: timestamp(s.ExpiresAt), HasState: s.HasState, StateSize: s.StateSize,
	}
}

// listSessions handles GET /sessions?limit=&offset=: the caller's sessions, newest
// first, with the offset of the next page when there is one.
func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	limit, err := queryInt(r, "limit", defaultSessionsLimit, 1, maxSessionsLimit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	offset, err := queryInt(r, "offset", 0, 0, 1<<30)
	if err != nil {
		writeError(w, r, err)
		return
	}
	list, more, err := s.sessions.Sessions(r.Context(), caller(r, ""), offset, limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]sessionOut, 0, len(list))
	for _, sess := range list {
		out = append(out, newSessionOut(sess))
	}
	var next *int
	if more {
		n := offset + limit
		next = &n
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out, "next_offset": next})
}

// forkSession handles POST /sessions/{session_id}/fork: a new session of the caller's
// with a copy of the session's state and files.
func (s *Server) forkSession(w http.ResponseWriter, r *http.Request) {
	sid, err := pathID(r, "session_id")
	if err != nil {
		writeError(w, r, err)
		return
	}
	sess, files, err := s.sessions.Fork(r.Context(), caller(r, ""), sid)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{
		"session_id": sess.ID, "forked_from": sid, "created_at": timestamp(sess.CreatedAt),
		"expires_at": timestamp(sess.ExpiresAt), "has_state": sess.HasState, "state_size": sess.StateSize,
		"files": fileOutFromStore(files).out(),
	})
}

// queryInt reads an integer query parameter within [lo, hi], def when absent.
func queryInt(r *http.Request, name string, def, lo, hi int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, kiln.Errorf(kiln.CodeInvalid, "%s must be an integer from %d to %d", name, lo, hi)
	}
	return n, nil
}
