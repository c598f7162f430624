package session

import (
	"context"
	"sync"
	"time"
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
