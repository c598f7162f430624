package pool

import (
	"context"
	"log/slog"
	"time"

	"github.com/kilnsh/kiln/sandbox"
)

// reapEvery is how often kiln looks for its own sandboxes that nobody will remove.
const reapEvery = 15 * time.Second

// reapSlack is added to the warm-up timeout before a sandbox the pool does not hold
// counts as abandoned: runtimes give creation times in whole seconds, and a create sent
// just before a warm-up gave up may land a little later.
const reapSlack = 10 * time.Second

// Runtime is what the reaper needs of a sandbox runtime: this instance's sandboxes, of
// every state, and their removal by id.
type Runtime interface {
	List(ctx context.Context) ([]sandbox.Found, error)
	Remove(ctx context.Context, id string) error
}

// Reaper removes this instance's sandboxes that nobody owns. Every sandbox the pool
// holds (ready, checked out or kept) is the pool's to remove. Any other is either still
// being started by a warm-up, which gives up within the warm-up timeout, or lost: a
// removal that failed while the runtime was away, a warm-up whose clean-up failed, a
// create whose answer never arrived. So a sandbox of this instance the pool does not hold
// and that is older than a warm-up is removed, whatever its state.
type Reaper struct {
	rt    Runtime
	holds func(id string) bool // whether the pool holds the sandbox
	grace time.Duration        // age after which an unheld sandbox is abandoned
	now   func() time.Time
	log   *slog.Logger
}

// NewReaper returns a reaper of rt's sandboxes. holds says whether the pool holds one;
// warmupTimeout is the pool's, after which a warm-up that started a sandbox has given up
// on it.
func NewReaper(rt Runtime, holds func(id string) bool, warmupTimeout time.Duration, log *slog.Logger) *Reaper {
	return &Reaper{rt: rt, holds: holds, grace: warmupTimeout + reapSlack, now: time.Now, log: log}
}

// Run sweeps every reapEvery until ctx ends.
func (r *Reaper) Run(ctx context.Context) {
	t := time.NewTicker(reapEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.sweep(ctx)
		}
	}
}

// sweep removes the abandoned sandboxes and returns how many it removed.
func (r *Reaper) sweep(ctx context.Context) int {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := r.rt.List(lctx)
	if err != nil {
		return 0 // the runtime is away; readiness says so already
	}
	now := r.now()
	n := 0
	for _, c := range list {
		if now.Sub(c.Created) <= r.grace || r.holds(c.ID) {
			continue
		}
		if err := r.rt.Remove(lctx, c.ID); err != nil {
			r.log.Warn("removing an abandoned sandbox failed", "sandbox", c.ID, "err", err)
			continue
		}
		n++
		r.log.Warn("removed an abandoned sandbox", "sandbox", c.ID, "state", c.State)
	}
	return n
}
