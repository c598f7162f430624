package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeSandbox is a sandbox that lives until die is called and counts its removals.
type fakeSandbox struct {
	id        string
	done      chan struct{}
	dieOnce   sync.Once
	removes   atomic.Int32
	removeErr error         // returned by Remove
	removeFor time.Duration // how long Remove takes
}

func newFakeSandbox(id string) *fakeSandbox {
	return &fakeSandbox{id: id, done: make(chan struct{})}
}

func (s *fakeSandbox) ID() string            { return s.id }
func (s *fakeSandbox) Done() <-chan struct{} { return s.done }
func (s *fakeSandbox) die()                  { s.dieOnce.Do(func() { close(s.done) }) }

func (s *fakeSandbox) Remove(ctx context.Context) error {
	if s.removeFor > 0 {
		select {
		case <-time.After(s.removeFor):
		case <-ctx.Done():
		}
	}
	s.removes.Add(1)
	s.die()
	return s.removeErr
}

// fakeFactory makes fakeSandboxes. With a gate, each Start waits for one value from
// it (or for its context); while failing is set, Start fails.
type fakeFactory struct {
	gate      chan struct{}
	removeErr error
	removeFor time.Duration

	mu        sync.Mutex
	failing   bool
	made      []*fakeSandbox
	starts    int
	active    int
	maxActive int
	startedAt []time.Time
	failedAt  []time.Time
}

var errFactory = errors.New("factory: image missing")

func (f *fakeFactory) Start(ctx context.Context) (*fakeSandbox, error) {
	f.mu.Lock()
	f.starts++
	f.active++
	f.maxActive = max(f.maxActive, f.active)
	f.startedAt = append(f.startedAt, time.Now())
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.active--
		f.mu.Unlock()
	}()

	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		f.failedAt = append(f.failedAt, time.Now())
		return nil, errFactory
	}
	sb := newFakeSandbox(fmt.Sprintf("sandbox-%03d", len(f.made)))
	sb.removeErr, sb.removeFor = f.removeErr, f.removeFor
	f.made = append(f.made, sb)
	return sb, nil
}

func (f *fakeFactory) setFailing(v bool) {
	f.mu.Lock()
	f.failing = v
	f.mu.Unlock()
}

// snapshot returns the sandboxes made so far and the Start counters.
func (f *fakeFactory) snapshot() (made []*fakeSandbox, starts, active, maxActive int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*fakeSandbox(nil), f.made...), f.starts, f.active, f.maxActive
}

// fakeObserver counts pool events.
type fakeObserver struct {
	warmed, warmFailed, removed, waited atomic.Int32
}

func (o *fakeObserver) Warmed(time.Duration)        { o.warmed.Add(1) }
func (o *fakeObserver) WarmFailed(error)            { o.warmFailed.Add(1) }
func (o *fakeObserver) Removed(error)               { o.removed.Add(1) }
func (o *fakeObserver) Waited(time.Duration, error) { o.waited.Add(1) }

// testConfig is a small, fast pool configuration.
func testConfig(size int) Config {
	return Config{
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

// newTestPool starts a pool that the test closes when it ends, checking that Close
// completes.
func newTestPool(t *testing.T, cfg Config, f *fakeFactory, obs Observer) *Pool[*fakeSandbox] {
	t.Helper()
	p := New[*fakeSandbox](cfg, f, slog.New(slog.DiscardHandler), obs)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("Close: got %v, want nil", err)
		}
	})
	return p
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
func checkout(t *testing.T, p *Pool[*fakeSandbox]) *fakeSandbox {
	t.Helper()
	sb, err := p.Checkout(context.Background())
	if err != nil {
		t.Fatalf("Checkout: got error %v, want a sandbox", err)
	}
	return sb
}

// result is what an asynchronous Checkout returned.
type result struct {
	sb  *fakeSandbox
	err error
}

// goCheckout starts a Checkout in the background and waits until it is queued.
func goCheckout(t *testing.T, p *Pool[*fakeSandbox], ctx context.Context) <-chan result {
	t.Helper()
	before := p.Stats().Waiting
	ch := make(chan result, 1)
	go func() {
		sb, err := p.Checkout(ctx)
		ch <- result{sb, err}
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

// checkRemovedOnce checks that every sandbox the factory made was removed exactly once.
func checkRemovedOnce(t *testing.T, f *fakeFactory) {
	t.Helper()
	made, _, _, _ := f.snapshot()
	for _, sb := range made {
		if n := sb.removes.Load(); n != 1 {
			t.Errorf("%s: got %d removals, want 1", sb.id, n)
		}
	}
}
