package mcp

import (
	"context"

	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

// Sessions is what the MCP tools need of kiln's sessions (a *session.Service). Errors
// the caller can act on are *kiln.Error, by code, which a tool answers as its error;
// any other error is kiln's own failure.
type Sessions interface {
	// NewSession makes an empty session of the caller's; Session returns one the caller
	// owns (not_found for one that is gone, expired or another's); Sessions lists the
	// caller's, newest first, and says whether more follow.
	NewSession(ctx context.Context, c session.Caller, entity string) (*store.Session, error)
	Session(ctx context.Context, c session.Caller, id string) (*store.Session, error)
	Sessions(ctx context.Context, c session.Caller, offset, limit int) ([]*store.Session, bool, error)
	// Exec runs a call of a session: invalid_request or unsupported_language for a request
	// kiln refuses, forbidden for a file the caller may not use, session_busy when the
	// session's turn does not come, rate_limited past a quota, unavailable when no sandbox
	// does. The result holds its sandbox until Release.
	Exec(ctx context.Context, c session.Caller, req session.ExecRequest) (*session.ExecResult, error)
	// Cancel interrupts the caller's running execution: not_found when there is none.
	Cancel(ctx context.Context, c session.Caller, executionID string) error
	// Fork copies a session the caller owns, its newest state and its files, into a new
	// one; DeleteSession removes one. Both not_found for a session that is not the caller's.
	Fork(ctx context.Context, c session.Caller, sid string) (*store.Session, []*store.File, error)
	DeleteSession(ctx context.Context, c session.Caller, id string) error
	// AddFile stores a file in a session (too_large past its limits or the storage quota);
	// Files lists a session's files, File reads one (not_found for one that is gone).
	AddFile(ctx context.Context, c session.Caller, sid string, u session.Upload) (*store.File, error)
	Files(ctx context.Context, c session.Caller, sid string) ([]*store.File, error)
	File(ctx context.Context, c session.Caller, sid, fid string) (*store.File, []byte, error)
}

var _ Sessions = (*session.Service)(nil)
