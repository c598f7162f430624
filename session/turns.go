package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/store"
)

// turns lets one call of a session run at a time: the others wait, in the order they
// came (Go's channels queue blocked senders in order), for at most a timeout.
type turns struct {
	mu sync.Mutex
	m  map[string]*turn
}

// turn is one session's: a call holds it while its token sits in ch.
type turn struct {
	ch   chan struct{}
	refs int // calls holding or waiting for it; the turn goes when none is left
}

// acquire waits for the session's turn. It returns the function that ends the turn, and
// whether the call had to wait (another call of the session ran meanwhile). The error is
// errTurnTimeout or the context's.
func (t *turns) acquire(ctx context.Context, sid string, wait time.Duration) (release func(), waited bool, err error) {
	t.mu.Lock()
	if t.m == nil {
		t.m = map[string]*turn{}
	}
	tu := t.m[sid]
	if tu == nil {
		tu = &turn{ch: make(chan struct{}, 1)}
		t.m[sid] = tu
	}
	tu.refs++
	t.mu.Unlock()
	release = func() {
		<-tu.ch
		t.unref(sid, tu)
	}
	select {
	case tu.ch <- struct{}{}:
		return release, false, nil
	default:
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case tu.ch <- struct{}{}:
		return release, true, nil
	case <-timer.C:
		err = errTurnTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	t.unref(sid, tu)
	return nil, false, err
}

func (t *turns) unref(sid string, tu *turn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tu.refs--; tu.refs == 0 && t.m[sid] == tu {
		delete(t.m, sid)
	}
}

// waiting reports how many calls hold or wait for turns, for tests.
func (t *turns) waiting() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, tu := range t.m {
		n += tu.refs
	}
	return n
}

// errTurnTimeout is a call that waited its session's turn for the whole queue timeout.
var errTurnTimeout = errors.New("the session's turn did not come")

// withTurn runs fn in the turn of the caller's session sid, with the session as it is once
// the turn came: what one call of it at a time may do (delete it, replace its state). A
// session that is gone is a not-found error; one deleted while fn waited, errGone.
func (s *Service) withTurn(ctx context.Context, c Caller, sid string, fn func(*store.Session) error) error {
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
		return errGone
	}
	return fn(sess)
}

// errGone is a session deleted while a call waited for its turn: not found.
var errGone = errNotFound("session")

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
