package pool

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

// roomless is a runtime whose every start first finds no room: its NoRoomError's Wait
// starts the sandbox once room is made (closed), as a Pod waits for the scheduler.
type roomless struct {
	f      *sandboxtest.Fake
	room   chan struct{}
	starts atomic.Int32
}

func (r *roomless) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	r.starts.Add(1)
	return nil, &sandbox.NoRoomError{Why: "0/1 nodes are available", Wait: func(ctx context.Context) (sandbox.Sandbox, error) {
		select {
		case <-r.room:
			return r.f.Start(ctx, spec)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
}

func TestNoRoomAsksForRoomOnceAndWaits(t *testing.T) {
	f := &sandboxtest.Fake{}
	sweep(t, f)
	rt := &roomless{f: f, room: make(chan struct{})}
	var asked atomic.Int32
	p := New(testConfig(1), rt, discard(), &fakeObserver{})
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	p.MakeRoomWith(func() bool {
		if asked.Add(1) == 1 {
			close(rt.room)
		}
		return true
	})
	sb, err := p.Checkout(t.Context())
	if err != nil {
		t.Fatalf("Checkout: got %v, want a sandbox once room was made", err)
	}
	p.Release(sb)
	if err := p.Close(t.Context()); err != nil { // its warm-ups end: the counts hold still
		t.Fatalf("Close: %v", err)
	}
	if a, s := asked.Load(), rt.starts.Load(); a < 1 || a != s {
		t.Errorf("room asked for %d times over %d starts, want once a start", a, s)
	}
}

func TestNoRoomWithNothingToFreeWaitsForTheWarmup(t *testing.T) {
	f := &sandboxtest.Fake{}
	sweep(t, f)
	rt := &roomless{f: f, room: make(chan struct{})}
	cfg := testConfig(1)
	cfg.WarmupTimeout = 100 * time.Millisecond
	obs := &fakeObserver{}
	p := New(cfg, rt, discard(), obs)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	var asked atomic.Int32
	p.MakeRoomWith(func() bool { asked.Add(1); return false })
	deadline := time.Now().Add(5 * time.Second)
	for obs.warmFailed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if obs.warmFailed.Load() == 0 {
		t.Fatal("no warm-up failed: a sandbox with no room should fail when its warm-up time ends")
	}
	if obs.warmed.Load() != 0 || asked.Load() == 0 {
		t.Errorf("got %d warmed and room asked %d times, want none warmed and room asked", obs.warmed.Load(), asked.Load())
	}
	if n := len(f.Sandboxes()); n != 0 {
		t.Errorf("got %d sandboxes started, want none: there was never room", n)
	}
}
