package store

import (
	"context"
	"log/slog"
	"time"
)

// Sweeper is what RunSweeper needs of a store.
type Sweeper interface {
	Sweep(ctx context.Context, now time.Time) (int, error)
}

// RunSweeper sweeps s at once and then every interval, until ctx is done. It blocks:
// the caller runs it in a goroutine it owns and cancels ctx to stop it. A failed sweep
// is logged and retried at the next tick. A nil logger discards the log.
func RunSweeper(ctx context.Context, s Sweeper, every time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		n, err := s.Sweep(ctx, time.Now())
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn("session sweep failed", "err", err, "removed", n)
		case n > 0:
			log.Info("expired sessions removed", "removed", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
