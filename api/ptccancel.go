package api

import (
	"net/http"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/programmatic"
)

// cancelProgrammatic handles POST /exec/programmatic/cancel, as LibreChat's client sends
// it: {"request_id"} (or the X-LibreChat-Code-Request-ID header) naming a programmatic
// run. 202 cancellation_requested: the run ends as cancelled, its sandbox removed; or,
// for an id no run has yet, the run that comes with it will not start. 200
// already_completed: it ended before. 403: another principal's request.
func (s *Server) cancelProgrammatic(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RequestID string `json:"request_id"`
	}
	if err := s.decodeJSON(w, r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if req.RequestID == "" {
		req.RequestID = r.Header.Get(requestIDHeader)
	}
	if !programmatic.ValidRequestID(req.RequestID) {
		writeError(w, r, kiln.Errorf(kiln.CodeInvalid, "request_id is required: 1 to 128 characters of A-Z a-z 0-9 _ -"))
		return
	}
	c := caller(r, "")
	principal := c.Principal()
	foreign := &kiln.Error{Code: kiln.CodeForbidden, Message: "that request belongs to another caller"}
	if run := s.ptc.ByRequest(req.RequestID); run != nil {
		if run.Principal() != principal {
			writeError(w, r, foreign)
			return
		}
		if err := s.sessions.Cancel(r.Context(), c, run.ID()); err != nil && kiln.ErrorCode(err) != kiln.CodeConflict {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "cancellation_requested", "request_id": req.RequestID,
			"execution_id": run.ID()})
		return
	}
	switch s.ptc.RecordCancel(req.RequestID, principal) {
	case programmatic.CancelForeign:
		writeError(w, r, foreign)
	case programmatic.CancelEnded:
		writeJSON(w, http.StatusOK, map[string]string{"status": "already_completed", "request_id": req.RequestID})
	default:
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "cancellation_requested", "request_id": req.RequestID})
	}
}
