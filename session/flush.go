package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/live"
)

// A live call answers before its state is stored when the session keeps its sandbox
// (Config.StateSaveDelay): the REPL captures nothing during the call, the answer says
// state_pending, and a flush stores the namespace once the session has had no call for
// the delay, or before its sandbox ends. A call of the session that comes meanwhile runs
// in the same namespace at once; one that comes during a flush waits for it.

// flushTimeout bounds one flush: the capture of a state at its caps, and its storing.
const flushTimeout = 2 * time.Minute

// defers says whether a call captures nothing and leaves its state to a flush: one in
// the session's live sandbox (the session has a stored state, or none to keep, from its
// first call), that keeps what it bound on an error (a rollback needs the state before
// the call stored).
func (s *Service) defers(run *liveRun, req ExecRequest) bool {
	if s.stateDelay <= 0 || run.bound == nil || s.strict.Load() {
		return false
	}
	if req.OnError == executor.OnErrorRollback || (req.OnError == "" && s.rollbackDefault) {
		return false
	}
	return true
}

// flushes are the sessions whose pending namespace waits for its flush: one timer each,
// which every call of the session pushes back, within ten delays of the first pending
// call (a session whose calls never pause is still stored that often).
type flushes struct {
	mu     sync.Mutex
	timers map[string]*pendingFlush
}

type pendingFlush struct {
	timer *time.Timer
	limit time.Time // the flush comes by then, whatever the calls
}

// scheduleFlush stores the session's pending namespace once it has had no call for the
// delay (or at its limit): a call that comes first pushes the flush back.
func (s *Service) scheduleFlush(sid string) {
	s.flushes.mu.Lock()
	defer s.flushes.mu.Unlock()
	if s.flushes.timers == nil {
		s.flushes.timers = map[string]*pendingFlush{}
	}
	now := s.now()
	if p := s.flushes.timers[sid]; p != nil {
		p.timer.Reset(min(s.stateDelay, max(p.limit.Sub(now), 0)))
		return
	}
	p := &pendingFlush{limit: now.Add(10 * s.stateDelay)}
	p.timer = time.AfterFunc(s.stateDelay, func() {
		s.flushes.mu.Lock()
		if s.flushes.timers[sid] == p {
			delete(s.flushes.timers, sid)
		}
		s.flushes.mu.Unlock()
		release, _, err := s.turns.acquire(context.Background(), sid, 0)
		if err != nil {
			return // a call of the session runs: it schedules the flush again
		}
		defer release()
		s.flushIdle(sid)
	})
	s.flushes.timers[sid] = p
}

// flushIdle stores the session's live namespace when it is pending and idle. The caller
// holds the session's turn.
func (s *Service) flushIdle(sid string) {
	b := s.live.TakePending(sid)
	if b == nil {
		return
	}
	if err := s.flush(b); err != nil {
		s.log.Warn("a live session's state could not be stored: its sandbox ends", "session", sid, "err", err)
		s.live.End(b, failedFlushEnd(err))
		return
	}
	s.live.Put(b)
}

// flushEnding stores a pending namespace whose sandbox ends (live.Registry.SetFlush): it
// waits for the session's turn, and stores nothing if the session's stored state changed
// meanwhile (a call resumed it from the store: that state is newer than this namespace).
func (s *Service) flushEnding(b *live.Binding) {
	release, _, err := s.turns.acquire(context.Background(), b.Session, s.turnWait)
	if err != nil {
		s.log.Warn("a live session's state could not be stored before its sandbox ended: its turn did not come",
			"session", b.Session, "err", err)
		return
	}
	defer release()
	if err := s.flush(b); err != nil {
		s.log.Warn("a live session's state could not be stored before its sandbox ended", "session", b.Session, "err", err)
	}
}

// failedFlushEnd is why a live sandbox whose flush failed with err ends: stale when its
// session's stored state changed elsewhere, else died.
func failedFlushEnd(err error) string {
	if errors.Is(err, errFlushStale) {
		return live.EndStale
	}
	return live.EndDied
}

// errFlushStale is a flush of a namespace whose session's stored state is no longer the
// one it was based on.
var errFlushStale = errors.New("the session's stored state changed since its live sandbox last served it")

// flush captures b's namespace and stores it as its session's state; b is no longer
// pending after. The caller holds the session's turn. Each flush is counted by how it went.
func (s *Service) flush(b *live.Binding) error {
	outcome, err := s.flushOnce(b)
	s.live.CountFlush(outcome)
	return err
}

func (s *Service) flushOnce(b *live.Binding) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	sess, err := s.store.Session(ctx, b.Session)
	if err != nil {
		return live.FlushFailed, fmt.Errorf("flush: %w", err)
	}
	if sess.StateSHA256 != b.StateSHA256 {
		return live.FlushStale, errFlushStale
	}
	req := executor.Request{Lang: executor.LangPython, CaptureState: true, Live: true, Flush: true,
		Sandbox: b.Sandbox, StateBase: b.StateToken, Owner: b.Owner, ExecutionID: kiln.NewID(),
		MilliCPU: b.MilliCPU, MemoryMB: b.MemoryMB}
	if err := s.validate(&req); err != nil {
		return live.FlushFailed, fmt.Errorf("flush: %w", err)
	}
	res, err := s.capture.Run(ctx, req)
	if err != nil {
		return live.FlushFailed, fmt.Errorf("flush: %w", err)
	}
	defer res.Release() // the sandbox came with the request: nothing to give back
	if !res.Reusable || res.Status != executor.StatusOK {
		return live.FlushFailed, fmt.Errorf("flush: the sandbox did not answer the capture (%s)", res.Status)
	}
	changed, err := s.saveState(ctx, sess, req, res)
	if err != nil {
		return live.FlushFailed, err
	}
	if changed {
		if sess, err = s.store.Session(ctx, b.Session); err != nil {
			return live.FlushFailed, fmt.Errorf("flush: %w", err)
		}
	}
	b.StateSHA256, b.Memory = sess.StateSHA256, res.MemoryBytes
	captured(b, res)
	if !changed {
		return live.FlushUnchanged, nil
	}
	return live.FlushStored, nil
}

// StoreAll makes every call from now on store its state before it answers, and stores
// the pending namespaces of the live sessions, each in its turn: kiln drains, and the
// other replicas are about to resume its sessions from the store. It returns when they
// are stored, or ctx ends.
func (s *Service) StoreAll(ctx context.Context) {
	s.strict.Store(true)
	if s.live == nil {
		return
	}
	for _, sid := range s.live.PendingSessions() {
		release, _, err := s.turns.acquire(ctx, sid, s.turnWait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		s.flushIdle(sid)
		release()
	}
}
