package session

import (
	"context"

	"github.com/kilnsh/kiln/egress"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/live"
	"github.com/kilnsh/kiln/store"
)

// FileRef names a file to place in /mnt/data: one uploaded or produced earlier.
type FileRef struct {
	ID        string
	SessionID string
	Name      string
	// Scope is whose session SessionID is: the caller's own, or a resource's (a file an
	// agent or a skill brings), read-only to code.
	Scope Scope
}

// ExecRequest is an execution in session mode: what its client asked of the run, and of
// the session it belongs to.
type ExecRequest struct {
	execution.Request
	SessionID string
	EntityID  string
	// RuntimeHint is a client's name for a runtime (LibreChat's runtime_session_hint,
	// one per conversation): the caller's session that carries it is continued, and a
	// new session carries it. It outranks the first file's session and EntityID.
	RuntimeHint string
	Files       []FileRef
	// Stateless means the caller carries the state itself (Request.State): the
	// session is a fresh one that only holds the files the run produces.
	Stateless bool
	// Events, when set, hears the run while it goes: its start once it has a
	// sandbox, its output, and each figure it shows, stored in the session at once.
	// It is called on the request's goroutine and must not block for long.
	Events func(Event)
	// Network is the request's field "network": it narrows the operator's egress policy
	// for this call, or shuts it; nil keeps the policy as it is.
	Network *egress.Network
	// Existing says the call continues SessionID or nothing: a session that is gone (or
	// goes while the call waits for its turn) is a not-found error, never a new session.
	// A front end whose handle stands for one session (a Jupyter kernel) sets it.
	Existing bool
	// Admitted says the front end took the call's execution slot itself (Service.Admit),
	// and releases it: Exec takes none.
	Admitted bool
}

// ExecResult is what an execution did, with the session it used and the files it
// produced, stored under that session. It holds the run's sandbox until Release (of
// the embedded executor.Result), which the caller calls once its answer is out.
type ExecResult struct {
	*executor.Result
	Session *store.Session
	Files   []*store.File
	// Outputs are the run's rich outputs, in order (Output); empty, never nil.
	Outputs []Output
	// RuntimeStatus says where the run went: RuntimeNew, RuntimeReused or RuntimeResumed.
	RuntimeStatus string
	// Inherited are the read-only inputs the run changed: handed back as they were, never
	// stored as new files. ModifiedFrom names, by a stored file's id, the input it is a
	// changed copy of.
	Inherited    []Inherited
	ModifiedFrom map[string]*store.File
	// Deleted are the session's files the run deleted, which left the session: those of
	// Result.DeletedFiles that code may delete (not the read-only ones).
	Deleted []string
	// StatePending says the call answered before its state was stored (it ran in the
	// session's live sandbox, which keeps the namespace): the store gets it within
	// Config.StateSaveDelay of the session's last call, or before the sandbox ends.
	StatePending bool
}

// Inherited is a read-only input a run changed, by the path it had in /mnt/data.
type Inherited struct {
	Path string
	File *store.File
}

// Exec runs code in a session: it picks the session (session_id, then the session of
// the first file, then the caller's latest session for the entity, else a new one),
// restores its state, places its files, runs, and saves the new state and the files
// the run produced. A new session is created only once the run is done, so a request
// that fails (validation, a file the caller cannot see, no free sandbox) leaves no
// session behind; in stateless mode, only when the run produced files to keep.
//
// Stateless mode is this same path: the caller carries the state in req.State and gets
// it back in the result's State, and the session only keeps the run's files.
//
// A call lives through its stages in order (call): choose, bind, load, run, keep and
// settle, each in the file of its name but run.
func (s *Service) Exec(ctx context.Context, c Caller, req ExecRequest) (_ *ExecResult, err error) {
	cl := &call{s: s, ctx: ctx, keepCtx: context.WithoutCancel(ctx), c: c, req: req, x: executor.Request{Request: req.Request}}
	defer func() { cl.end(err) }()
	for _, stage := range []func() error{cl.choose, cl.bind, cl.load, cl.run, cl.keep} {
		if err := stage(); err != nil {
			return nil, err
		}
	}
	cl.settle()
	return cl.out, nil
}

// call is one Exec as it goes: the session it continues, the live sandbox it was lent,
// what it was given, and what it did.
type call struct {
	s   *Service
	ctx context.Context // the caller's: the waits and the run end with it
	// keepCtx is what stores the call's results: a caller who hangs up must not cost the
	// session what its run produced.
	keepCtx context.Context
	c       Caller
	req     ExecRequest
	// x is the executor's request: the client's, with where and how the call runs, as
	// its stages fill it in.
	x    executor.Request
	sess *store.Session // nil for a new session, until keep creates it
	// lost is what the session lost since its last call (pendingStates.lose), for the
	// answer's state_error.
	lost string
	liveRun
	in   inputSet
	link *link
	res  *executor.Result
	out  *ExecResult
	// endTurn ends the session's turn, unless settle handed it to the capture after the
	// answer; ends are the other scopes the call opened, closed last first.
	endTurn func()
	ends    []func()
}

// run runs the call's request in its sandbox.
func (cl *call) run() (err error) {
	cl.res, err = cl.s.run.Run(cl.ctx, cl.x)
	return err
}

// end closes what the call opened, once Exec returns with err. A call that failed after
// it was lent its session's live sandbox ends that sandbox: what its namespace holds is
// no longer known.
func (cl *call) end(err error) {
	if err != nil {
		if cl.bound != nil {
			cl.s.live.End(cl.bound, live.EndDied)
		}
		if cl.res != nil {
			cl.res.Release()
		}
	}
	for i := len(cl.ends) - 1; i >= 0; i-- {
		cl.ends[i]()
	}
	if cl.endTurn != nil {
		cl.endTurn()
	}
}
