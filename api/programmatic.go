package api

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/egress"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/programmatic"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/replica"
)

// The routes of programmatic tool calling, as LibreChat's agents package speaks it:
// code that calls the client's tools while it runs. A run starts with POST
// /exec/programmatic and answers tool_call_required each time the code waits on tool
// calls; the client runs them and continues with their results, until the run is
// completed or ends in an error. The run keeps its one sandbox throughout.

// requestIDHeader names a request, so that POST /exec/programmatic/cancel can end
// the run behind it.
const requestIDHeader = "X-LibreChat-Code-Request-ID"

// ptcRequest is the body of POST /exec/programmatic: a start, or, with a
// continuation_token, the results of the calls a run waits on.
type ptcRequest struct {
	Code      *string         `json:"code"`
	Lang      string          `json:"lang"`
	Tools     []ptcTool       `json:"tools"`
	Args      json.RawMessage `json:"args"`
	SessionID string          `json:"session_id"`
	EntityID  string          `json:"entity_id"`
	UserID    string          `json:"user_id"`
	Files     []fileRef       `json:"files"`
	Timeout   *int64          `json:"timeout"`
	OnError   string          `json:"on_error"`
	// RuntimeSessionHint and Network: see execRequest.
	RuntimeSessionHint string          `json:"runtime_session_hint"`
	Network            *egress.Network `json:"network"`

	ContinuationToken string                `json:"continuation_token"`
	ToolResults       []protocol.ToolResult `json:"tool_results"`
}

// ptcTool is a tool as the client describes it; kiln needs only its name.
type ptcTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// ptcPause is the answer while a run waits on tool calls.
type ptcPause struct {
	Status            string              `json:"status"` // tool_call_required
	ToolCalls         []protocol.ToolCall `json:"tool_calls"`
	ContinuationToken string              `json:"continuation_token"`
	ExecutionID       string              `json:"execution_id"`
}

// ptcEnd is the answer once a run is over: POST /exec's fields, with status
// "completed" for a run that ended ok and "error" otherwise; run_status is the
// run's own status.
type ptcEnd struct {
	*execResponse
	Status      string `json:"status"`
	RunStatus   string `json:"run_status"`
	ExecutionID string `json:"execution_id"`
}

// execProgrammatic handles POST /exec/programmatic.
func (s *Server) execProgrammatic(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req ptcRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if req.ContinuationToken != "" {
		s.continueProgrammatic(w, r, &req, start)
		return
	}
	if len(req.Tools) == 0 {
		writeError(w, r, kiln.Errorf(kiln.CodeInvalid, "tools is required: code that calls no tools runs with POST /exec"))
		return
	}
	ereq := execRequest{Code: req.Code, Lang: req.Lang, Args: req.Args, SessionID: req.SessionID,
		EntityID: req.EntityID, UserID: req.UserID, Files: req.Files, Timeout: req.Timeout, OnError: req.OnError, RuntimeSessionHint: req.RuntimeSessionHint,
		Network: req.Network}
	xreq, err := toExecRequest(&ereq)
	if err != nil {
		writeError(w, r, err)
		return
	}
	sreq, err := sessionRequest(&ereq, xreq, false)
	if err != nil {
		writeError(w, r, err)
		return
	}
	for _, t := range req.Tools {
		sreq.Tools = append(sreq.Tools, protocol.Tool{Name: t.Name, Function: functionName(t.Name, xreq.Lang)})
	}
	if reqID := r.Header.Get(requestIDHeader); reqID != "" {
		if !programmatic.ValidRequestID(reqID) {
			writeError(w, r, kiln.Errorf(kiln.CodeInvalid, "%s must be 1 to 128 characters of A-Z a-z 0-9 _ -", requestIDHeader))
			return
		}
		if other := s.ptc.ByRequest(reqID); other != nil {
			writeError(w, r, kiln.Errorf(kiln.CodeConflict, "a run under way already holds request id %s: send each request with an id of its own", reqID))
			return
		}
	}
	c := caller(r, req.UserID)
	// A waiting program holds its sandbox: it counts against the caller's concurrency
	// from its start to its end, across the requests that drive it.
	freeSlot, err := s.sessions.Admit(c)
	if err != nil {
		writeError(w, r, err)
		return
	}
	sreq.Admitted = true
	principal := caller(r, "").Principal()
	if reqID := r.Header.Get(requestIDHeader); reqID != "" && s.ptc.CancelledFirst(reqID, principal) {
		freeSlot()
		writeJSON(w, http.StatusOK, map[string]string{"status": "error", "error": "Programmatic execution request cancelled"})
		return
	}
	run := programmatic.NewRun(kiln.NewID(), principal)
	sreq.ExecutionID = run.ID()
	sreq.OnToolCalls = run.Pause
	s.ptc.Add(run)
	s.ptc.Name(run, r.Header.Get(requestIDHeader))
	// Its continuations name this replica in their tokens; its cancels find it here.
	s.own(r.Context(), replica.Run, run.ID())
	s.ownRequest(r)
	// The run outlives this request: a client that goes away cancels it (awaitStep).
	ctx := context.WithoutCancel(r.Context())
	// This request waits on the run from before it starts: a run that ends at once (a
	// refused tool) still has its answer taken, not dropped as nobody's.
	run.Attach()
	go func() {
		res, err := s.sessions.Exec(ctx, c, sreq)
		// The slot is free once the run is over, before its answer goes out, as for POST
		// /exec: a client that has its answer may start its next run at once.
		freeSlot()
		s.ptc.Remove(run)
		run.Finish(res, err)
	}()
	s.awaitStep(w, r, run, start)
}

// continueProgrammatic hands a run the results of the calls it waits on, then answers
// with its next step.
func (s *Server) continueProgrammatic(w http.ResponseWriter, r *http.Request, req *ptcRequest, start time.Time) {
	instance, id, secret, ok := parseToken(req.ContinuationToken)
	if !ok {
		writeError(w, r, kiln.Errorf(kiln.CodeInvalid, "continuation_token is malformed"))
		return
	}
	if instance != s.instance && s.replicas.Enabled() {
		// Not forwarded: the replica the token names is gone, and its run with it.
		writeError(w, r, kiln.Errorf(kiln.CodeNotFound,
			"this continuation belongs to a run on kiln replica %q, which is gone: the run ended with it; start the program again", instance))
		return
	}
	if instance != s.instance {
		writeError(w, r, kiln.Errorf(kiln.CodeConflict,
			"this continuation belongs to the run on kiln instance %q, and this is instance %q: send continuations to the instance that started the run (see docs/operations.md)", instance, s.instance))
		return
	}
	run := s.ptc.Get(id)
	if run != nil {
		// Waiting before the run has its results: it may end as soon as it has them.
		run.Attach()
	}
	if err := s.sessions.Continue(r.Context(), caller(r, ""), id, secret, req.ToolResults); err != nil {
		if run != nil {
			run.Detach()
		}
		writeError(w, r, err)
		return
	}
	if run == nil { // cannot happen: a run the executor holds is ours until it ends
		writeError(w, r, kiln.Errorf(kiln.CodeNotFound, "execution %s not found", id))
		return
	}
	s.ptc.Name(run, r.Header.Get(requestIDHeader))
	s.ownRequest(r)
	s.awaitStep(w, r, run, start)
}

// ownRequest claims the request id of a programmatic request served here, so that
// its cancel reaches this replica.
func (s *Server) ownRequest(r *http.Request) {
	if id := r.Header.Get(requestIDHeader); id != "" && programmatic.ValidRequestID(id) {
		s.own(r.Context(), replica.Request, id)
	}
}

// awaitStep answers with the run's next step: a pause, or its end. A client that goes
// away meanwhile cancels the run. The caller attached the request to the run before the
// run could take that step (Run.Attach); awaitStep detaches it.
func (s *Server) awaitStep(w http.ResponseWriter, r *http.Request, run *programmatic.Run, start time.Time) {
	select {
	case tc := <-run.Pauses():
		run.Detach()
		writeJSON(w, http.StatusOK, ptcPause{Status: "tool_call_required", ToolCalls: tc.Calls,
			ContinuationToken: s.instance + "." + run.ID() + "." + tc.Token, ExecutionID: run.ID()})
	case <-run.Done():
		res, ok, err := run.Take()
		run.Detach()
		if !ok {
			writeError(w, r, kiln.Errorf(kiln.CodeConflict, "execution %s has already finished", run.ID()))
			return
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		defer res.Release()
		s.ownSession(r, res)
		out := &ptcEnd{execResponse: newExecResponse(r, res, false), Status: "completed", RunStatus: res.Status, ExecutionID: run.ID()}
		if res.Status != execution.StatusOK {
			out.Status = "error"
		}
		out.Timing.TotalMS = ms(time.Since(start))
		w.Header().Set("X-Execution-Id", run.ID())
		writeJSON(w, http.StatusOK, out)
		_ = http.NewResponseController(w).Flush()
	case <-r.Context().Done():
		logger(r).Info("client went away during a programmatic run: cancelling it", "execution_id", run.ID())
		_ = s.sessions.Cancel(r.Context(), caller(r, ""), run.ID())
		run.Detach()
	}
}

// parseToken splits a continuation token, "<instance>.<execution id>.<secret>"; the
// instance's id may hold dots, the other two never do.
func parseToken(token string) (instance, id, secret string, ok bool) {
	rest, secret, ok1 := cutLast(token, ".")
	instance, id, ok2 := cutLast(rest, ".")
	if !ok1 || !ok2 || !kiln.ValidID(id) || secret == "" {
		return "", "", "", false
	}
	return instance, id, secret, true
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

var (
	toUnderscore   = regexp.MustCompile(`[-\s]`)
	toUnderscoreSh = regexp.MustCompile(`[-\s.]`)
	notIdentifier  = regexp.MustCompile(`[^a-zA-Z0-9_]`)
)

// Names a tool cannot take as is: Python's keywords, and bash's reserved words and the
// builtins that declare.
var (
	pythonKeywords = words("False None True and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield")
	bashReserved   = words("if then else elif fi case esac for while until do done in function select time coproc declare typeset local readonly export unset")
)

func words(list string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(list) {
		m[w] = true
	}
	return m
}

// functionName is the name code calls a tool by, as LibreChat's client derives it:
// hyphens and spaces (and in bash dots) become underscores, other characters that
// cannot be in an identifier go, a leading digit gets an underscore in front, and a
// reserved word gets "_tool" behind.
func functionName(tool, lang string) string {
	sep, reserved := toUnderscore, pythonKeywords
	if lang == execution.LangBash {
		sep, reserved = toUnderscoreSh, bashReserved
	}
	name := notIdentifier.ReplaceAllString(sep.ReplaceAllString(tool, "_"), "")
	if name != "" && name[0] >= '0' && name[0] <= '9' {
		name = "_" + name
	}
	if reserved[name] {
		name += "_tool"
	}
	return name
}
