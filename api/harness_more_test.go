package api

import (
	"context"
	"log/slog"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/session"
	"github.com/kilnsh/kiln/store"
)

// resession replaces h's session layer with one built as NewHarness builds it, over
// cfg's runner and limits, and then changed by change.
func (h *Harness) resession(cfg HarnessConfig, limits executor.Limits, change func(*session.Config)) {
	log := slog.New(slog.DiscardHandler)
	sc := session.Config{
		Store:    h.Store,
		Runner:   session.RunnerFunc(h.runner(cfg)),
		Validate: executor.New(languages{"bash", "python"}, limits, log).Validate,
		CheckState: func(blob []byte) error {
			return executor.CheckState(blob, limits.MaxStateBytes, limits.MaxStateRaw)
		},
		Cancel:  cfg.Cancel,
		Limits:  session.Limits{MaxFileBytes: limits.MaxFileBytes, MaxFilesPerSession: TestMaxFiles, MaxConcurrent: cfg.MaxConcurrent},
		Log:     log,
		Refused: cfg.refused(),
	}
	change(&sc)
	h.Server.sessions = session.New(sc)
}

// NewStoreHarness returns a Harness whose session layer keeps its data in wrap of the
// harness's store: a store that fails where the test needs it to.
func NewStoreHarness(t *testing.T, cfg HarnessConfig, wrap func(store.Store) store.Store) *Harness {
	t.Helper()
	h := NewHarness(t, cfg)
	if cfg.Run == nil {
		cfg.Run = func(context.Context, executor.Request) (*executor.Result, error) {
			return &executor.Result{Status: execution.StatusOK, Stdout: "hi\n"}, nil
		}
	}
	if cfg.Cancel == nil {
		cfg.Cancel = func(id, _ string) error { return kiln.Errorf(kiln.CodeNotFound, "execution %s not found", id) }
	}
	h.resession(cfg, TestLimits, func(c *session.Config) { c.Store = wrap(h.Store) })
	return h
}

// Released returns how many results the runner handed out, and how many of them were
// released.
func (h *Harness) Released() (results, released int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.results, h.released
}
