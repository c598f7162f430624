package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/api"
)

var errShuttingDown = &kiln.Error{Code: kiln.CodeUnavailable, Message: "kiln is shutting down", RetryAfter: 5}

// health answers the health routes from the daemon, the image and the pool.
type health struct {
	m    *Main
	keys *api.Keys
}

func (h *health) Ready(ctx context.Context) error {
	m := h.m
	if m.draining.Load() {
		return errors.New("shutting down")
	}
	if err := m.docker.Ping(ctx); err != nil {
		return fmt.Errorf("docker does not answer: %v", err)
	}
	if _, err := m.docker.ImageID(ctx, m.cfg.SandboxImage); err != nil {
		return fmt.Errorf("sandbox image: %v", err)
	}
	if !m.pool.CanServe() {
		st := m.pool.Stats()
		if st.LastError != "" {
			return fmt.Errorf("no sandbox can be warmed: %s", st.LastError)
		}
		return errors.New("no sandbox is ready yet")
	}
	return nil
}

func (h *health) Detailed(ctx context.Context) any {
	m := h.m
	status := "ok"
	dockerInfo := map[string]any{"ok": true}
	if err := m.docker.Ping(ctx); err != nil {
		dockerInfo = map[string]any{"ok": false, "error": err.Error()}
		status = "unhealthy"
	}
	imageInfo := map[string]any{"name": m.cfg.SandboxImage}
	if id, err := m.docker.ImageID(ctx, m.cfg.SandboxImage); err != nil {
		imageInfo["present"], imageInfo["error"] = false, err.Error()
		status = "unhealthy"
	} else {
		imageInfo["present"], imageInfo["id"] = true, id
	}
	st := m.pool.Stats()
	if status == "ok" && (st.Ready < st.Target || st.LastError != "") {
		status = "degraded"
	}
	containers := make([]map[string]any, 0, len(st.Sandboxes))
	for _, s := range st.Sandboxes {
		containers = append(containers, map[string]any{"id": s.ID, "state": s.State, "age_seconds": s.Age.Round(time.Millisecond).Seconds()})
	}
	return map[string]any{
		"status": status,
		"docker": dockerInfo,
		"image":  imageInfo,
		"pool": map[string]any{
			"target": st.Target, "ready": st.Ready, "warming": st.Warming, "in_use": st.InUse,
			"waiting": st.Waiting, "created": st.Counts.Created, "failed": st.Counts.Failed,
			"removed": st.Counts.Removed, "leaked": st.Counts.Leaked, "died": st.Counts.Died,
			"last_error": st.LastError, "containers": containers,
			"runtime": runtimeName(m.cfg.SandboxRuntime), "repl": m.cfg.ReplEnabled,
		},
		"store": map[string]any{"kind": m.storeKind()},
		"auth":  map[string]any{"enabled": h.keys.Enabled()},
	}
}
