package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/kilnsh/kiln/store"
)

// State returns a session's state blob and the session: the newest, once a pending live
// namespace is stored (Settle).
func (s *Service) State(ctx context.Context, c Caller, sid string) ([]byte, *store.Session, error) {
	sess, err := s.Settle(ctx, c, sid)
	if err != nil {
		return nil, nil, err
	}
	blob, err := s.store.State(ctx, sid)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, sess, errNotFound("state")
		}
		return nil, nil, fmt.Errorf("load state: %w", err)
	}
	return blob, sess, nil
}

// PutState makes blob, checked first, the state of a session the caller owns. It waits
// for the session's turn, and ends its live sandbox: the next call starts from blob.
func (s *Service) PutState(ctx context.Context, c Caller, sid string, blob []byte) (*store.Session, error) {
	sess, err := s.Session(ctx, c, sid)
	if err != nil {
		return nil, err
	}
	if err := s.checkState(blob); err != nil {
		return nil, err
	}
	if err := s.checkQuota(ctx, c, int64(len(blob)), sess.StateSize); err != nil {
		return nil, err
	}
	sess, release, err := s.turn(ctx, c, sess)
	if err != nil {
		return nil, err
	}
	defer release()
	if sess == nil {
		return nil, errNotFound("session")
	}
	s.dropLive(sess.ID)
	if err := s.store.PutState(ctx, sess.ID, blob); err != nil {
		return nil, fmt.Errorf("save state: %w", err)
	}
	if err := s.store.TouchSession(ctx, sess.ID, s.now()); err != nil {
		return nil, fmt.Errorf("touch session: %w", err)
	}
	return s.store.Session(ctx, sess.ID)
}

// DeleteState removes a session's state, and ends its live sandbox, whose namespace held it.
func (s *Service) DeleteState(ctx context.Context, c Caller, sid string) error {
	sess, err := s.Session(ctx, c, sid)
	if err != nil {
		return err
	}
	sess, release, err := s.turn(ctx, c, sess)
	if err != nil {
		return err
	}
	defer release()
	if sess == nil {
		return errNotFound("session")
	}
	s.dropLive(sid)
	if err := s.store.DeleteState(ctx, sid); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("delete state: %w", err)
	}
	return nil
}

// Settle returns a session the caller owns, its live namespace stored first when a call
// answered before storing it (state_pending): what is read of the state is then the
// newest. It waits for the session's turn when there is something to store.
func (s *Service) Settle(ctx context.Context, c Caller, sid string) (*store.Session, error) {
	sess, err := s.Session(ctx, c, sid)
	if err != nil || s.live == nil || s.stateDelay <= 0 || !s.live.IsPending(sid) {
		return sess, err
	}
	sess, release, err := s.turn(ctx, c, sess)
	if err != nil || sess == nil {
		if release != nil {
			release()
		}
		if err == nil {
			err = errNotFound("session")
		}
		return nil, err
	}
	defer release()
	s.flushIdle(sid)
	return s.Session(ctx, c, sid)
}
