package executor

import (
	"context"
	"sync"
)

// Drain stops the executor taking executions and waits until the ones under way have
// returned from Run, or ctx ends (then it returns ctx's error). Executions asked for
// from then on are answered "kiln is shutting down". Their sandboxes are released by
// whoever holds the Results, as always.
func (e *Executor) Drain(ctx context.Context) error { return e.runs.drain(ctx) }

// Draining reports whether Drain has been called.
func (e *Executor) Draining() bool { return e.runs.isDraining() }

// Running returns how many executions are under way.
func (e *Executor) Running() int { return e.runs.count() }

// runs counts executions under way and lets Drain wait until there are none.
type runs struct {
	mu       sync.Mutex
	n        int
	draining bool
	idle     chan struct{} // closed when n drops to 0; nil while nobody waits
}

// enter counts one more execution, unless the executor drains and it is not forced.
func (r *runs) enter(force bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining && !force {
		return false
	}
	r.n++
	return true
}

func (r *runs) leave() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n--
	if r.n == 0 && r.idle != nil {
		close(r.idle)
		r.idle = nil
	}
}

func (r *runs) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *runs) isDraining() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.draining
}

func (r *runs) drain(ctx context.Context) error {
	r.mu.Lock()
	r.draining = true
	if r.n == 0 {
		r.mu.Unlock()
		return nil
	}
	if r.idle == nil {
		r.idle = make(chan struct{})
	}
	idle := r.idle
	r.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
