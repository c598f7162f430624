package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/docker"
)

// reapEvery is how often kiln looks for its own containers that nobody will remove.
const reapEvery = 15 * time.Second

// reaper removes this instance's containers that can no longer serve and that the
// pool has lost track of: a removal that failed (typically while the daemon was
// away) leaves its container behind, and the pool never tries again. kiln never
// restarts a container, so one that has exited is garbage; so is one still only
// created well after any warm-up would have given up.
//
// A container is removed only when two sweeps in a row found it so: an executor may
// still be reading the exit status of a sandbox that died a moment ago.
type reaper struct {
	dc       *docker.Client
	instance string
	stuck    time.Duration // a created container older than this is abandoned
	suspects map[string]bool
	now      func() time.Time
	log      *slog.Logger
}

// startReaper runs a reaper among m's background loops.
func (m *Main) startReaper() {
	r := &reaper{
		dc: m.docker, instance: m.cfg.InstanceID, now: time.Now, log: m.log,
		stuck: 2*time.Duration(m.cfg.WarmupTimeoutSecs)*time.Second + time.Minute,
	}
	m.background(r.run)
}

// run sweeps every reapEvery until ctx ends.
func (r *reaper) run(ctx context.Context) {
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

func (r *reaper) sweep(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := r.dc.List(lctx, r.instance)
	if err != nil {
		return // the daemon is away; readiness says so already
	}
	now := r.now()
	suspects := map[string]bool{}
	for _, c := range list {
		dead := c.State == "exited" || c.State == "dead" ||
			(c.State == "created" && now.Sub(c.Created) > r.stuck)
		if !dead {
			continue
		}
		if !r.suspects[c.ID] {
			suspects[c.ID] = true
			continue
		}
		if err := r.dc.Remove(lctx, c.ID); err != nil {
			suspects[c.ID] = true
			r.log.Warn("removing an abandoned sandbox failed", "container", kiln.ShortID(c.ID), "err", err)
			continue
		}
		r.log.Warn("removed an abandoned sandbox", "container", kiln.ShortID(c.ID), "state", c.State)
	}
	r.suspects = suspects
}
