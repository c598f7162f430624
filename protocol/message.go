package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
)

// Version is the protocol version this codec speaks.
const Version = 2

// Operations of a Request. An interrupt is only ever sent while a request runs.
const (
	OpExec      = "exec"
	OpPing      = "ping"
	OpInterrupt = "interrupt"
	// OpHello asks for the ready frame: the greeting of a host that attaches once the REPL
	// runs (started with --await-hello, it sends nothing before).
	OpHello = "hello"
	// OpToolResults answers a run's tool calls; only ever sent while it waits for them.
	OpToolResults = "tool_results"
)

// Statuses the REPL reports in a Response. The host adds its own (oom, sandbox_died,
// and timeout when its hard deadline fires).
const (
	StatusOK        = "ok"
	StatusError     = "error"
	StatusTimeout   = "timeout"
	StatusCancelled = "cancelled"
)

// Kinds of event a REPL sends while a request with Events runs.
const (
	EventOutput  = "output"
	EventDisplay = "display"
	// EventBundle is a rich output (a display_data or an execute_result, see Outputs),
	// sent as it is shown; its one payload is the output's JSON.
	EventBundle = "bundle"
	// EventToolCalls is sent, events or not, by a run with tools that waits on calls.
	EventToolCalls = "tool_calls"
)

// Ready is the handshake a REPL sends once its pre-imports are done (or, started with
// --await-hello, in answer to a hello, with the hello's id); its frame has no payloads.
type Ready struct {
	Type         string            `json:"type"`
	Protocol     int               `json:"protocol"`
	Python       string            `json:"python"`
	Preloaded    map[string]string `json:"preloaded"`
	Capabilities Capabilities      `json:"capabilities"`
}

// Capabilities is what a REPL says it can do. The host decides from these, never from
// its own idea of what runs inside.
type Capabilities struct {
	Languages []string `json:"languages"`
	State     bool     `json:"state"`
	Files     bool     `json:"files"`
	Tools     bool     `json:"tools"`
	// Agent says the REPL answers agent calls (OpAgent): commands and files beside cells.
	Agent bool `json:"agent"`
}

// Supports reports whether lang is among the REPL's languages.
func (c Capabilities) Supports(lang string) bool {
	for _, l := range c.Languages {
		if l == lang {
			return true
		}
	}
	return false
}

// File is a file moved through the protocol: into /mnt/data before a run, or out of
// it after. Its content travels raw among the frame's payloads; the header names its
// path and size.
type File struct {
	Path    string
	Content []byte
}

// Limits bound what a REPL may send back for one request.
type Limits struct {
	MaxOutputBytes int64 `json:"max_output_bytes"`
	MaxFileBytes   int64 `json:"max_file_bytes"`
	MaxFiles       int   `json:"max_files"`
	MaxStateBytes  int64 `json:"max_state_bytes"`
	// MaxStateRawBytes bounds the pickle of a captured state, before compression: the
	// REPL stops pickling past it, so a huge state is a note, not an out-of-memory
	// death. Zero leaves the REPL's default.
	MaxStateRawBytes int64 `json:"max_state_raw_bytes,omitempty"`
	// MaxToolCallBytes bounds the JSON input of one tool call; zero leaves the
	// REPL's default.
	MaxToolCallBytes int64 `json:"max_tool_call_bytes,omitempty"`
}

// Tool is a tool of the client's that the code may call: Name is the client's, Function
// the identifier the code calls it by (a Python function, or a bash function).
type Tool struct {
	Name     string `json:"name"`
	Function string `json:"function"`
}

// ToolCall is one call the code made; Input is its JSON.
type ToolCall struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// ToolResult answers one ToolCall: its JSON result, or an error the code gets raised.
type ToolResult struct {
	CallID       string          `json:"call_id"`
	Result       json.RawMessage `json:"result"`
	IsError      bool            `json:"is_error"`
	ErrorMessage string          `json:"error_message,omitempty"`
}

// Request is one message from the host. State is the raw state blob (an LZ4 frame).
type Request struct {
	ID           string
	Op           string
	Lang         string
	Code         string
	Args         []string
	State        []byte
	CaptureState bool
	TimeoutMS    int64
	Files        []File
	Limits       Limits
	// Events asks for event frames while the code runs; Figures for matplotlib
	// figures saved as files (Python).
	Events  bool
	Figures bool
	// Tools are the client's tools the code may call; a call comes as an
	// EventToolCalls event and is answered with EncodeToolResults.
	Tools []Tool
	// Live says the sandbox goes on serving its session after this request: what a
	// capture cannot keep stays in its namespace, and its notes say so.
	Live bool
	// StateBase is the StateToken of the capture the host holds stored, when it
	// does: against it the REPL can answer that a state is unchanged without one in
	// the request (a live session's sandbox holds its namespace already).
	StateBase string
	// DeleteFiles are paths under /mnt/data to remove before the run: files of the
	// session that a live sandbox holds and the session no longer does.
	DeleteFiles []string
	// PlainPython runs Python's syntax alone: no IPython transformations (magics,
	// !cmd, obj?) and no history. ReadOnly marks the host's own read of the namespace
	// (a completion, an inspection): Python's syntax, no history, nothing counted.
	PlainPython bool
	ReadOnly    bool
}

// Event is something a run said before its result: a chunk of output, a figure (its
// PNG a slice of the frame's payloads), or a rich output.
type Event struct {
	Type   string          // EventOutput, EventDisplay or EventBundle
	Stream string          // output: "stdout" or "stderr"
	Text   string          // output
	Name   string          // display: the file's name under the data dir
	MIME   string          // display
	Data   []byte          // display
	Output json.RawMessage // bundle: the output, as Outputs holds each
	Calls  []ToolCall      // tool_calls: the calls made together, in the order made
}

// Rich outputs: what a Python run displayed and its last value, as MIME bundles in
// Jupyter's shape, {"type": "display_data" | "execute_result", "data": {MIME: content},
// "metadata": {...}}, and for a figure the run showed "figure", the name of its PNG
// among the run's files (whose bytes are not sent twice). The REPL keeps a bundle under
// MaxBundleBytes and a run's under MaxOutputsBytes, as JSON; a frame past them (with
// room for the JSON around the bundles) breaks the protocol.
const (
	MaxBundleBytes  = 8 << 20
	MaxOutputsBytes = 16 << 20
	outputsSlack    = 64 << 10
)

// Response is a REPL's answer to an exec request. State and the files' contents are
// slices of the frame's payloads: nothing is copied out of the frame.
type Response struct {
	ID       string
	Status   string
	ExitCode int
	Stdout   string
	Stderr   string
	Error    *string
	Result   *string
	State    []byte
	// StateUnchanged means the captured state is byte for byte the one the request
	// brought, which the REPL did not send back.
	StateUnchanged bool
	StateError     *string
	// StateToken names the state this capture left (sent back or unchanged): a host
	// that stored it sends it as the next request's StateBase.
	StateToken string
	Files      []File
	FilesError *string
	// DeletedFiles are the regular files present when the run began that it removed.
	DeletedFiles []string
	Truncated    bool
	DurationMS   int64
	// MemoryBytes is the REPL process's resident memory after the run, when the
	// request was Live.
	MemoryBytes int64
	// Outputs are the run's rich outputs, a JSON array (see MaxOutputsBytes), nil when
	// it showed none; a slice of the frame's payloads.
	Outputs json.RawMessage
}

// blob names one payload in a header.
type blob struct {
	Size int64 `json:"size"`
}

// fileRef names a file and its payload in a header.
type fileRef struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// The headers as they travel. Binary is first, as the framing requires.
type requestHeader struct {
	Binary       int64     `json:"binary"`
	ID           string    `json:"id"`
	Op           string    `json:"op"`
	Lang         string    `json:"lang,omitempty"`
	Code         string    `json:"code,omitempty"`
	Args         []string  `json:"args,omitempty"`
	State        *blob     `json:"state"`
	CaptureState bool      `json:"capture_state"`
	TimeoutMS    int64     `json:"timeout_ms,omitempty"`
	Files        []fileRef `json:"files,omitempty"`
	Limits       Limits    `json:"limits"`
	Events       bool      `json:"events,omitempty"`
	Figures      bool      `json:"figures,omitempty"`
	Tools        []Tool    `json:"tools,omitempty"`
	Live         bool      `json:"live,omitempty"`
	StateBase    string    `json:"state_base,omitempty"`
	DeleteFiles  []string  `json:"delete_files,omitempty"`
	PlainPython  bool      `json:"plain_python,omitempty"`
	ReadOnly     bool      `json:"read_only,omitempty"`
}

// controlHeader is an interrupt.
type controlHeader struct {
	Binary int64  `json:"binary"`
	ID     string `json:"id"`
	Op     string `json:"op"`
}

type responseHeader struct {
	Binary         int64     `json:"binary"`
	ID             string    `json:"id"`
	Type           string    `json:"type"`
	Status         string    `json:"status"`
	ExitCode       int       `json:"exit_code"`
	Stdout         string    `json:"stdout"`
	Stderr         string    `json:"stderr"`
	Error          *string   `json:"error"`
	Result         *string   `json:"result"`
	State          *blob     `json:"state"`
	StateUnchanged bool      `json:"state_unchanged"`
	StateError     *string   `json:"state_error"`
	StateToken     string    `json:"state_token,omitempty"`
	Files          []fileRef `json:"files"`
	FilesError     *string   `json:"files_error"`
	DeletedFiles   []string  `json:"deleted_files,omitempty"`
	Truncated      bool      `json:"truncated"`
	DurationMS     int64     `json:"duration_ms"`
	MemoryBytes    int64     `json:"memory_bytes,omitempty"`
	Outputs        *blob     `json:"outputs,omitempty"`
	// Events' members.
	Stream string `json:"stream,omitempty"`
	Text   string `json:"text,omitempty"`
	Name   string `json:"name,omitempty"`
	MIME   string `json:"mime,omitempty"`
}

// ErrMalformed marks a message that breaks the protocol. The host treats the sandbox
// that sent it as dead.
var ErrMalformed = errors.New("protocol: malformed message")

// payloads lists a message's state and files as header entries and payloads.
func payloads(state []byte, files []File) (*blob, []fileRef, [][]byte, int64) {
	var ref *blob
	var parts [][]byte
	var total int64
	if state != nil {
		ref = &blob{Size: int64(len(state))}
		parts = append(parts, state)
		total += int64(len(state))
	}
	refs := make([]fileRef, 0, len(files))
	for _, f := range files {
		refs = append(refs, fileRef{Path: f.Path, Size: int64(len(f.Content))})
		parts = append(parts, f.Content)
		total += int64(len(f.Content))
	}
	return ref, refs, parts, total
}

// EncodeRequest returns the request's frame as buffers for one vectored write. The
// state and the files' contents are not copied.
func EncodeRequest(r *Request) (net.Buffers, error) {
	state, files, parts, total := payloads(r.State, r.Files)
	header, err := json.Marshal(requestHeader{
		Binary: total, ID: r.ID, Op: r.Op, Lang: r.Lang, Code: r.Code, Args: r.Args,
		State: state, CaptureState: r.CaptureState, TimeoutMS: r.TimeoutMS, Files: files, Limits: r.Limits,
		Events: r.Events, Figures: r.Figures, Tools: r.Tools, Live: r.Live, StateBase: r.StateBase,
		DeleteFiles: r.DeleteFiles, PlainPython: r.PlainPython, ReadOnly: r.ReadOnly,
	})
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return appendFrame(RequestStart, RequestEnd, header, parts), nil
}

// EncodeInterrupt returns the frame that interrupts the running request id.
func EncodeInterrupt(id string) net.Buffers {
	header, _ := json.Marshal(controlHeader{ID: id, Op: OpInterrupt}) // cannot fail
	return appendFrame(RequestStart, RequestEnd, header, nil)
}

// EncodeHello returns the frame that asks a REPL for its ready frame, which echoes id.
func EncodeHello(id string) net.Buffers {
	header, _ := json.Marshal(controlHeader{ID: id, Op: OpHello}) // cannot fail
	return appendFrame(RequestStart, RequestEnd, header, nil)
}

// EncodeToolResults returns the frame that answers the tool calls of the running
// request id: a control header, and the results' JSON as its one payload.
func EncodeToolResults(id string, results []ToolResult) (net.Buffers, error) {
	if results == nil {
		results = []ToolResult{}
	}
	body, err := json.Marshal(results)
	if err != nil {
		return nil, fmt.Errorf("encode tool results: %w", err)
	}
	header, _ := json.Marshal(controlHeader{Binary: int64(len(body)), ID: id, Op: OpToolResults}) // cannot fail
	return appendFrame(RequestStart, RequestEnd, header, [][]byte{body}), nil
}

// DecodeToolResults parses a tool_results frame, as a REPL would; for stand-ins of one.
func DecodeToolResults(f Frame) (id string, results []ToolResult, err error) {
	var h controlHeader
	if err := json.Unmarshal(f.Header, &h); err != nil || h.Op != OpToolResults {
		return "", nil, fmt.Errorf("%w: not a tool_results frame", ErrMalformed)
	}
	if err := json.Unmarshal(f.Binary, &results); err != nil {
		return "", nil, fmt.Errorf("%w: tool results: %v", ErrMalformed, err)
	}
	return h.ID, results, nil
}

// DecodeRequest parses a request frame, as a REPL would; for stand-ins of one.
func DecodeRequest(f Frame) (*Request, error) {
	var h requestHeader
	if err := json.Unmarshal(f.Header, &h); err != nil {
		return nil, fmt.Errorf("%w: request: %v", ErrMalformed, err)
	}
	state, files, _, err := split(f.Binary, h.Binary, h.State, h.Files, nil)
	if err != nil {
		return nil, err
	}
	return &Request{
		ID: h.ID, Op: h.Op, Lang: h.Lang, Code: h.Code, Args: h.Args, State: state,
		CaptureState: h.CaptureState, TimeoutMS: h.TimeoutMS, Files: files, Limits: h.Limits,
		Events: h.Events, Figures: h.Figures, Tools: h.Tools, Live: h.Live, StateBase: h.StateBase,
		DeleteFiles: h.DeleteFiles, PlainPython: h.PlainPython, ReadOnly: h.ReadOnly,
	}, nil
}

// EncodeResponse returns the response's frame, as a REPL would send it; for stand-ins
// of one.
func EncodeResponse(r *Response) (net.Buffers, error) {
	state, files, parts, total := payloads(r.State, r.Files)
	var outputs *blob
	if r.Outputs != nil {
		outputs = &blob{Size: int64(len(r.Outputs))}
		parts = append(parts, r.Outputs)
		total += outputs.Size
	}
	header, err := json.Marshal(responseHeader{
		Binary: total, ID: r.ID, Type: "result", Status: r.Status, ExitCode: r.ExitCode,
		Stdout: r.Stdout, Stderr: r.Stderr, Error: r.Error, Result: r.Result,
		State: state, StateUnchanged: r.StateUnchanged, StateError: r.StateError, StateToken: r.StateToken,
		Files: files, FilesError: r.FilesError, DeletedFiles: r.DeletedFiles, Truncated: r.Truncated,
		DurationMS: r.DurationMS, MemoryBytes: r.MemoryBytes, Outputs: outputs,
	})
	if err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	return appendFrame(ResponseStart, ResponseEnd, header, parts), nil
}

// split cuts a frame's payloads into the state, the files and the outputs its header
// names. The sizes must account for every payload byte.
func split(bin []byte, count int64, state *blob, refs []fileRef, outputs *blob) ([]byte, []File, []byte, error) {
	if count != int64(len(bin)) {
		return nil, nil, nil, fmt.Errorf("%w: header counts %d payload bytes, the frame has %d", ErrMalformed, count, len(bin))
	}
	var out, outs []byte
	rest := bin
	take := func(n int64) ([]byte, bool) {
		if n < 0 || n > int64(len(rest)) {
			return nil, false
		}
		b := rest[:n:n]
		rest = rest[n:]
		return b, true
	}
	if state != nil {
		var ok bool
		if out, ok = take(state.Size); !ok {
			return nil, nil, nil, fmt.Errorf("%w: state of %d bytes past the payloads", ErrMalformed, state.Size)
		}
	}
	files := make([]File, 0, len(refs))
	for _, ref := range refs {
		content, ok := take(ref.Size)
		if !ok {
			return nil, nil, nil, fmt.Errorf("%w: file %q of %d bytes past the payloads", ErrMalformed, ref.Path, ref.Size)
		}
		files = append(files, File{Path: ref.Path, Content: content})
	}
	if outputs != nil {
		var ok bool
		if outs, ok = take(outputs.Size); !ok {
			return nil, nil, nil, fmt.Errorf("%w: outputs of %d bytes past the payloads", ErrMalformed, outputs.Size)
		}
	}
	if len(rest) != 0 {
		return nil, nil, nil, fmt.Errorf("%w: %d payload bytes named by nothing", ErrMalformed, len(rest))
	}
	return out, files, outs, nil
}

// DecodeReady parses and checks a ready frame.
func DecodeReady(f Frame) (Ready, error) {
	var r Ready
	if err := json.Unmarshal(f.Header, &r); err != nil {
		return Ready{}, fmt.Errorf("%w: ready: %v", ErrMalformed, err)
	}
	if r.Type != "ready" {
		return Ready{}, fmt.Errorf("%w: expected a ready frame, got type %q", ErrMalformed, r.Type)
	}
	if r.Protocol != Version {
		return Ready{}, fmt.Errorf("%w: protocol version %d, want %d", ErrMalformed, r.Protocol, Version)
	}
	return r, nil
}

// EncodeEvent returns an event's frame, as a REPL would send it; for stand-ins of one.
func EncodeEvent(id string, ev *Event) (net.Buffers, error) {
	data := ev.Data
	if ev.Type == EventBundle {
		data = ev.Output
	}
	if ev.Type == EventToolCalls {
		var err error
		if data, err = json.Marshal(ev.Calls); err != nil {
			return nil, fmt.Errorf("encode event: %w", err)
		}
	}
	h := responseHeader{ID: id, Type: ev.Type, Stream: ev.Stream, Text: ev.Text, Name: ev.Name, MIME: ev.MIME,
		Binary: int64(len(data))}
	header, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	return appendFrame(ResponseStart, ResponseEnd, header, [][]byte{data}), nil
}

// Decode parses what a REPL sent about the request with the given id: an event (ev)
// or the result (resp), checked against the limits the request set. Anything off is
// ErrMalformed.
func Decode(f Frame, id string, lim Limits) (ev *Event, resp *Response, err error) {
	var h responseHeader
	if err := json.Unmarshal(f.Header, &h); err != nil {
		return nil, nil, fmt.Errorf("%w: response: %v", ErrMalformed, err)
	}
	if h.ID != id {
		return nil, nil, fmt.Errorf("%w: response id %q, want %q", ErrMalformed, h.ID, id)
	}
	switch h.Type {
	case EventOutput, EventDisplay, EventToolCalls, EventBundle:
		ev, err := decodeEvent(&h, f, lim)
		return ev, nil, err
	case "result":
		resp, err := decodeResult(&h, f, lim)
		return nil, resp, err
	}
	return nil, nil, fmt.Errorf("%w: expected a result or an event, got type %q", ErrMalformed, h.Type)
}

func decodeEvent(h *responseHeader, f Frame, lim Limits) (*Event, error) {
	if h.Binary != int64(len(f.Binary)) {
		return nil, fmt.Errorf("%w: header counts %d payload bytes, the frame has %d", ErrMalformed, h.Binary, len(f.Binary))
	}
	if h.Type == EventOutput {
		if h.Stream != "stdout" && h.Stream != "stderr" {
			return nil, fmt.Errorf("%w: output on stream %q", ErrMalformed, h.Stream)
		}
		if lim.MaxOutputBytes > 0 && int64(len(h.Text)) > 4*lim.MaxOutputBytes {
			return nil, fmt.Errorf("%w: output event of %d bytes", ErrMalformed, len(h.Text))
		}
		return &Event{Type: h.Type, Stream: h.Stream, Text: h.Text}, nil
	}
	if h.Type == EventToolCalls {
		return decodeToolCalls(f, lim)
	}
	if h.Type == EventBundle {
		if len(f.Binary) > MaxBundleBytes+outputsSlack || !json.Valid(f.Binary) {
			return nil, fmt.Errorf("%w: a bundle event of %d bytes", ErrMalformed, len(f.Binary))
		}
		return &Event{Type: EventBundle, Output: f.Binary}, nil
	}
	if h.Name == "" || (lim.MaxFileBytes > 0 && h.Binary > lim.MaxFileBytes) {
		return nil, fmt.Errorf("%w: display %q of %d bytes", ErrMalformed, h.Name, h.Binary)
	}
	return &Event{Type: h.Type, Name: h.Name, MIME: h.MIME, Data: f.Binary}, nil
}

// DecodeResponse parses the result of the request with the given id; an event is
// ErrMalformed here.
func DecodeResponse(f Frame, id string, lim Limits) (*Response, error) {
	ev, resp, err := Decode(f, id, lim)
	if err == nil && ev != nil {
		err = fmt.Errorf("%w: expected a result, got type %q", ErrMalformed, ev.Type)
	}
	return resp, err
}

func decodeResult(h *responseHeader, f Frame, lim Limits) (*Response, error) {
	switch {
	case h.Status != StatusOK && h.Status != StatusError && h.Status != StatusTimeout && h.Status != StatusCancelled:
		return nil, fmt.Errorf("%w: unknown status %q", ErrMalformed, h.Status)
	case h.StateUnchanged && h.State != nil:
		return nil, fmt.Errorf("%w: a state sent back as unchanged", ErrMalformed)
	}
	// The REPL caps output itself and appends a marker; allow room for the marker.
	const slack = 256
	if lim.MaxOutputBytes > 0 {
		for name, s := range map[string]string{"stdout": h.Stdout, "stderr": h.Stderr} {
			if int64(len(s)) > 4*lim.MaxOutputBytes+slack { // UTF-8 replacement can grow bytes
				return nil, fmt.Errorf("%w: %s of %d bytes over its limit", ErrMalformed, name, len(s))
			}
		}
	}
	if lim.MaxStateBytes > 0 && h.State != nil && h.State.Size > lim.MaxStateBytes {
		return nil, fmt.Errorf("%w: state of %d bytes over its limit", ErrMalformed, h.State.Size)
	}
	if len(h.DeletedFiles) > maxDeletedFiles {
		return nil, fmt.Errorf("%w: %d deleted files reported", ErrMalformed, len(h.DeletedFiles))
	}
	if lim.MaxFiles > 0 && len(h.Files) > lim.MaxFiles {
		return nil, fmt.Errorf("%w: %d files over the limit of %d", ErrMalformed, len(h.Files), lim.MaxFiles)
	}
	for _, ref := range h.Files {
		if lim.MaxFileBytes > 0 && ref.Size > lim.MaxFileBytes {
			return nil, fmt.Errorf("%w: file %q of %d bytes over its limit", ErrMalformed, ref.Path, ref.Size)
		}
		if ref.Path == "" {
			return nil, fmt.Errorf("%w: file without a path", ErrMalformed)
		}
	}
	if h.Outputs != nil && h.Outputs.Size > MaxOutputsBytes+outputsSlack {
		return nil, fmt.Errorf("%w: outputs of %d bytes over their limit", ErrMalformed, h.Outputs.Size)
	}
	state, files, outputs, err := split(f.Binary, h.Binary, h.State, h.Files, h.Outputs)
	if err != nil {
		return nil, err
	}
	if outputs != nil && !json.Valid(outputs) {
		return nil, fmt.Errorf("%w: outputs that are not JSON", ErrMalformed)
	}
	return &Response{
		ID: h.ID, Status: h.Status, ExitCode: h.ExitCode, Stdout: h.Stdout, Stderr: h.Stderr,
		Error: h.Error, Result: h.Result, State: state, StateUnchanged: h.StateUnchanged,
		StateError: h.StateError, StateToken: h.StateToken, Files: files, FilesError: h.FilesError,
		DeletedFiles: h.DeletedFiles, Truncated: h.Truncated, DurationMS: h.DurationMS, MemoryBytes: h.MemoryBytes,
		Outputs: outputs,
	}, nil
}

// maxDeletedFiles bounds the deleted files one result may report: a run that removes
// more removed what the session could hold many times over.
const maxDeletedFiles = 10000

// maxCallsPerEvent bounds the calls of one tool_calls event.
const maxCallsPerEvent = 1000

func decodeToolCalls(f Frame, lim Limits) (*Event, error) {
	var calls []ToolCall
	if err := json.Unmarshal(f.Binary, &calls); err != nil {
		return nil, fmt.Errorf("%w: tool calls: %v", ErrMalformed, err)
	}
	if len(calls) == 0 || len(calls) > maxCallsPerEvent {
		return nil, fmt.Errorf("%w: a tool_calls event with %d calls", ErrMalformed, len(calls))
	}
	for _, c := range calls {
		// The REPL measures the input as it encodes it; the JSON here may be spaced
		// differently, hence the slack.
		if c.ID == "" || c.Name == "" || len(c.Input) == 0 ||
			lim.MaxToolCallBytes > 0 && int64(len(c.Input)) > 2*lim.MaxToolCallBytes+1024 {
			return nil, fmt.Errorf("%w: tool call %q to %q with %d bytes of input", ErrMalformed, c.ID, c.Name, len(c.Input))
		}
	}
	return &Event{Type: EventToolCalls, Calls: calls}, nil
}
