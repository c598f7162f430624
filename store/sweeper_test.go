package store_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/store"
)

// flakySweeper fails every other sweep and counts the calls.
type flakySweeper struct{ calls atomic.Int32 }

func (f *flakySweeper) Sweep(ctx context.Context, now time.Time) (int, error) {
	if f.calls.Add(1)%2 == 1 {
		return 0, errors.New("redis is down")
	}
	return 1, nil
}

// runSweeper starts RunSweeper and returns a function that stops it and waits.
func runSweeper(t *testing.T, s store.Sweeper, every time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		store.RunSweeper(ctx, s, every, nil)
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("RunSweeper did not return after cancel")
		}
	}
	t.Cleanup(stop)
	return stop
}

func TestRunSweeperKeepsGoingAfterErrors(t *testing.T) {
	f := &flakySweeper{}
	stop := runSweeper(t, f, time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for f.calls.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	n := f.calls.Load()
	if n < 4 {
		t.Fatalf("Sweep called %d times, want at least 4", n)
	}
	time.Sleep(10 * time.Millisecond)
	if got := f.calls.Load(); got != n {
		t.Errorf("Sweep called %d times after stop, was %d", got, n)
	}
}

func TestRunSweeperRemovesExpiredSessions(t *testing.T) {
	d := openDisk(t, t.TempDir()) // TTL of an hour
	old := &store.Session{ID: kiln.NewID(), LastUsedAt: time.Now().Add(-2 * time.Hour)}
	fresh := &store.Session{ID: kiln.NewID()}
	for _, s := range []*store.Session{old, fresh} {
		if err := d.CreateSession(t.Context(), s); err != nil {
			t.Fatalf("CreateSession: %v", err)
		}
	}
	runSweeper(t, d, time.Hour) // the first sweep runs at once

	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := d.Session(t.Context(), old.ID)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("expired session still there: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := d.Session(t.Context(), fresh.ID); err != nil {
		t.Errorf("fresh session: %v", err)
	}
}
