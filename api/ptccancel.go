package api

import (
	"net/http"
	"regexp"
	"time"

	"github.com/kilnsh/kiln"
)

// requestIDPattern is what a programmatic request's id may look like (a UUID is one).
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// How long, and how many, request ids of ended runs and of early cancels are kept: a
// cancel that comes after the run ended, or before it started, still gets its answer.
const (
	recentFor = 10 * time.Minute
	recentMax = 10000
)

// requestLedger remembers, for a while, the request ids of runs that ended and of cancels
// that came before their run, each with its principal. The caller holds ptcRuns.mu.
type requestLedger struct {
	done      map[string]ledgerEntry
	cancelled map[string]ledgerEntry
}

type ledgerEntry struct {
	principal string
	at        time.Time
}

func (l *requestLedger) ended(requestID, principal string) {
	l.done = remember(l.done, requestID, principal)
}

// remember adds an entry, first dropping those too old and, when recentMax are kept,
// as many others as it takes to make room (which ones, Go's map order decides).
func remember(m map[string]ledgerEntry, requestID, principal string) map[string]ledgerEntry {
	now := time.Now()
	if m == nil {
		m = map[string]ledgerEntry{}
	}
	for id, e := range m {
		if now.Sub(e.at) > recentFor || len(m) >= recentMax {
			delete(m, id)
		}
	}
	m[requestID] = ledgerEntry{principal: principal, at: now}
	return m
}

// cancelledFirst reports, and forgets, a cancel of principal's that came before the run
// its request id names: that run must not start.
func (p *ptcRuns) cancelledFirst(requestID, principal string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.recent.cancelled[requestID]
	if !ok || e.principal != principal || time.Since(e.at) > recentFor {
		return false
	}
	delete(p.recent.cancelled, requestID)
	return true
}

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
	if !requestIDPattern.MatchString(req.RequestID) {
		writeError(w, r, kiln.Errorf(kiln.CodeInvalid, "request_id is required: 1 to 128 characters of A-Z a-z 0-9 _ -"))
		return
	}
	c := caller(r, "")
	principal := c.Principal()
	foreign := &kiln.Error{Code: kiln.CodeForbidden, Message: "that request belongs to another caller"}
	if run := s.ptc.byRequest(req.RequestID); run != nil {
		if run.key != principal {
			writeError(w, r, foreign)
			return
		}
		if err := s.sessions.Cancel(r.Context(), c, run.id); err != nil && kiln.ErrorCode(err) != kiln.CodeConflict {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "cancellation_requested", "request_id": req.RequestID,
			"execution_id": run.id})
		return
	}
	s.ptc.mu.Lock()
	done, ended := s.ptc.recent.done[req.RequestID]
	early, queued := s.ptc.recent.cancelled[req.RequestID]
	switch {
	case ended && done.principal != principal, queued && early.principal != principal:
		s.ptc.mu.Unlock()
		writeError(w, r, foreign)
		return
	case ended:
		s.ptc.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]string{"status": "already_completed", "request_id": req.RequestID})
		return
	}
	s.ptc.recent.cancelled = remember(s.ptc.recent.cancelled, req.RequestID, principal)
	s.ptc.mu.Unlock()
	writeJSON(w, http.StatusAccepted, map[string]string{"status": "cancellation_requested", "request_id": req.RequestID})
}
