package docker

import (
	"context"
	"log/slog"
	"time"
)

// reapEvery is how often kiln looks for its own containers that nobody will remove.
const reapEvery = 15 * time.Second

// reapSlack is added to the warm-up timeout before a container the pool does not
// hold counts as abandoned: the daemon gives creation times in whole seconds, and a
// create sent just before a warm-up gave up may land a little later.
const reapSlack = 10 * time.Second

// containers is what the reaper needs of Docker.
type containers interface {
	List(ctx context.Context, instance string) ([]Container, error)
	Remove(ctx context.Context, id string) error
}

// Reaper removes this instance's containers that nobody owns. Every container the
// pool holds (ready or checked out) is the pool's to remove. Any other is either
// still being started by a warm-up, which gives up within the warm-up timeout, or
// lost: a removal that failed while the daemon was away, a warm-up whose clean-up
// failed, a create whose answer never arrived. So a container of this instance the
// pool does not hold and that is older than a warm-up is removed, whatever its state.
type Reaper struct {
	dc       containers
	instance string
	holds    func(id string) bool // whether the pool holds the container
	grace    time.Duration        // age after which an unheld container is abandoned
	now      func() time.Time
	log      *slog.Logger
}

// NewReaper returns a reaper of instance's containers on c. holds says whether the
// pool holds a container; warmupTimeout is the pool's, after which a warm-up that
// started a container has given up on it.
func NewReaper(c *Client, instance string, holds func(id string) bool, warmupTimeout time.Duration, log *slog.Logger) *Reaper {
	return &Reaper{dc: c, instance: instance, holds: holds, grace: warmupTimeout + reapSlack, now: time.Now, log: log}
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

// sweep removes the abandoned containers and returns how many it removed.
func (r *Reaper) sweep(ctx context.Context) int {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := r.dc.List(lctx, r.instance)
	if err != nil {
		return 0 // the daemon is away; readiness says so already
	}
	now := r.now()
	n := 0
	for _, c := range list {
		if now.Sub(c.Created) <= r.grace || r.holds(c.ID) {
			continue
		}
		if err := r.dc.Remove(lctx, c.ID); err != nil {
			r.log.Warn("removing an abandoned sandbox failed", "container", c.ID, "err", err)
			continue
		}
		n++
		r.log.Warn("removed an abandoned sandbox", "container", c.ID, "state", c.State)
	}
	return n
}
