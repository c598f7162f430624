package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/live"
)

// A call in its session's live sandbox answers before its state is captured when
// Config.StateSaveDelay is set: the REPL captures nothing while the call runs, and the
// answer says state_pending. The session's turn then passes to a capture of the
// namespace in the same sandbox (captureAfter), so the session's next call waits for it.
// Once a call has answered, nothing its sandbox does later (a crash, os._exit, an
// out-of-memory or hard-deadline kill) can take what the call bound: the capture is
// kiln's, held in memory (pending.go) and stored within the delay of the answer, whatever
// calls come meanwhile. Whatever reads or writes the stored state stores it first.

// flushTimeout bounds one capture of a state at its caps, and one store of it.
const flushTimeout = 2 * time.Minute

// captureAfter runs once a deferred call has answered, with the session's turn the call
// handed over: it captures the namespace the call left, then ends the turn.
func (s *Service) captureAfter(sid string, release func()) {
	defer release()
	s.captureIdle(sid)
}

// captureIdle captures the namespace of the session's idle live sandbox when it is ahead
// of kiln's capture (pending). A capture that fails ends the sandbox; the session's next
// call is told what was lost. The caller holds the session's turn.
func (s *Service) captureIdle(sid string) {
	b := s.live.TakePending(sid)
	if b == nil {
		return
	}
	if err := s.flush(b); err != nil {
		s.log.Warn("a live session's namespace could not be captured: its sandbox ends", "session", sid, "err", err)
		s.lostCapture(b, err)
		s.live.End(b, failedFlushEnd(err))
		return
	}
	s.live.Put(b)
}

// lostCapture records that b's namespace was not captured: what the calls answered since
// the last capture bound is gone, and the session's next call says so.
func (s *Service) lostCapture(b *live.Binding, err error) {
	b.Pending = false
	why := "its sandbox ended before kiln captured it"
	if errors.Is(err, errFlushStale) {
		why = "the session's stored state was changed elsewhere meanwhile"
	} else if err != nil {
		why = "its capture failed: " + err.Error()
	}
	s.pending.lose(b.Session, "the names the session's last call bound are not kept ("+why+
		"): the session went on from the state kiln held before that call")
}

// flushEnding hears of a live sandbox that ends pending or holding names its last capture
// left out (live.Registry.SetFlush): when the sandbox can still answer, a pending
// namespace is captured and stored in the session's turn; when it died, what it held
// since its last capture is lost. What no capture kept goes with the sandbox, and the
// session's next call says so.
func (s *Service) flushEnding(b *live.Binding, reason string) {
	switch {
	case reason == live.EndDiscard:
		return // its session let it go: nothing of it is wanted
	case !b.Pending:
		s.pending.lose(b.Session, goneWith(b, reason))
		return
	case !live.Answers(reason):
		s.lostCapture(b, nil)
		return
	}
	release, _, err := s.turns.acquire(context.Background(), b.Session, s.turnWait)
	if err != nil {
		s.log.Warn("a live session's state could not be captured before its sandbox ended: its turn did not come",
			"session", b.Session, "err", err)
		s.lostCapture(b, err)
		return
	}
	defer release()
	if err := s.flush(b); err != nil {
		s.log.Warn("a live session's state could not be captured before its sandbox ended", "session", b.Session, "err", err)
		s.lostCapture(b, err)
		return
	}
	if _, err := s.storePending(b.Session); err != nil {
		s.log.Warn("a live session's captured state could not be stored yet", "session", b.Session, "err", err)
	}
	if b.StateNotes != "" {
		s.pending.lose(b.Session, goneWith(b, reason))
	}
}

// goneWith is what the session's next call says of the names b's last capture left out,
// which only its sandbox held, once that sandbox has ended for reason.
func goneWith(b *live.Binding, reason string) string {
	return "the session's live sandbox ended (" + reason + ") with what its state left out (" + b.StateNotes + ")"
}

// failedFlushEnd is why a live sandbox whose capture failed with err ends: stale when its
// session's stored state changed elsewhere, else died.
func failedFlushEnd(err error) string {
	if errors.Is(err, errFlushStale) {
		return live.EndStale
	}
	return live.EndDied
}

// errFlushStale is a capture of a namespace whose session's stored state is no longer
// one it left with kiln.
var errFlushStale = errors.New("the session's stored state changed since its live sandbox last served it")

// flush captures b's namespace into the session's pending state; b is no longer pending
// after. The caller holds the session's turn. Each capture is counted by how it went.
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
		return live.FlushFailed, fmt.Errorf("capture: %w", err)
	}
	if _, ok := s.current(ctx, b, sess); !ok {
		return live.FlushStale, errFlushStale
	}
	req := executor.Request{Request: execution.Request{Lang: execution.LangPython, CaptureState: true, ExecutionID: kiln.NewID(), MilliCPU: b.MilliCPU, MemoryMB: b.MemoryMB}, Live: true, Flush: true, Sandbox: b.Sandbox, StateBase: b.StateToken, Owner: b.Owner}
	if err := s.validate(&req); err != nil {
		return live.FlushFailed, fmt.Errorf("capture: %w", err)
	}
	answered := s.now()
	res, err := s.capture.Run(ctx, req)
	if err != nil {
		return live.FlushFailed, fmt.Errorf("capture: %w", err)
	}
	defer res.Release() // the sandbox came with the request: nothing to give back
	if !res.Reusable || res.Status != execution.StatusOK {
		return live.FlushFailed, fmt.Errorf("capture: the sandbox did not answer it (%s)", res.Status)
	}
	outcome := live.FlushUnchanged
	var full bool
	switch {
	case res.StateUnchanged: // the capture kiln holds already
	case res.State != nil:
		full = s.pending.offer(b.Session, res.State, false, b.StateSHA256, answered.Add(s.stateDelay), s.storeDue)
		b.StateSHA256, outcome = digest(res.State), live.FlushStored
	case res.StateFromRun && b.StateSHA256 != "": // the namespace holds nothing to keep any more
		full = s.pending.offer(b.Session, nil, true, b.StateSHA256, answered.Add(s.stateDelay), s.storeDue)
		b.StateSHA256, outcome = "", live.FlushStored
	}
	b.Memory = res.MemoryBytes
	captured(b, res)
	if full {
		// Past what kiln holds for all sessions together: this one is stored now.
		if _, err := s.storePending(b.Session); err != nil {
			s.log.Warn("a live session's captured state could not be stored yet", "session", b.Session, "err", err)
		}
	}
	return outcome, nil
}

// storeNewest makes the store hold the session's newest state: the namespace of its idle
// live sandbox captured when it is ahead, and the capture that waits stored. It reports
// whether it wrote. The caller holds the session's turn.
func (s *Service) storeNewest(sid string) (bool, error) {
	if s.live == nil {
		return false, nil
	}
	s.captureIdle(sid)
	return s.storePending(sid)
}

// StoreAll makes every call from now on store its state before it answers, and stores
// the pending states of the live sessions, each in its turn: kiln drains, and the other
// replicas are about to resume its sessions from the store. It returns when they are
// stored, or ctx ends.
func (s *Service) StoreAll(ctx context.Context) {
	s.strict.Store(true)
	if s.live == nil {
		return
	}
	sids := s.live.PendingSessions()
	sids = append(sids, s.pending.sessions()...)
	for _, sid := range sids {
		release, _, err := s.turns.acquire(ctx, sid, s.turnWait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		if _, err := s.storeNewest(sid); err != nil {
			s.log.Warn("a live session's state could not be stored at the drain", "session", sid, "err", err)
		}
		release()
	}
}

// lostNote joins what the session lost since its last call (pendingStates.lose) to a
// call's state_error.
func lostNote(lost string, stateError *string) *string {
	if lost == "" {
		return stateError
	}
	if stateError != nil && *stateError != "" {
		lost = strings.Join([]string{lost, *stateError}, "; ")
	}
	return &lost
}
