package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kilnsh/kiln/live"
	"github.com/kilnsh/kiln/store"
)

// pendingStates are the live sessions' captures that the store does not hold yet: at
// most one per session, the newest, each written by the time its first call's answer is
// StateSaveDelay old (a call that comes meanwhile replaces the blob, never the time).
// Their blobs together are bounded by max: a capture past it is stored at once.
type pendingStates struct {
	mu    sync.Mutex
	m     map[string]*pendingState
	bytes int64
	max   int64
}

// pendingState is one session's. write is held while its state is written, so that the
// session's stores happen one at a time and in order; the rest is guarded by
// pendingStates.mu.
type pendingState struct {
	write sync.Mutex

	held  bool   // a capture waits: blob, or drop
	blob  []byte // the capture's state
	drop  bool   // the capture holds nothing to keep: the stored state goes
	base  string // the digest of the stored state the capture replaces ("" for none)
	due   time.Time
	timer *time.Timer
	// writing is the base of the capture being written, while it is: the store still
	// holds that state until the write ends.
	writing   string
	isWriting bool
	lost      string // what the session lost since its last call, for that call's answer
}

// offer makes blob (or, with drop, no state) the session's pending capture, replacing the
// stored state whose digest is base, due in the store by due: storeDue is called then. It
// reports whether the captures held went past max (the caller stores this one now).
func (p *pendingStates) offer(sid string, blob []byte, drop bool, base string, due time.Time, storeDue func(string)) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.entryLocked(sid)
	if ps.held {
		p.bytes -= int64(len(ps.blob))
	} else {
		ps.base, ps.due = base, due // what the store holds now: the older capture was written
		wait := max(time.Until(due), 0)
		if ps.timer == nil {
			ps.timer = time.AfterFunc(wait, func() { storeDue(sid) })
		} else {
			ps.timer.Reset(wait)
		}
	}
	ps.held, ps.blob, ps.drop = true, blob, drop
	p.bytes += int64(len(blob))
	return p.max > 0 && p.bytes > p.max
}

// replaces reports whether the store holding digest sha for the session is what its
// pending capture replaces: the capture waits for its store, or is being written.
func (p *pendingStates) replaces(sid, sha string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.m[sid]
	return ps != nil && (ps.held && ps.base == sha || ps.isWriting && ps.writing == sha)
}

// has reports whether the session has a capture waiting for its store.
func (p *pendingStates) has(sid string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.m[sid]
	return ps != nil && (ps.held || ps.isWriting)
}

// sessions lists the sessions with a capture waiting for its store.
func (p *pendingStates) sessions() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for sid, ps := range p.m {
		if ps.held || ps.isWriting {
			out = append(out, sid)
		}
	}
	return out
}

// get returns the session's pendingState, nil for none.
func (p *pendingStates) get(sid string) *pendingState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[sid]
}

// take hands the capture of ps to its writer, which holds ps.write.
func (p *pendingStates) take(sid string, ps *pendingState) (blob []byte, drop bool, base string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m[sid] != ps || !ps.held {
		return nil, false, "", false
	}
	blob, drop, base = ps.blob, ps.drop, ps.base
	ps.held, ps.blob, ps.drop = false, nil, false
	ps.writing, ps.isWriting = base, true
	p.bytes -= int64(len(blob))
	ps.timer.Stop()
	return blob, drop, base, true
}

// written ends the write of a capture of ps. One that failed is held again (unless a
// newer one came meanwhile), to be written after another delay; a session with nothing
// left to write or tell is forgotten.
func (p *pendingStates) written(sid string, ps *pendingState, blob []byte, drop bool, base string, delay time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps.writing, ps.isWriting = "", false
	if err != nil && !ps.held && p.m[sid] == ps {
		ps.held, ps.blob, ps.drop, ps.base = true, blob, drop, base
		p.bytes += int64(len(blob))
		ps.timer.Reset(delay)
	}
	if !ps.held && ps.lost == "" && p.m[sid] == ps {
		delete(p.m, sid)
	}
}

// discard forgets the session's pending capture: its state was put, deleted or the
// session went. It waits for a write under way.
func (p *pendingStates) discard(sid string) {
	ps := p.get(sid)
	if ps == nil {
		return
	}
	ps.write.Lock()
	defer ps.write.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m[sid] != ps {
		return
	}
	if ps.held {
		p.bytes -= int64(len(ps.blob))
	}
	if ps.timer != nil {
		ps.timer.Stop()
	}
	delete(p.m, sid)
}

// entryLocked returns the session's pendingState, made when it has none; p.mu is held.
func (p *pendingStates) entryLocked(sid string) *pendingState {
	if p.m == nil {
		p.m = map[string]*pendingState{}
	}
	ps := p.m[sid]
	if ps == nil {
		ps = &pendingState{}
		p.m[sid] = ps
	}
	return ps
}

// lose records what the session lost, for its next call's answer.
func (p *pendingStates) lose(sid, note string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.entryLocked(sid)
	ps.lost = note
}

// takeLost returns what the session lost since its last call ("" for nothing), once.
func (p *pendingStates) takeLost(sid string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.m[sid]
	if ps == nil {
		return ""
	}
	lost := ps.lost
	ps.lost = ""
	if !ps.held && !ps.isWriting {
		delete(p.m, sid)
	}
	return lost
}

// storePending writes the session's pending capture to the store now, after any write
// of it under way; it reports whether it wrote. A write that fails keeps the capture
// for another try.
func (s *Service) storePending(sid string) (bool, error) {
	ps := s.pending.get(sid)
	if ps == nil {
		return false, nil
	}
	ps.write.Lock()
	defer ps.write.Unlock()
	blob, drop, base, ok := s.pending.take(sid, ps)
	if !ok {
		return false, nil
	}
	wrote, err := s.writeState(sid, blob, drop, base)
	s.pending.written(sid, ps, blob, drop, base, s.stateDelay, err)
	return wrote, err
}

// storeDue is a pending capture's timer.
func (s *Service) storeDue(sid string) {
	if _, err := s.storePending(sid); err != nil {
		s.log.Warn("a live session's captured state could not be stored: kiln tries again", "session", sid, "err", err)
	}
}

// writeState stores a capture that replaces the stored state whose digest is base. It
// writes nothing when the session is gone, or when its stored state is another one by
// now (another replica resumed the session and stored a newer state).
func (s *Service) writeState(sid string, blob []byte, drop bool, base string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	sess, err := s.store.Session(ctx, sid)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store the captured state: %w", err)
	}
	if sess.StateSHA256 != base {
		s.log.Warn("a live session's captured state is not stored: its stored state changed elsewhere", "session", sid)
		s.live.CountFlush(live.FlushStale)
		return false, nil
	}
	switch {
	case !drop:
		err = s.store.PutState(ctx, sid, blob)
	case sess.HasState:
		err = s.store.DeleteState(ctx, sid)
	default:
		return false, nil
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return false, fmt.Errorf("store the captured state: %w", err)
	}
	return true, nil
}

// current reports whether the session's stored state (sess's, read again once when it
// looks otherwise) is one b's namespace left with kiln: the one it captured last, or the
// one that capture replaces while it waits for its store. It returns the session as read.
func (s *Service) current(ctx context.Context, b *live.Binding, sess *store.Session) (*store.Session, bool) {
	for try := 0; ; try++ {
		if sess.StateSHA256 == b.StateSHA256 || s.pending.replaces(b.Session, sess.StateSHA256) {
			return sess, true
		}
		if try > 0 {
			return sess, false
		}
		// A write of the pending capture may have ended between the read and the check.
		again, err := s.store.Session(ctx, b.Session)
		if err != nil {
			return sess, false
		}
		sess = again
	}
}

// digest is a state blob's digest as the store writes it.
func digest(blob []byte) string {
	sum := sha256.Sum256(blob)
	return hex.EncodeToString(sum[:])
}
