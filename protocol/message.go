package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Version is the protocol version this codec speaks.
const Version = 1

// Operations of a Request.
const (
	OpExec = "exec"
	OpPing = "ping"
)

// Statuses the REPL reports in a Response. The host adds its own (oom, sandbox_died,
// and timeout when its hard deadline fires).
const (
	StatusOK      = "ok"
	StatusError   = "error"
	StatusTimeout = "timeout"
)

// Ready is the handshake a REPL sends once its pre-imports are done.
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
// it after. Content travels as base64, which encoding/json does for a []byte.
type File struct {
	Path    string `json:"path"`
	Size    int64  `json:"size,omitempty"`
	Content []byte `json:"content"`
}

// Limits bound what a REPL may send back for one request.
type Limits struct {
	MaxOutputBytes int64 `json:"max_output_bytes"`
	MaxFileBytes   int64 `json:"max_file_bytes"`
	MaxFiles       int   `json:"max_files"`
	MaxStateBytes  int64 `json:"max_state_bytes"`
}

// Request is one message from the host. State is the raw state blob (an LZ4 frame);
// it travels as base64.
type Request struct {
	ID           string   `json:"id"`
	Op           string   `json:"op"`
	Lang         string   `json:"lang,omitempty"`
	Code         string   `json:"code,omitempty"`
	Args         []string `json:"args,omitempty"`
	State        []byte   `json:"state"`
	CaptureState bool     `json:"capture_state"`
	TimeoutMS    int64    `json:"timeout_ms,omitempty"`
	Files        []File   `json:"files,omitempty"`
	Limits       Limits   `json:"limits"`
}

// Response is a REPL's answer to an exec request.
type Response struct {
	ID         string  `json:"id"`
	Type       string  `json:"type"`
	Status     string  `json:"status"`
	ExitCode   int     `json:"exit_code"`
	Stdout     string  `json:"stdout"`
	Stderr     string  `json:"stderr"`
	Error      *string `json:"error"`
	Result     *string `json:"result"`
	State      []byte  `json:"state"`
	StateError *string `json:"state_error"`
	Files      []File  `json:"files"`
	FilesError *string `json:"files_error"`
	Truncated  bool    `json:"truncated"`
	DurationMS int64   `json:"duration_ms"`
}

// ErrMalformed marks a message that breaks the protocol. The host treats the sandbox
// that sent it as dead.
var ErrMalformed = errors.New("protocol: malformed message")

// DecodeReady parses and checks a ready frame.
func DecodeReady(payload []byte) (Ready, error) {
	var r Ready
	if err := json.Unmarshal(payload, &r); err != nil {
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

// DecodeResponse parses a response to the request with the given id and checks it
// against the limits the request set. Anything off is ErrMalformed.
func DecodeResponse(payload []byte, id string, lim Limits) (*Response, error) {
	var r Response
	rest, state, lifted := liftState(payload)
	if lifted {
		payload = rest
	}
	if err := json.Unmarshal(payload, &r); err != nil {
		return nil, fmt.Errorf("%w: response: %v", ErrMalformed, err)
	}
	if lifted {
		r.State = state
	}
	switch {
	case r.Type != "result":
		return nil, fmt.Errorf("%w: expected a result, got type %q", ErrMalformed, r.Type)
	case r.ID != id:
		return nil, fmt.Errorf("%w: response id %q, want %q", ErrMalformed, r.ID, id)
	case r.Status != StatusOK && r.Status != StatusError && r.Status != StatusTimeout:
		return nil, fmt.Errorf("%w: unknown status %q", ErrMalformed, r.Status)
	}
	// The REPL caps output itself and appends a marker; allow room for the marker.
	const slack = 256
	if lim.MaxOutputBytes > 0 {
		for name, s := range map[string]string{"stdout": r.Stdout, "stderr": r.Stderr} {
			if int64(len(s)) > 4*lim.MaxOutputBytes+slack { // UTF-8 replacement can grow bytes
				return nil, fmt.Errorf("%w: %s of %d bytes over its limit", ErrMalformed, name, len(s))
			}
		}
	}
	if lim.MaxStateBytes > 0 && int64(len(r.State)) > lim.MaxStateBytes {
		return nil, fmt.Errorf("%w: state of %d bytes over its limit", ErrMalformed, len(r.State))
	}
	if lim.MaxFiles > 0 && len(r.Files) > lim.MaxFiles {
		return nil, fmt.Errorf("%w: %d files over the limit of %d", ErrMalformed, len(r.Files), lim.MaxFiles)
	}
	for _, f := range r.Files {
		if lim.MaxFileBytes > 0 && int64(len(f.Content)) > lim.MaxFileBytes {
			return nil, fmt.Errorf("%w: file %q of %d bytes over its limit", ErrMalformed, f.Path, len(f.Content))
		}
		if f.Path == "" {
			return nil, fmt.Errorf("%w: file without a path", ErrMalformed)
		}
	}
	return &r, nil
}
