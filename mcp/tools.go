package mcp

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

// Tool names, as a model sees them.
const (
	toolExecute      = "execute"
	toolNewSession   = "new_session"
	toolListSessions = "list_sessions"
	toolCloseSession = "close_session"
	toolForkSession  = "fork_session"
	toolUploadFile   = "upload_file"
	toolListFiles    = "list_files"
	toolInterrupt    = "interrupt"
)

type executeIn struct {
	Code      string    `json:"code" jsonschema:"The code to run. Python by default: top-level expressions, imports and variables persist across calls in the same session, like a notebook. Files in /mnt/data persist too; save outputs there."`
	Lang      string    `json:"lang,omitempty" jsonschema:"python (default), bash, or another language the deployment runs: js ts c cpp java php rs go d f90 r with its polyglot pool. State is Python's alone."`
	SessionID string    `json:"session_id,omitempty" jsonschema:"The session to run in. Omit it to use this connection's default session, which keeps its variables between calls."`
	TimeoutMS int64     `json:"timeout_ms,omitempty" jsonschema:"How long the code may run, in milliseconds; kiln's default and maximum apply."`
	OnError   string    `json:"on_error,omitempty" jsonschema:"keep (default): a run that fails keeps the variables it bound before the error, as a notebook does. rollback: a failed run leaves the session exactly as before the call."`
	Network   *[]string `json:"network,omitempty" jsonschema:"Hosts this call's code may reach over HTTP(S), as host patterns (pypi.internal, *.github.com, api.example.com:8443): it narrows what the deployment allows and never widens it; an empty list shuts the network for the call. Omit it to get what the deployment allows (often nothing)."`
	IPython   *bool     `json:"ipython,omitempty" jsonschema:"true (default): Python cells are read as IPython reads them, as in a Jupyter notebook: %magics (%time, %timeit, %pip install, %%writefile), !shell commands, x = !cmd, obj? for help. false: plain Python, where those are a SyntaxError."`
}

type sessionIn struct {
	SessionID string `json:"session_id" jsonschema:"The session's id, as execute, new_session or list_sessions gave it."`
}

type listSessionsIn struct {
	Limit  int `json:"limit,omitempty" jsonschema:"How many sessions to list, newest first; default 20, at most 200."`
	Offset int `json:"offset,omitempty" jsonschema:"How many of the newest to skip, for the next page."`
}

type uploadIn struct {
	Name      string `json:"name" jsonschema:"The file's name; it appears as /mnt/data/NAME in the session."`
	Text      string `json:"text,omitempty" jsonschema:"The file's content as text (UTF-8). Send text or base64, not both."`
	Base64    string `json:"base64,omitempty" jsonschema:"The file's content, base64-encoded, for binary files."`
	SessionID string `json:"session_id,omitempty" jsonschema:"The session to put it in; omitted, the connection's default session."`
}

type listFilesIn struct {
	SessionID string `json:"session_id,omitempty" jsonschema:"The session whose files to list; omitted, the connection's default session."`
}

// fileOut is a file as the tools describe it.
type fileOut struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	SessionID   string `json:"session_id"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
	URI         string `json:"uri"`
}

// sessionOut is a session as the tools describe it.
type sessionOut struct {
	SessionID  string    `json:"session_id"`
	CreatedAt  string    `json:"created_at"`
	LastUsedAt string    `json:"last_used_at"`
	ExpiresAt  string    `json:"expires_at"`
	HasState   bool      `json:"has_state"`
	StateSize  int64     `json:"state_size"`
	Default    bool      `json:"default,omitempty"`
	Files      []fileOut `json:"files,omitempty"`
}

type sessionListOut struct {
	Sessions   []sessionOut `json:"sessions"`
	NextOffset int          `json:"next_offset,omitempty"`
}

type filesOut struct {
	SessionID string    `json:"session_id"`
	Files     []fileOut `json:"files"`
}

type interruptOut struct {
	SessionID   string `json:"session_id"`
	ExecutionID string `json:"execution_id"`
	Status      string `json:"status"`
}

type closedOut struct {
	SessionID string `json:"session_id"`
	Closed    bool   `json:"closed"`
}

// addTools registers kiln's tools and its file resources on s.
func (h *Handler) addTools(s *sdk.Server) {
	sdk.AddTool(s, &sdk.Tool{Name: toolExecute, Title: "Run code", Description: "Run Python (or bash) code in a sandbox and get what it printed, " +
		"its last expression's value, any error, and the files it wrote: PNG figures (plt.plot/plt.show) come back as images, other files as resource links. " +
		"State persists between calls in the same session: define a variable in one call and use it in the next. " +
		"Omit session_id to use this connection's default session. No network access. A long run reports its output as progress and can be cancelled or interrupted."},
		h.execute)
	sdk.AddTool(s, &sdk.Tool{Name: toolNewSession, Title: "New session", Description: "Create a new, empty session (no variables, no files) and return its session_id, to run code apart from the default session."},
		h.newSession)
	sdk.AddTool(s, &sdk.Tool{Name: toolListSessions, Title: "List sessions", Description: "List your sessions, newest first, with whether each holds state. The connection's default session is marked default.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		h.listSessions)
	sdk.AddTool(s, &sdk.Tool{Name: toolCloseSession, Title: "Close session", Description: "Delete a session with its variables and files. It cannot be undone.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)}},
		h.closeSession)
	sdk.AddTool(s, &sdk.Tool{Name: toolForkSession, Title: "Fork session", Description: "Create a new session holding a copy of another session's variables and files, " +
		"so you can try two different ideas from the same starting point. Returns the new session_id; the original is unchanged."},
		h.forkSession)
	sdk.AddTool(s, &sdk.Tool{Name: toolUploadFile, Title: "Upload file", Description: "Put a file into a session's /mnt/data, from text or base64. A file of the same name is replaced."},
		h.uploadFile)
	sdk.AddTool(s, &sdk.Tool{Name: toolListFiles, Title: "List files", Description: "List the files of a session (what /mnt/data holds between runs), each with a kiln:// URI readable as a resource.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		h.listFiles)
	sdk.AddTool(s, &sdk.Tool{Name: toolInterrupt, Title: "Interrupt", Description: "Stop the code running in a session, as Ctrl-C would: the running execute call ends with status cancelled."},
		h.interrupt)
	s.AddResourceTemplate(&sdk.ResourceTemplate{
		Name: "session-file", Title: "A file of a kiln session", URITemplate: fileURITemplate,
		Description: "A file a run produced or you uploaded, by session and file id.",
	}, h.readFile)
}

func ptr[T any](v T) *T { return &v }

// stateOf returns the MCP session a tool call came in on.
func (h *Handler) stateOf(req *sdk.CallToolRequest) (*mcpSession, error) {
	if req.Session != nil {
		if st := h.state(req.Session.ID()); st != nil {
			return st, nil
		}
	}
	return nil, errors.New("this MCP session is unknown to kiln; reconnect")
}

// toolError is a failure a model can act on: an isError result, not a protocol error.
func toolError(format string, args ...any) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// failure turns a session layer error into a tool's answer: a kiln error is the
// model's to read; anything else is logged and reported as internal.
func (h *Handler) failure(err error) (*sdk.CallToolResult, error) {
	var e *kiln.Error
	if errors.As(err, &e) {
		return toolError("%s", e.Message), nil
	}
	h.log.Error("mcp tool failed", "err", err)
	return nil, errors.New("internal error; see kiln's log")
}

// target resolves the session a tool names, or else the default one (created when
// create is set and there is none yet); "" when there is none.
func (h *Handler) target(ctx context.Context, st *mcpSession, named string, create bool) (string, error) {
	if named != "" {
		if _, err := h.sessions.Session(ctx, st.caller, named); err != nil {
			return "", kiln.Errorf(kiln.CodeNotFound, "session %s not found; call list_sessions, or omit session_id for the default session", named)
		}
		return named, nil
	}
	if sid := st.defaultSession(); sid != "" {
		if _, err := h.sessions.Session(ctx, st.caller, sid); err == nil {
			return sid, nil
		}
	}
	if !create {
		return "", nil
	}
	sess, err := h.sessions.NewSession(ctx, st.caller, "")
	if err != nil {
		return "", err
	}
	st.setDefault(sess.ID)
	return sess.ID, nil
}

func (h *Handler) newSession(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, sessionOut, error) {
	st, err := h.stateOf(req)
	if err != nil {
		return nil, sessionOut{}, err
	}
	sess, err := h.sessions.NewSession(ctx, st.caller, "")
	if err != nil {
		res, err := h.failure(err)
		return res, sessionOut{}, err
	}
	out := newSessionOut(sess, nil)
	return textResult("New session %s (empty). Pass session_id %q to execute to use it.", sess.ID, sess.ID), out, nil
}

func (h *Handler) listSessions(ctx context.Context, req *sdk.CallToolRequest, in listSessionsIn) (*sdk.CallToolResult, sessionListOut, error) {
	st, err := h.stateOf(req)
	if err != nil {
		return nil, sessionListOut{}, err
	}
	limit := in.Limit
	if limit <= 0 {
		limit = 20
	}
	limit = min(limit, 200)
	list, more, err := h.sessions.Sessions(ctx, st.caller, max(in.Offset, 0), limit)
	if err != nil {
		res, err := h.failure(err)
		return res, sessionListOut{}, err
	}
	out := sessionListOut{Sessions: []sessionOut{}}
	var b strings.Builder
	dflt := st.defaultSession()
	for _, sess := range list {
		so := newSessionOut(sess, nil)
		so.Default = sess.ID == dflt
		out.Sessions = append(out.Sessions, so)
		fmt.Fprintf(&b, "%s  created %s  state: %v", sess.ID, so.CreatedAt, sess.HasState)
		if so.Default {
			b.WriteString("  (default)")
		}
		b.WriteByte('\n')
	}
	if more {
		out.NextOffset = max(in.Offset, 0) + limit
		fmt.Fprintf(&b, "More: call again with offset %d.\n", out.NextOffset)
	}
	if len(list) == 0 {
		b.WriteString("No sessions yet. execute creates one.\n")
	}
	return textResult("%s", b.String()), out, nil
}

func (h *Handler) closeSession(ctx context.Context, req *sdk.CallToolRequest, in sessionIn) (*sdk.CallToolResult, closedOut, error) {
	st, err := h.stateOf(req)
	if err != nil {
		return nil, closedOut{}, err
	}
	if err := h.sessions.DeleteSession(ctx, st.caller, in.SessionID); err != nil {
		res, err := h.failure(err)
		return res, closedOut{}, err
	}
	if st.defaultSession() == in.SessionID {
		st.setDefault("")
	}
	return textResult("Session %s closed: its variables and files are gone.", in.SessionID), closedOut{SessionID: in.SessionID, Closed: true}, nil
}

func (h *Handler) forkSession(ctx context.Context, req *sdk.CallToolRequest, in sessionIn) (*sdk.CallToolResult, sessionOut, error) {
	st, err := h.stateOf(req)
	if err != nil {
		return nil, sessionOut{}, err
	}
	sess, files, err := h.sessions.Fork(ctx, st.caller, in.SessionID)
	if err != nil {
		res, err := h.failure(err)
		return res, sessionOut{}, err
	}
	return textResult("Session %s is a copy of %s (its variables and %d files). Pass session_id %q to execute to use the copy; %s is unchanged.",
		sess.ID, in.SessionID, len(files), sess.ID, in.SessionID), newSessionOut(sess, files), nil
}

func (h *Handler) uploadFile(ctx context.Context, req *sdk.CallToolRequest, in uploadIn) (*sdk.CallToolResult, fileOut, error) {
	st, err := h.stateOf(req)
	if err != nil {
		return nil, fileOut{}, err
	}
	data := []byte(in.Text)
	switch {
	case in.Text != "" && in.Base64 != "":
		return toolError("send text or base64, not both"), fileOut{}, nil
	case in.Base64 != "":
		if data, err = base64.StdEncoding.DecodeString(in.Base64); err != nil {
			return toolError("base64 is not valid base64: %v", err), fileOut{}, nil
		}
	}
	sid, err := h.target(ctx, st, in.SessionID, true)
	if err != nil {
		res, err := h.failure(err)
		return res, fileOut{}, err
	}
	f, err := h.sessions.AddFile(ctx, st.caller, sid, session.BytesUpload(in.Name, data))
	if err != nil {
		res, err := h.failure(err)
		return res, fileOut{}, err
	}
	fo := newFileOut(f)
	return textResult("Uploaded /mnt/data/%s (%d bytes) to session %s.", f.Name, f.Size, sid), fo, nil
}

func (h *Handler) listFiles(ctx context.Context, req *sdk.CallToolRequest, in listFilesIn) (*sdk.CallToolResult, filesOut, error) {
	st, err := h.stateOf(req)
	if err != nil {
		return nil, filesOut{}, err
	}
	sid, err := h.target(ctx, st, in.SessionID, false)
	if err != nil {
		res, err := h.failure(err)
		return res, filesOut{}, err
	}
	out := filesOut{SessionID: sid, Files: []fileOut{}}
	if sid == "" {
		return textResult("No files: the default session does not exist yet."), out, nil
	}
	files, err := h.sessions.Files(ctx, st.caller, sid)
	if err != nil {
		res, err := h.failure(err)
		return res, filesOut{}, err
	}
	var b strings.Builder
	for _, f := range files {
		fo := newFileOut(f)
		out.Files = append(out.Files, fo)
		fmt.Fprintf(&b, "/mnt/data/%s  %d bytes  %s\n", f.Name, f.Size, fo.URI)
	}
	if len(files) == 0 {
		fmt.Fprintf(&b, "Session %s has no files.\n", sid)
	}
	return textResult("%s", b.String()), out, nil
}

func (h *Handler) interrupt(ctx context.Context, req *sdk.CallToolRequest, in sessionIn) (*sdk.CallToolResult, interruptOut, error) {
	st, err := h.stateOf(req)
	if err != nil {
		return nil, interruptOut{}, err
	}
	id, ok := st.runningIn(in.SessionID)
	if !ok {
		return toolError("nothing is running in session %s on this connection", in.SessionID), interruptOut{}, nil
	}
	if err := h.sessions.Cancel(ctx, st.caller, id); err != nil {
		res, err := h.failure(err)
		return res, interruptOut{}, err
	}
	return textResult("Interrupting the run in session %s; its execute call ends as cancelled.", in.SessionID),
		interruptOut{SessionID: in.SessionID, ExecutionID: id, Status: "cancelling"}, nil
}

func textResult(format string, args ...any) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// timeFormat is the API's: RFC 3339, UTC, milliseconds.
const timeFormat = "2006-01-02T15:04:05.000Z"

func newSessionOut(s *store.Session, files []*store.File) sessionOut {
	out := sessionOut{
		SessionID: s.ID, CreatedAt: s.CreatedAt.UTC().Format(timeFormat), LastUsedAt: s.LastUsedAt.UTC().Format(timeFormat),
		ExpiresAt: s.ExpiresAt.UTC().Format(timeFormat), HasState: s.HasState, StateSize: s.StateSize,
	}
	for _, f := range files {
		out.Files = append(out.Files, newFileOut(f))
	}
	return out
}

func newFileOut(f *store.File) fileOut {
	return fileOut{ID: f.ID, Name: f.Name, SessionID: f.SessionID, Size: f.Size, ContentType: f.ContentType, URI: fileURI(f.SessionID, f.ID)}
}

// timeout turns timeout_ms into the executor's timeout; the executor clamps it.
func timeout(ms int64) time.Duration {
	if ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
