// Command kiln serves the kiln HTTP API: it runs untrusted code for LLM platforms in
// warm pools of hardened sandboxes (Docker containers or Kubernetes Pods), one caller's
// at a time. Configuration comes from the environment (docs/operations.md).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "healthcheck" {
		os.Exit(healthcheck())
	}
	if len(os.Args) > 1 && os.Args[1] == "mcp" {
		os.Exit(mcpCommand(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	cfg, err := LoadConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kiln: invalid configuration:\n%v\n", err)
		os.Exit(2)
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	m := NewMain(cfg, log)
	if err := m.Run(ctx); err != nil {
		log.Error("kiln could not start", "err", err)
		closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = m.Close(closeCtx)
		os.Exit(1)
	}
	// SIGHUP reads the egress policy file again.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			if err := m.ReloadEgress(); err != nil {
				log.Warn("egress policy not reloaded", "err", err)
			} else {
				log.Info("egress policy reloaded", "file", cfg.PolicyFile)
			}
		}
	}()
	<-ctx.Done()
	signal.Stop(hup)
	stop()
	// A second SIGINT or SIGTERM cuts the drain short: kiln no longer waits for the runs
	// under way, their answers or the stores of pending states, and still removes its
	// sandboxes before it exits. A third ends it at once.
	again := make(chan os.Signal, 1)
	signal.Notify(again, syscall.SIGINT, syscall.SIGTERM)
	log.Info("shutting down: draining in-flight executions (a second signal cuts the drain short)", "grace_seconds", cfg.ShutdownGraceSeconds)
	closeCtx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.ShutdownGraceSeconds)*time.Second+30*time.Second)
	defer cancel()
	go func() {
		<-again
		signal.Stop(again)
		log.Warn("second signal: the drain is cut short; kiln removes its sandboxes and exits")
		cancel()
	}()
	if err := m.Close(closeCtx); err != nil {
		log.Error("shutdown incomplete", "err", err)
		os.Exit(1)
	}
	log.Info("kiln stopped")
}
