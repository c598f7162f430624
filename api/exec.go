package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/egress"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/replica"
	"github.com/kilnsh/kiln/session"
)

// execRequest is the body of POST /exec. Unknown fields are ignored.
type execRequest struct {
	Code         *string         `json:"code"`
	Lang         string          `json:"lang"`
	Args         json.RawMessage `json:"args"`
	SessionID    string          `json:"session_id"`
	EntityID     string          `json:"entity_id"`
	UserID       string          `json:"user_id"`
	Files        []fileRef       `json:"files"`
	State        json.RawMessage `json:"state"`
	CaptureState *bool           `json:"capture_state"`
	OnError      string          `json:"on_error"`
	Timeout      *int64          `json:"timeout"`
	// RuntimeSessionHint is LibreChat's name for a conversation's runtime: the same hint
	// from the same caller continues the same session.
	RuntimeSessionHint string `json:"runtime_session_hint"`
	// Network narrows the operator's egress policy for this call (false shuts it).
	Network *egress.Network `json:"network"`
	// CPUs and MemoryMB are the sandbox's limits for this call, within the operator's
	// MAX_SANDBOX_CPUS and MAX_SANDBOX_MEMORY_MB.
	CPUs     *float64 `json:"cpus"`
	MemoryMB *int64   `json:"memory_mb"`
	// IPython false runs a Python cell as plain Python: IPython's syntax (magics, !cmd,
	// obj?) is then Python's SyntaxError.
	IPython *bool `json:"ipython"`
}

type fileRef struct {
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	Name      string `json:"name"`
	// StorageSessionID is what newer LibreChat clients send for session_id, and Kind,
	// ResourceID and Version whose session it is (see session.Scope).
	StorageSessionID string          `json:"storage_session_id"`
	Kind             string          `json:"kind"`
	ResourceID       string          `json:"resource_id"`
	Version          json.RawMessage `json:"version"`
}

type timing struct {
	QueueMS float64 `json:"queue_ms"`
	ExecMS  float64 `json:"exec_ms"`
	TotalMS float64 `json:"total_ms"`
}

type fileOut struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	SessionID   string `json:"session_id"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
	// StorageSessionID is SessionID under the name newer LibreChat clients read.
	StorageSessionID string `json:"storage_session_id"`
	// Inherited marks a read-only input the run changed, handed back as it was;
	// ModifiedFrom names the input a new file is a changed copy of.
	Inherited    bool        `json:"inherited,omitempty"`
	ModifiedFrom *fileOrigin `json:"modified_from,omitempty"`
}

// fileOrigin names a stored file.
type fileOrigin struct {
	ID               string `json:"id"`
	StorageSessionID string `json:"storage_session_id"`
}

// execResponse is the body of a 200 from POST /exec.
type execResponse struct {
	SessionID string    `json:"session_id"`
	Status    string    `json:"status"`
	ExitCode  int       `json:"exit_code"`
	Stdout    string    `json:"stdout"`
	Stderr    string    `json:"stderr"`
	Error     *string   `json:"error"`
	Result    *string   `json:"result"`
	Files     []fileOut `json:"files"`
	// Outputs are the rich outputs, in order: what the code displayed and its last value,
	// as Jupyter's display_data and execute_result (docs/api.md, Outputs).
	Outputs    []session.Output `json:"outputs"`
	Truncated  bool             `json:"truncated"`
	State      json.RawMessage  `json:"state,omitempty"`
	HasState   bool             `json:"has_state"`
	StateSize  int              `json:"state_size"`
	StateError *string          `json:"state_error"`
	// StatePending says the state was not stored yet when the call answered (docs/api.md,
	// Live sessions).
	StatePending bool `json:"state_pending"`
	// DeletedFiles are the session's files the run deleted (they left the session too).
	DeletedFiles []string `json:"deleted_files"`
	// RuntimeStatus says where the run went: new, reused (the session's live sandbox)
	// or resumed (a fresh one, from the stored state).
	RuntimeStatus string `json:"runtime_status"`
	// RuntimeSessionID names the runtime that ran the call, for LibreChat: the session,
	// which is the runtime (null in stateless mode, which has none).
	RuntimeSessionID *string `json:"runtime_session_id"`
	Timing           timing  `json:"timing"`
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req execRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	xreq, err := toExecRequest(&req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	stateless := len(req.State) > 0 // present, even as null
	if stateless && req.SessionID != "" {
		writeError(w, r, kiln.Errorf(kiln.CodeInvalid, "state and session_id are mutually exclusive: send one"))
		return
	}
	sreq, err := sessionRequest(&req, xreq, stateless)
	if err != nil {
		writeError(w, r, err)
		return
	}
	sreq.ExecutionID = kiln.NewID()
	answer := func(res *session.ExecResult) *execResponse {
		if !stateless {
			s.ownSession(r, res)
		}
		out := newExecResponse(r, res, stateless)
		out.Timing.TotalMS = ms(time.Since(start))
		return out
	}
	if wantsStream(r) {
		// A streamed run can be cancelled by its id while it runs, through any replica.
		s.own(r.Context(), replica.Run, sreq.ExecutionID)
		s.execStream(w, r, sreq, caller(r, req.UserID), answer)
		return
	}
	res, err := s.sessions.Exec(r.Context(), caller(r, req.UserID), sreq)
	if err != nil {
		if r.Context().Err() != nil {
			logger(r).Info("client went away during the run")
			return
		}
		writeError(w, r, err)
		return
	}
	// The sandbox is removed, and its replacement warmed, once the answer is out: on
	// a small host that work would otherwise compete with writing it.
	defer res.Release()
	w.Header().Set("X-Execution-Id", res.ExecutionID)
	writeJSON(w, http.StatusOK, answer(res))
	_ = http.NewResponseController(w).Flush()
}

// ownSession claims the session a call ran in for this replica, whose live sandbox
// now holds it, so that its next calls come here through any replica.
func (s *Server) ownSession(r *http.Request, res *session.ExecResult) {
	if res != nil && res.Session != nil && res.Session.ID != "" {
		s.own(r.Context(), replica.Session, res.Session.ID)
	}
}

// cancelExecution handles POST /executions/{execution_id}/cancel: 202 when the run
// was going (it ends as cancelled), 409 when it had finished, 404 when the caller
// started no such run.
func (s *Server) cancelExecution(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "execution_id")
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.sessions.Cancel(r.Context(), caller(r, ""), id); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"execution_id": id, "status": "cancelling"})
}

// setState puts the state blob in the body: stateless mode, where the caller keeps it.
func setState(out *execResponse, state []byte) {
	out.State = json.RawMessage("null")
	out.HasState, out.StateSize = false, 0
	if state != nil {
		out.State, _ = json.Marshal(base64.StdEncoding.EncodeToString(state))
		out.HasState, out.StateSize = true, len(state)
	}
}

// sessionRequest builds the session layer's request. In stateless mode the session is a
// new one that only keeps the run's files; the state travels in the request and
// response bodies.
func sessionRequest(req *execRequest, xreq execution.Request, stateless bool) (session.ExecRequest, error) {
	sreq := session.ExecRequest{Request: xreq, EntityID: req.EntityID, RuntimeHint: req.RuntimeSessionHint, Stateless: stateless,
		Network: req.Network}
	if req.SessionID != "" && kiln.ValidID(req.SessionID) {
		sreq.SessionID = req.SessionID // a malformed id is as unknown as a missing one
	}
	for _, f := range req.Files {
		if f.SessionID == "" {
			f.SessionID = f.StorageSessionID
		}
		if !kiln.ValidID(f.ID) || (f.SessionID != "" && !kiln.ValidID(f.SessionID)) {
			return sreq, kiln.Errorf(kiln.CodeInvalid, "files[]: id and session_id must be kiln ids (21 characters of A-Z a-z 0-9 _ -)")
		}
		version := strings.Trim(string(f.Version), `"`)
		if version == "null" {
			version = ""
		}
		scope, err := session.ParseScope(f.Kind, f.ResourceID, version)
		if err != nil {
			return sreq, kiln.Errorf(kiln.CodeInvalid, "files[]: %s", err.(*kiln.Error).Message)
		}
		sreq.Files = append(sreq.Files, session.FileRef{ID: f.ID, SessionID: f.SessionID, Name: f.Name, Scope: scope})
	}
	return sreq, nil
}

// newExecResponse is the body of the answer.
func newExecResponse(r *http.Request, res *session.ExecResult, stateless bool) *execResponse {
	ri := info(r)
	ri.poolWait, ri.runStatus = res.QueueWait, res.Status
	out := &execResponse{
		SessionID: res.Session.ID,
		Status:    res.Status, ExitCode: res.ExitCode,
		Stdout: res.Stdout, Stderr: res.Stderr,
		Error: res.Error, Result: res.Result.Result,
		Files:         runFiles(res),
		Outputs:       res.Outputs,
		Truncated:     res.Truncated,
		StateError:    res.StateError,
		StatePending:  res.StatePending,
		DeletedFiles:  append([]string{}, res.Deleted...),
		RuntimeStatus: res.RuntimeStatus,
		Timing:        timing{QueueMS: ms(res.QueueWait), ExecMS: ms(res.ExecTime)},
	}
	if stateless {
		setState(out, res.State)
	} else {
		out.HasState, out.StateSize = res.Session.HasState, int(res.Session.StateSize)
		out.RuntimeSessionID = &res.Session.ID
	}
	return out
}

// runFiles is what a run's answer lists of its files: those it stored (each with the
// input it changed, if any), then the read-only inputs it changed, as they were.
func runFiles(res *session.ExecResult) []fileOut {
	out := fileOutFromStore(res.Files).out()
	for i := range out {
		if from := res.ModifiedFrom[out[i].ID]; from != nil {
			out[i].ModifiedFrom = &fileOrigin{ID: from.ID, StorageSessionID: from.SessionID}
		}
	}
	for _, in := range res.Inherited {
		f := fileOutFromStore{in.File}.out()[0]
		f.Name, f.Inherited = in.Path, true
		out = append(out, f)
	}
	return out
}

// toExecRequest validates the fields the API owns and builds what the client asks of the run.
func toExecRequest(req *execRequest) (execution.Request, error) {
	var x execution.Request
	if req.Code == nil {
		return x, kiln.Errorf(kiln.CodeInvalid, "code is required")
	}
	x.Code = *req.Code
	lang, ok := execution.LangName(req.Lang)
	if !ok {
		return x, kiln.Errorf(kiln.CodeLanguage, "unsupported language %q", req.Lang)
	}
	x.Lang = lang
	args, err := parseArgs(req.Args)
	if err != nil {
		return x, err
	}
	x.Args = args
	if req.EntityID != "" && !kiln.ValidToken(req.EntityID, 40) {
		return x, kiln.Errorf(kiln.CodeInvalid, "entity_id must be 1 to 40 characters of A-Z a-z 0-9 _ -")
	}
	if req.RuntimeSessionHint != "" && !session.ValidRuntimeHint(req.RuntimeSessionHint) {
		return x, kiln.Errorf(kiln.CodeInvalid, "runtime_session_hint must be 1 to 128 characters of A-Z a-z 0-9 . _ : -")
	}
	if len(req.State) > 0 && string(req.State) != "null" {
		var b64 string
		if err := json.Unmarshal(req.State, &b64); err != nil {
			return x, kiln.Errorf(kiln.CodeInvalid, "state must be a string")
		}
		blob, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return x, kiln.Errorf(kiln.CodeInvalid, "state is not valid base64")
		}
		x.State = blob
	}
	x.CaptureState = req.CaptureState == nil || *req.CaptureState
	x.PlainPython = req.IPython != nil && !*req.IPython
	switch req.OnError {
	case "", execution.OnErrorKeep, execution.OnErrorRollback:
		x.OnError = req.OnError
	default:
		return x, kiln.Errorf(kiln.CodeInvalid, "on_error must be %q or %q, got %q", execution.OnErrorKeep, execution.OnErrorRollback, req.OnError)
	}
	if req.Timeout != nil {
		// Clamped into the configured range by the executor; zero or less is the minimum.
		x.Timeout = max(time.Duration(*req.Timeout)*time.Millisecond, time.Millisecond)
	}
	if req.CPUs != nil {
		if *req.CPUs <= 0 || math.IsNaN(*req.CPUs) || *req.CPUs > 1024 {
			return x, kiln.Errorf(kiln.CodeInvalid, "cpus must be a number of cores above 0")
		}
		x.MilliCPU = int64(math.Round(*req.CPUs * 1000))
	}
	if req.MemoryMB != nil {
		if *req.MemoryMB <= 0 {
			return x, kiln.Errorf(kiln.CodeInvalid, "memory_mb must be a number of MB above 0")
		}
		x.MemoryMB = *req.MemoryMB
	}
	return x, nil
}

// parseArgs accepts a list of strings, or one string split on white space.
func parseArgs(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return strings.Fields(one), nil
	}
	return nil, kiln.Errorf(kiln.CodeInvalid, "args must be a string or an array of strings")
}

// decodeJSON reads a bounded JSON body into v, with errors a client can act on.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return kiln.Errorf(kiln.CodeMediaType, "send a JSON body with Content-Type: application/json (got %q)", ct)
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return kiln.Errorf(kiln.CodeTooLarge, "request body is over the limit of %d bytes", s.maxBody)
		}
		return kiln.Errorf(kiln.CodeInvalid, "reading the body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return kiln.Errorf(kiln.CodeInvalid, "malformed JSON: %s", jsonProblem(err))
	}
	if dec.More() {
		return kiln.Errorf(kiln.CodeInvalid, "malformed JSON: more than one value in the body")
	}
	return nil
}

func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type, te.Value)
	}
	return err.Error()
}
