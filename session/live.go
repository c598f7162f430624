package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/live"
	"github.com/kilnsh/kiln/store"
)

// Where a session's call ran (ExecResult.RuntimeStatus).
const (
	RuntimeNew     = "new"     // the call made the session
	RuntimeReused  = "reused"  // in the session's live sandbox: no restore, no new sandbox
	RuntimeResumed = "resumed" // in a fresh sandbox, from the session's stored state and files
)

// errTurnTimeout is a call that waited its session's turn for the whole queue timeout.
var errTurnTimeout = errors.New("the session's turn did not come")

// Live is the registry of live sessions' sandboxes.
type Live = live.Registry

type binding = live.Binding

// liveRun is what a call does with live sandboxes: whether it may keep its sandbox for
// the session (live), the session's sandbox it was lent (bound), and how it ran.
type liveRun struct {
	live   bool
	bound  *binding
	status string
	// deferred: the call captures nothing, its state is left to a flush (flush.go).
	deferred bool
	// refit is the session's live sandbox when it has not the size the call asks for and
	// cannot be resized (Limits.FixedSize): it ends before the call resumes elsewhere.
	refit *binding
}

// held is what the call's sandbox holds of the session's files already.
func (r *liveRun) held() map[string]string {
	if r.bound == nil {
		return nil
	}
	return r.bound.Files
}

// turn waits for the session's turn. A call that had to wait reads the session again: the
// call before it may have changed it, or deleted it (then this call makes a new one).
func (s *Service) turn(ctx context.Context, c Caller, sess *store.Session) (*store.Session, func(), error) {
	release, waited, err := s.turns.acquire(ctx, sess.ID, s.turnWait)
	if errors.Is(err, errTurnTimeout) {
		return nil, nil, &kiln.Error{Code: kiln.CodeBusy, RetryAfter: s.retryAfter, Message: fmt.Sprintf(
			"session %s is busy: another call of it ran for the whole queue timeout; retry later", sess.ID)}
	}
	if err != nil {
		return nil, nil, err
	}
	if waited {
		again, err := s.Session(ctx, c, sess.ID)
		if kiln.ErrorCode(err) == kiln.CodeNotFound {
			return nil, release, nil
		}
		if err != nil {
			release()
			return nil, nil, err
		}
		sess = again
	}
	return sess, release, nil
}

// prepare decides where the call runs. A Python call of a session that keeps its state
// runs in the session's live sandbox when it has one, with no state sent (the namespace
// is there) and, as its state base, the token of the capture the store holds.
func (s *Service) prepare(sess *store.Session, req *ExecRequest) *liveRun {
	run := &liveRun{status: RuntimeNew}
	if sess != nil {
		run.status = RuntimeResumed
	}
	run.live = s.live != nil && !req.Stateless && req.Lang == executor.LangPython && req.CaptureState
	if !run.live {
		return run
	}
	if sess != nil {
		run.bound = s.live.Take(sess.ID)
		if run.bound != nil && run.bound.StateSHA256 != sess.StateSHA256 {
			// Another instance ran the session since: this namespace is older than its state.
			s.live.End(run.bound, live.EndStale)
			run.bound = nil
		}
		if run.bound != nil && !s.fitsLive(run.bound, req) {
			run.refit, run.bound = run.bound, nil
		}
		if run.bound != nil {
			run.status = RuntimeReused
			req.Sandbox, req.StateBase = run.bound.Sandbox, run.bound.StateToken
		}
	}
	req.Live = true
	s.live.Count(run.status)
	return run
}

// fitsLive says whether the live sandbox b can serve req as it is sized, or be resized to.
func (s *Service) fitsLive(b *binding, req *ExecRequest) bool {
	if !s.limits.FixedSize {
		return true
	}
	cpu, mb := s.limits.DefaultMilliCPU, s.limits.DefaultMemoryMB
	return cmp.Or(req.MilliCPU, cpu) == cmp.Or(b.MilliCPU, cpu) && cmp.Or(req.MemoryMB, mb) == cmp.Or(b.MemoryMB, mb)
}

// endRefit ends the live sandbox that cannot serve the call at its size (liveRun.refit),
// its pending namespace stored first: the call resumes from the store.
func (s *Service) endRefit(run *liveRun) error {
	if run.refit.Pending {
		if err := s.flush(run.refit); err != nil {
			s.live.End(run.refit, failedFlushEnd(err))
			return fmt.Errorf("storing the session's state before a call of another size: %w", err)
		}
	}
	s.live.End(run.refit, live.EndDiscard)
	return nil
}

// settle keeps the call's sandbox for the session's next call, or ends it. It stays only
// when it answered and its namespace is what the store holds: not after a rollback, which
// left the namespace ahead of the stored state. ids are the session's files it holds.
func (s *Service) settle(run *liveRun, req ExecRequest, res *executor.Result, out *ExecResult, ids map[string]string) {
	if !run.live {
		return
	}
	rolledBack := res.Status != executor.StatusOK && !res.StateFromRun
	if !res.Reusable || rolledBack {
		reason := live.EndDied
		if rolledBack && res.Reusable {
			reason = live.EndDiscard
		}
		if run.bound != nil {
			s.live.End(run.bound, reason)
		}
		return
	}
	b := run.bound
	if b == nil {
		sb := res.Keep()
		if sb == nil {
			return
		}
		b = &binding{Session: out.Session.ID, Sandbox: sb, Owner: req.Owner} // its caller's share
	}
	files := maps.Clone(ids)
	if b.Files != nil {
		files = maps.Clone(b.Files)
		maps.Copy(files, ids)
		for _, name := range req.DeleteFiles {
			delete(files, name)
		}
	}
	for _, f := range out.Files {
		files[f.Name] = f.ID
	}
	for _, f := range out.Inherited {
		delete(files, f.Path) // the sandbox holds the run's change: the original goes back next time
	}
	for _, name := range res.DeletedFiles {
		delete(files, name)
	}
	b.Files, b.Memory, b.MilliCPU, b.MemoryMB = files, res.MemoryBytes, req.MilliCPU, req.MemoryMB
	b.StateSHA256 = out.Session.StateSHA256
	if run.deferred {
		// The stored state and its token stay those of the last flush; the namespace is ahead.
		b.Pending = true
		s.live.Put(b)
		s.scheduleFlush(b.Session)
		return
	}
	captured(b, res)
	s.live.Put(b)
}

// captured records in b the capture res made and the store now holds: its token, the
// next call's base, and what it left out; b's namespace is no longer ahead of it.
func captured(b *binding, res *executor.Result) {
	b.StateToken, b.Pending, b.StateNotes = res.StateToken, false, ""
	switch {
	case res.StateError == nil:
	case res.StateFromRun:
		b.StateNotes = *res.StateError
	default:
		b.StateToken = "" // the store kept an older state than the namespace: no base
	}
}

// settleFailed ends the sandbox a call was lent when the call failed before its answer:
// what its namespace holds is no longer known.
func (s *Service) settleFailed(run *liveRun) {
	if run.bound != nil {
		s.live.End(run.bound, live.EndDied)
	}
}

// dropLive ends a session's live sandbox, when it has one: its stored state changed
// under it, or it was deleted.
func (s *Service) dropLive(sid string) {
	if s.live != nil {
		s.live.Drop(sid, live.EndDiscard)
	}
}
