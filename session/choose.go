package session

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/store"
)

// choose admits the call (a slot of its caller's, unless it has one already), finds the
// session it continues, and waits for its turn: one call of a session at a time, in the
// order they came, never two copies of it. A call that finds none makes a new session
// once it has run (keep).
func (cl *call) choose() error {
	s, req := cl.s, &cl.req
	if !req.Admitted && !req.ReadOnly { // kiln's own reads (completions) take no slot
		release, err := s.Admit(cl.c)
		if err != nil {
			return err
		}
		cl.ends = append(cl.ends, release)
	}
	if err := s.validate(&cl.x); err != nil {
		return err
	}
	if req.RuntimeHint != "" && !req.Stateless {
		req.EntityID = runtimeEntity(req.RuntimeHint)
		// Calls that name one runtime before it has a session wait for each other, so
		// that the first creates it and the others continue it: never two sessions.
		release, err := s.hintTurn(cl.ctx, cl.c, req.EntityID)
		if err != nil {
			return err
		}
		if cl.sess, err = s.choose(cl.ctx, cl.c, *req); err != nil || cl.sess != nil {
			release()
			if err != nil {
				return err
			}
		} else {
			cl.ends = append(cl.ends, release)
		}
	} else {
		var err error
		if cl.sess, err = s.choose(cl.ctx, cl.c, *req); err != nil {
			return err
		}
	}
	if cl.sess == nil {
		if req.Existing {
			return errNotFound("session")
		}
		return nil
	}
	sess, release, err := s.turn(cl.ctx, cl.c, cl.sess)
	if err != nil {
		return err
	}
	cl.sess, cl.endTurn = sess, release
	if sess == nil { // deleted while the call waited
		if req.Existing {
			return errNotFound("session")
		}
		return nil
	}
	cl.lost = s.pending.takeLost(sess.ID)
	return nil
}

// choose finds the session a request continues; nil means a new one is needed.
func (s *Service) choose(ctx context.Context, c Caller, req ExecRequest) (*store.Session, error) {
	if req.Stateless {
		return nil, nil
	}
	try := func(id string) (*store.Session, error) {
		if id == "" {
			return nil, nil
		}
		sess, err := s.Session(ctx, c, id)
		if kiln.ErrorCode(err) == kiln.CodeNotFound || (err == nil && resourceOwned(sess.Owner)) {
			return nil, nil // a resource's session holds its files, never a run's state
		}
		return sess, err
	}
	if sess, err := try(req.SessionID); sess != nil || err != nil {
		return sess, err
	}
	if len(req.Files) > 0 && req.RuntimeHint == "" {
		if sess, err := try(req.Files[0].SessionID); sess != nil || err != nil {
			return sess, err
		}
	}
	if req.EntityID != "" {
		sess, err := s.store.LatestSession(ctx, c.owner(), req.EntityID)
		if err == nil && sess.ExpiresAt.After(s.now()) {
			return sess, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("latest session: %w", err)
		}
	}
	return nil, nil
}

// hintTurn waits for the turn of a runtime that has no session yet.
func (s *Service) hintTurn(ctx context.Context, c Caller, entity string) (func(), error) {
	release, _, err := s.turns.acquire(ctx, "\x00"+c.owner()+"\x00"+entity, s.turnWait)
	if errors.Is(err, errTurnTimeout) {
		return nil, &kiln.Error{Code: kiln.CodeBusy, RetryAfter: s.retryAfter, Message: fmt.Sprintf(
			"runtime %s is busy: its first call ran for the whole queue timeout; retry later", strings.TrimPrefix(entity, "rt:"))}
	}
	return release, err
}

// runtimeEntity is the entity a runtime hint's session carries. Hints and entity ids
// never meet: an entity id holds no ':'.
func runtimeEntity(hint string) string { return "rt:" + hint }

// runtimeHint is what a runtime hint may look like (LibreChat's rule).
var runtimeHint = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// ValidRuntimeHint reports whether a client's runtime hint is one kiln accepts.
func ValidRuntimeHint(h string) bool { return runtimeHint.MatchString(h) }
