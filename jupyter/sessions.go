package jupyter

import (
	"context"

	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

// Sessions is what the Jupyter layer needs of kiln's sessions (a *session.Service): a
// kernel is a session, a cell one of its calls. Errors the caller can act on are
// *kiln.Error, by code; any other error is kiln's own failure.
type Sessions interface {
	// NewSession makes an empty session of the caller's for entity (a kernel's).
	NewSession(ctx context.Context, c session.Caller, entity string) (*store.Session, error)
	// Session returns a session the caller owns: not_found for one that is gone, expired
	// or another's.
	Session(ctx context.Context, c session.Caller, id string) (*store.Session, error)
	// Admit takes one of the caller's execution slots, or answers rate_limited (the
	// concurrency quota) when every one is taken.
	Admit(c session.Caller) (release func(), err error)
	// Exec runs a call of a session: invalid_request or unsupported_language for a request
	// kiln refuses, not_found for a session that is gone (ExecRequest.Existing),
	// session_busy when the session's turn does not come, rate_limited past a quota,
	// unavailable when no sandbox does. The result holds its sandbox until Release.
	Exec(ctx context.Context, c session.Caller, req session.ExecRequest) (*session.ExecResult, error)
	// Cancel interrupts the caller's running execution: not_found when there is none.
	Cancel(ctx context.Context, c session.Caller, executionID string) error
	// DeleteState drops a session's state and its live sandbox (a restart); DeleteSession
	// removes the session (a shutdown). Both not_found for a session the caller does not own.
	DeleteState(ctx context.Context, c session.Caller, sid string) error
	DeleteSession(ctx context.Context, c session.Caller, id string) error
}

var _ Sessions = (*session.Service)(nil)
