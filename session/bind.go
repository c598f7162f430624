package session

import (
	"cmp"
	"context"
	"fmt"

	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/live"
	"github.com/kilnsh/kiln/store"
)

// bind decides where the call runs: in its session's live sandbox when it has one that
// serves it, else in a fresh sandbox that may stay with the session (prepare); and
// whether the call leaves its state to the capture after its answer (defers).
func (cl *call) bind() error {
	s, x := cl.s, &cl.x
	cl.liveRun = s.prepare(cl.ctx, cl.sess, cl.req.Stateless, x)
	if cl.refit != nil {
		gone, err := s.endRefit(&cl.liveRun)
		if err != nil {
			return err
		}
		if gone != "" {
			cl.lost = *lostNote(cl.lost, &gone)
		}
	}
	cl.deferred = s.defers(&cl.liveRun, x)
	if x.ReadOnly && cl.bound != nil {
		// kiln's own read of the live namespace (a completion): it binds nothing, so nothing
		// is captured after it and the stored state is not touched.
		cl.deferred, cl.readOnly = false, true
		x.CaptureState = false
	}
	if cl.deferred {
		x.CaptureState = false // the REPL captures at the flush
	}
	return nil
}

// Where a session's call ran (ExecResult.RuntimeStatus).
const (
	RuntimeNew     = "new"     // the call made the session
	RuntimeReused  = "reused"  // in the session's live sandbox: no restore, no new sandbox
	RuntimeResumed = "resumed" // in a fresh sandbox, from the session's stored state and files
)

// liveRun is what a call does with live sandboxes: whether it may keep its sandbox for
// the session (live), the session's sandbox it was lent (bound), and how it ran.
type liveRun struct {
	live   bool
	bound  *binding
	status string
	// deferred: the call captures nothing, its state is left to a flush (flush.go).
	deferred bool
	// readOnly: kiln's own read of the live namespace; the sandbox goes back as it was.
	readOnly bool
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

// prepare decides where the call runs. A Python call of a session that keeps its state
// runs in the session's live sandbox when it has one, with no state sent (the namespace
// is there) and, as its state base, the token of the capture the store holds.
func (s *Service) prepare(ctx context.Context, sess *store.Session, stateless bool, req *executor.Request) liveRun {
	run := liveRun{status: RuntimeNew}
	if sess != nil {
		run.status = RuntimeResumed
	}
	run.live = s.live != nil && !stateless && req.Lang == execution.LangPython && req.CaptureState
	if !run.live {
		return run
	}
	if sess != nil {
		run.bound = s.live.Take(sess.ID)
		if run.bound != nil {
			if _, ok := s.current(ctx, run.bound, sess); !ok {
				// Another instance ran the session since: this namespace is older than its state.
				s.live.End(run.bound, live.EndStale)
				run.bound = nil
			}
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
func (s *Service) fitsLive(b *binding, req *executor.Request) bool {
	if !s.limits.FixedSize {
		return true
	}
	cpu, mb := s.limits.DefaultMilliCPU, s.limits.DefaultMemoryMB
	return cmp.Or(req.MilliCPU, cpu) == cmp.Or(b.MilliCPU, cpu) && cmp.Or(req.MemoryMB, mb) == cmp.Or(b.MemoryMB, mb)
}

// endRefit ends the live sandbox that cannot serve the call at its size (liveRun.refit),
// its pending namespace captured first: the call resumes from that state. It returns what
// the call's answer must say is gone: what the capture left out, which only that sandbox
// held.
func (s *Service) endRefit(run *liveRun) (string, error) {
	if run.refit.Pending {
		if err := s.flush(run.refit); err != nil {
			s.lostCapture(run.refit, err)
			s.live.End(run.refit, failedFlushEnd(err))
			return "", fmt.Errorf("capturing the session's state before a call of another size: %w", err)
		}
	}
	gone := ""
	if run.refit.StateNotes != "" {
		gone = goneWith(run.refit, "for a sandbox of this call's size")
	}
	s.live.End(run.refit, live.EndDiscard)
	return gone, nil
}

// defers says whether a call captures nothing and leaves its state to the capture after
// its answer: one in the session's live sandbox (the session has a stored state, or none
// to keep, from its first call), that keeps what it bound on an error (a rollback needs
// the state before the call stored).
func (s *Service) defers(run *liveRun, req *executor.Request) bool {
	if s.stateDelay <= 0 || run.bound == nil || s.strict.Load() {
		return false
	}
	if req.OnError == execution.OnErrorRollback || (req.OnError == "" && s.rollbackDefault) {
		return false
	}
	return true
}
