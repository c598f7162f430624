// Package health answers kiln's health routes from what kiln depends on: whether it
// can serve executions now (/health/ready), and the detailed view of the sandbox runtime,
// the sandbox images, the pools and the live sessions (/health/detailed).
package health

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kilnsh/kiln/live"
	"github.com/kilnsh/kiln/pool"
)

// Runtime is what the checks need of the sandbox runtime (a sandbox.Runtime): its name
// (the key of its part in /health/detailed), that it answers, and whether it has an image.
type Runtime interface {
	Name() string
	Ping(ctx context.Context) error
	ImageID(ctx context.Context, image string) (string, error)
}

// Pool is what the checks need of the sandbox pools (a pool.Set): their totals, and
// each pool's own numbers.
type Pool interface {
	CanServe() bool
	Stats() pool.Stats
	PoolStats() []pool.MemberStats
}

// Executor is what the checks need of the executor.
type Executor interface {
	Draining() bool
}

// Live is what the detailed view needs of the live sessions' registry.
type Live interface {
	Stats() live.Stats
}

// Checker answers the health routes. Its fields are set once, by cmd/kiln.
type Checker struct {
	Runtime   Runtime
	Pool      Pool
	Executor  Executor
	Live      Live              // nil when live sessions are off
	Image     string            // the first pool's sandbox image
	Images    map[string]string // every pool's image, by pool name
	Isolation string            // what isolates sandboxes: the OCI runtime (runc, runsc) or the Pods' RuntimeClass
	Repl      bool              // whether sandboxes run the warm REPL (else exec mode)
	Store     string            // the session store: disk or redis
	Auth      bool              // whether API keys are required
}

// Ready returns nil when kiln can serve executions, else why not.
func (c *Checker) Ready(ctx context.Context) error {
	if c.Executor.Draining() {
		return errors.New("shutting down")
	}
	if err := c.Runtime.Ping(ctx); err != nil {
		return fmt.Errorf("%s does not answer: %v", c.Runtime.Name(), err)
	}
	// The first pool's image; another pool whose image is missing (still being built) waits
	// for it, and its languages answer 503 meanwhile (/health/detailed shows it).
	if _, err := c.Runtime.ImageID(ctx, c.Image); err != nil {
		return fmt.Errorf("sandbox image: %v", err)
	}
	if !c.Pool.CanServe() {
		if st := c.Pool.Stats(); st.LastError != "" {
			return fmt.Errorf("no sandbox can be warmed: %s", st.LastError)
		}
		return errors.New("no sandbox is ready yet")
	}
	return nil
}

// Detailed returns the body of /health/detailed: ok, degraded (the pool is short or
// warm-ups fail, another pool's image is missing) or unhealthy (the daemon or the first
// pool's image is missing), with the parts.
func (c *Checker) Detailed(ctx context.Context) any {
	status := "ok"
	runtimeInfo := map[string]any{"ok": true}
	if err := c.Runtime.Ping(ctx); err != nil {
		runtimeInfo = map[string]any{"ok": false, "error": err.Error()}
		status = "unhealthy"
	}
	imageInfo := map[string]any{"name": c.Image}
	if id, err := c.Runtime.ImageID(ctx, c.Image); err != nil {
		imageInfo["present"], imageInfo["error"] = false, err.Error()
		status = "unhealthy"
	} else {
		imageInfo["present"], imageInfo["id"] = true, id
	}
	st := c.Pool.Stats()
	if status == "ok" && (st.Ready < st.Target || st.LastError != "") {
		status = "degraded"
	}
	pools := []map[string]any{}
	for _, p := range c.Pool.PoolStats() {
		ps := p.Stats
		entry := map[string]any{
			"name": p.Name, "image": c.Images[p.Name], "languages": p.Languages,
			"target": ps.Target, "ready": ps.Ready, "warming": ps.Warming, "in_use": ps.InUse,
			"waiting": ps.Waiting, "kept": ps.Kept, "created": ps.Counts.Created, "failed": ps.Counts.Failed,
			"died": ps.Counts.Died, "last_error": ps.LastError,
		}
		if image := c.Images[p.Name]; image != "" && image != c.Image {
			if _, err := c.Runtime.ImageID(ctx, image); err != nil {
				entry["image_error"] = err.Error()
				if status == "ok" {
					status = "degraded" // its pool waits for it; the others serve
				}
			}
		}
		pools = append(pools, entry)
	}
	containers := make([]map[string]any, 0, len(st.Sandboxes))
	for _, s := range st.Sandboxes {
		containers = append(containers, map[string]any{"id": s.ID, "state": s.State, "age_seconds": s.Age.Round(time.Millisecond).Seconds()})
	}
	return map[string]any{
		"status":         status,
		c.Runtime.Name(): runtimeInfo,
		"image":          imageInfo,
		"pool": map[string]any{
			"target": st.Target, "ready": st.Ready, "warming": st.Warming, "in_use": st.InUse,
			"waiting": st.Waiting, "kept": st.Kept, "created": st.Counts.Created, "failed": st.Counts.Failed,
			"removed": st.Counts.Removed, "leaked": st.Counts.Leaked, "died": st.Counts.Died,
			"last_error": st.LastError, "containers": containers,
			"runtime": c.Isolation, "repl": c.Repl,
		},
		"pools": pools,
		"live":  c.live(),
		"store": map[string]any{"kind": c.Store},
		"auth":  map[string]any{"enabled": c.Auth},
	}
}

// live is the live sessions' part of the detailed view: how many hold a sandbox now,
// the memory they hold, and their calls and ends since start. The counts carry only the
// statuses and reasons seen so far.
func (c *Checker) live() map[string]any {
	if c.Live == nil {
		return map[string]any{"enabled": false}
	}
	st := c.Live.Stats()
	return map[string]any{
		"enabled": true, "idle": st.Idle, "busy": st.Busy, "max": st.Max, "memory_bytes": st.Memory,
		"calls": nonNil(st.Counts.Calls), "ended": nonNil(st.Counts.Ended), "flushes": nonNil(st.Counts.Flushes),
	}
}

// nonNil makes a nil map an empty one, which JSON writes as {} rather than null.
func nonNil(m map[string]int64) map[string]int64 {
	if m == nil {
		return map[string]int64{}
	}
	return m
}
