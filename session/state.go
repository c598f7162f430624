package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/kilnsh/kiln/store"
)

// State returns a session's state blob and the session: the newest, once a pending live
// namespace is stored (Stored).
func (s *Service) State(ctx context.Context, c Caller, sid string) ([]byte, *store.Session, error) {
	sess, err := s.Stored(ctx, c, sid)
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
	var out *store.Session
	err := s.withTurn(ctx, c, sid, func(sess *store.Session) error {
		if err := s.checkState(blob); err != nil {
			return err
		}
		if err := s.checkQuota(ctx, c, int64(len(blob)), sess.StateSize); err != nil {
			return err
		}
		s.dropLive(sid)
		s.pending.discard(sid)
		if err := s.store.PutState(ctx, sid, blob); err != nil {
			return fmt.Errorf("save state: %w", err)
		}
		if err := s.store.TouchSession(ctx, sid, s.now()); err != nil {
			return fmt.Errorf("touch session: %w", err)
		}
		var err error
		out, err = s.store.Session(ctx, sid)
		return err
	})
	return out, err
}

// DeleteState removes a session's state, and ends its live sandbox, whose namespace held it.
func (s *Service) DeleteState(ctx context.Context, c Caller, sid string) error {
	return s.withTurn(ctx, c, sid, func(*store.Session) error {
		s.dropLive(sid)
		s.pending.discard(sid)
		if err := s.store.DeleteState(ctx, sid); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("delete state: %w", err)
		}
		return nil
	})
}

// Stored returns a session the caller owns once the store holds its newest state: one a
// call answered before storing (state_pending) is stored first, in the session's turn,
// so that what is read of the state is the newest.
func (s *Service) Stored(ctx context.Context, c Caller, sid string) (*store.Session, error) {
	sess, err := s.Session(ctx, c, sid)
	if err != nil || s.live == nil || s.stateDelay <= 0 || !s.live.IsPending(sid) && !s.pending.has(sid) {
		return sess, err
	}
	err = s.withTurn(ctx, c, sid, func(*store.Session) error {
		if _, err := s.storeNewest(sid); err != nil {
			return fmt.Errorf("storing the session's state: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.Session(ctx, c, sid)
}
