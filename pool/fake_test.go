package pool

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

// testSpec is what the tests' pools start.
var testSpec = sandbox.Spec{Image: "kiln-fake", MemoryMB: 64}

// errStart is how a failing runtime's starts fail.
var errStart = errors.New("runtime: image missing")

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// fakeObserver counts pool events.
type fakeObserver struct {
	warmed, warmFailed, removed, waited, over atomic.Int32
}

func (o *fakeObserver) Warmed(time.Duration) { o.warmed.Add(1) }
func (o *fakeObserver) WarmFailed(error)     { o.warmFailed.Add(1) }
func (o *fakeObserver) Removed(error)        { o.removed.Add(1) }
func (o *fakeObserver) Waited(_ time.Duration, share Share, _ error) {
	o.waited.Add(1)
	if share == ShareOver {
		o.over.Add(1)
	}
}

// testConfig is a small, fast pool configuration.
func testConfig(size int) Config {
	return Config{
		Spec:          testSpec,
		Size:          size,
		Warmers:       size,
		QueueTimeout:  2 * time.Second,
		MaxQueue:      16,
		WarmupTimeout: 2 * time.Second,
		RemoveTimeout: time.Second,
		BackoffMin:    5 * time.Millisecond,
		BackoffMax:    20 * time.Millisecond,
	}
}

// newTestPool starts a pool on f that the test closes when it ends, checking that Close
// completes; what the pool leaves on f is swept after.
func newTestPool(t *testing.T, cfg Config, f *sandboxtest.Fake, obs Observer) *Pool {
	t.Helper()
	sweep(t, f)
	p := New(cfg, f, discard(), obs)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("Close: got %v, want nil", err)
		}
	})
	return p
}

// sweep removes, once the test has ended, whatever sandboxes of f are left (those the
// test kept checked out), so that no fake REPL outlives its test.
func sweep(t *testing.T, f *sandboxtest.Fake) {
	t.Cleanup(func() { _, _ = f.RemoveOrphans(context.Background()) })
}

// startOne starts a sandbox of no pool's, of a Fake of its own.
func startOne(t *testing.T, prefix string) *sandboxtest.Sandbox {
	t.Helper()
	f := &sandboxtest.Fake{Prefix: prefix}
	sweep(t, f)
	sb, err := f.Start(t.Context(), testSpec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return sb.(*sandboxtest.Sandbox)
}

// waitFor polls cond until it holds, failing the test after two seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkout calls Checkout with a deadline well past the pool's queue timeout.
func checkout(t *testing.T, p *Pool) *sandboxtest.Sandbox {
	t.Helper()
	sb, err := p.Checkout(context.Background())
	if err != nil {
		t.Fatalf("Checkout: got error %v, want a sandbox", err)
	}
	return sb.(*sandboxtest.Sandbox)
}

// result is what an asynchronous Checkout returned.
type result struct {
	sb  *sandboxtest.Sandbox
	err error
}

// goCheckout starts a Checkout in the background and waits until it is queued.
func goCheckout(t *testing.T, p *Pool, ctx context.Context) <-chan result {
	t.Helper()
	before := p.Stats().Waiting
	ch := make(chan result, 1)
	go func() {
		sb, err := p.Checkout(ctx)
		fake, _ := sb.(*sandboxtest.Sandbox)
		ch <- result{fake, err}
	}()
	waitFor(t, "the checkout to queue", func() bool { return p.Stats().Waiting == before+1 })
	return ch
}

// receive waits for an asynchronous Checkout's result.
func receive(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(2 * time.Second):
		t.Fatal("timed out waiting for a checkout to return")
		return result{}
	}
}

// starts returns how many Start calls f has had.
func starts(f *sandboxtest.Fake) int { return f.Counts().Starts }

// checkRemovedOnce checks that every sandbox f made was removed exactly once.
func checkRemovedOnce(t *testing.T, f *sandboxtest.Fake) {
	t.Helper()
	for _, sb := range f.Sandboxes() {
		if n := sb.Removals(); n != 1 {
			t.Errorf("%s: got %d removals, want 1", sb.ID(), n)
		}
	}
}
