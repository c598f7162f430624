package session

import (
	"maps"

	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/live"
)

// settle keeps the call's sandbox for the session's next call, or ends it (settleLive);
// a sandbox kept with its namespace ahead of kiln's capture (a deferred call) gets the
// session's turn, for the capture that follows the answer.
func (cl *call) settle() {
	if cl.s.settleLive(&cl.liveRun, &cl.x, cl.res, cl.out, cl.in.ids) {
		go cl.s.captureAfter(cl.out.Session.ID, cl.endTurn)
		cl.endTurn = nil
	}
}

// settleLive keeps the call's sandbox for the session's next call, or ends it. It stays only
// when it answered and its namespace is what kiln holds: not after a rollback, which left
// the namespace ahead of the stored state. ids are the session's files it holds. It
// reports whether the sandbox stays with its namespace ahead of kiln's capture (a
// deferred call): the capture follows, in the session's turn.
func (s *Service) settleLive(run *liveRun, req *executor.Request, res *executor.Result, out *ExecResult, ids map[string]string) bool {
	if !run.live {
		return false
	}
	if run.readOnly {
		if res.Reusable {
			s.live.Put(run.bound)
		} else {
			s.live.End(run.bound, live.EndDied)
		}
		return false
	}
	rolledBack := res.Status != execution.StatusOK && !res.StateFromRun
	if !res.Reusable || rolledBack {
		reason := live.EndDied
		if rolledBack && res.Reusable {
			reason = live.EndDiscard
		}
		if run.bound != nil {
			s.live.End(run.bound, reason)
		}
		return false
	}
	b := run.bound
	if b == nil {
		sb := res.Keep()
		if sb == nil {
			return false
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
	if run.deferred {
		// The state kiln holds and its token stay those of the last capture; the namespace
		// is ahead until the capture that follows.
		b.Pending = true
		s.live.Put(b)
		return true
	}
	b.StateSHA256 = out.Session.StateSHA256 // stored before the answer
	captured(b, res)
	s.live.Put(b)
	return false
}

// captured records in b the capture res made and kiln now holds: its token, the next
// call's base, and what it left out; b's namespace is no longer ahead of it.
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
