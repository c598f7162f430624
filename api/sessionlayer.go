package api

import (
	"context"
	"io"

	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

// Sessions is what the REST routes need of kiln's sessions (a *session.Service). Errors
// the client can act on are *kiln.Error, whose code picks the status (errors.go); any
// other error is kiln's own failure, a 500.
type Sessions interface {
	// Exec runs a call: invalid_request or unsupported_language for a request kiln
	// refuses, forbidden for a file the caller may not use, session_busy when the
	// session's turn does not come, rate_limited past a quota, too_large past a limit,
	// unavailable when no sandbox does. The result holds its sandbox until Release.
	Exec(ctx context.Context, c session.Caller, req session.ExecRequest) (*session.ExecResult, error)
	// Admit takes one of the caller's execution slots for a run that holds it across
	// requests (a programmatic run): rate_limited when every one is taken.
	Admit(c session.Caller) (release func(), err error)
	// Cancel interrupts, and Continue answers the tool calls of, the caller's running
	// execution: not_found when there is none, or it is another's.
	Cancel(ctx context.Context, c session.Caller, executionID string) error
	Continue(ctx context.Context, c session.Caller, executionID, token string, results []protocol.ToolResult) error

	// Session returns a session the caller owns, Sessions a page of them (and whether more
	// follow), Stored one once its newest state is stored: not_found for a session that is
	// gone, expired or another's. Fork copies one with its newest state and files;
	// DeleteSession removes one.
	Session(ctx context.Context, c session.Caller, id string) (*store.Session, error)
	Sessions(ctx context.Context, c session.Caller, offset, limit int) ([]*store.Session, bool, error)
	Stored(ctx context.Context, c session.Caller, sid string) (*store.Session, error)
	Fork(ctx context.Context, c session.Caller, sid string) (*store.Session, []*store.File, error)
	DeleteSession(ctx context.Context, c session.Caller, id string) error

	// State reads a session's newest state (not_found without one), PutState replaces it
	// (invalid_request for a blob that is not a state, too_large past the storage quota),
	// DeleteState drops it; each ends the session's live sandbox where it must.
	State(ctx context.Context, c session.Caller, sid string) ([]byte, *store.Session, error)
	PutState(ctx context.Context, c session.Caller, sid string, blob []byte) (*store.Session, error)
	DeleteState(ctx context.Context, c session.Caller, sid string) error

	// Upload stores files in a new session, all or none (too_large for a file past a limit
	// or the storage quota); UploadBatch stores up to BatchLimit of them, each on its own.
	Upload(ctx context.Context, c session.Caller, to session.Target, uploads []session.Upload) (*store.Session, []*store.File, error)
	UploadBatch(ctx context.Context, c session.Caller, to session.Target, uploads []session.Upload) (*store.Session, []session.BatchResult, error)
	BatchLimit(sc session.Scope) int
	// Files lists a session's files; FileInfo and OpenFile find one (not_found for one
	// that is gone or not the caller's to see); DeleteScopedFile removes one (forbidden for
	// a resource's file the caller did not upload and does not administer).
	Files(ctx context.Context, c session.Caller, sid string) ([]*store.File, error)
	FileInfo(ctx context.Context, c session.Caller, sid, fid string) (*store.File, error)
	OpenFile(ctx context.Context, c session.Caller, sid, fid string) (*store.File, io.ReadCloser, error)
	DeleteScopedFile(ctx context.Context, c session.Caller, scope session.Scope, sid, fid string) error
}

var _ Sessions = (*session.Service)(nil)
