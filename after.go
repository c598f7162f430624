package kiln

import (
	"context"
	"sync"
)

// Work a request can leave until its answer is out: removing the sandbox it used
// costs the Docker daemon a burst of CPU, and the replacement's warm-up even more,
// which on a small host would otherwise compete with the request's own last steps
// (saving the session, writing the response).

type afterKey struct{}

type afterList struct {
	mu   sync.Mutex
	fns  []func()
	done bool
}

// WithAfter returns a context under which After postpones work, and the function that
// runs the postponed work, in order. The caller must call it exactly once, when the
// answer is out, whatever happened; work passed to After after that runs at once.
func WithAfter(ctx context.Context) (context.Context, func()) {
	l := &afterList{}
	run := func() {
		l.mu.Lock()
		fns := l.fns
		l.fns, l.done = nil, true
		l.mu.Unlock()
		for _, fn := range fns {
			fn()
		}
	}
	return context.WithValue(ctx, afterKey{}, l), run
}

// After runs fn once the answer to the request that ctx belongs to is out, or at once
// when ctx carries no WithAfter (or its work has already run). Only fast, non-blocking
// work belongs here.
func After(ctx context.Context, fn func()) {
	if l, ok := ctx.Value(afterKey{}).(*afterList); ok {
		l.mu.Lock()
		if !l.done {
			l.fns = append(l.fns, fn)
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
	}
	fn()
}
