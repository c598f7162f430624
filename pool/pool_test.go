package pool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/sandbox"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

func TestWarmsToSize(t *testing.T) {
	for _, size := range []int{1, 3} {
		t.Run("", func(t *testing.T) {
			f := &sandboxtest.Fake{}
			obs := &fakeObserver{}
			p := newTestPool(t, testConfig(size), f, obs)
			waitFor(t, "the pool to warm", func() bool { return p.Stats().Ready == size })
			time.Sleep(20 * time.Millisecond) // time to over-warm, if it were going to
			st := p.Stats()
			n := starts(f)
			if n != size || st.Counts.Created != int64(size) || st.Ready != size {
				t.Errorf("got %d starts, %d created, %d ready, want %d each", n, st.Counts.Created, st.Ready, size)
			}
			if st.Target != size || st.Warming != 0 || st.InUse != 0 {
				t.Errorf("got target %d warming %d in use %d, want %d 0 0", st.Target, st.Warming, st.InUse, size)
			}
			if len(st.Sandboxes) != size || st.Sandboxes[0].State != "ready" {
				t.Errorf("got sandboxes %+v, want %d ready", st.Sandboxes, size)
			}
			if !p.CanServe() {
				t.Errorf("got CanServe false with a ready sandbox, want true")
			}
			if got := obs.warmed.Load(); got != int32(size) {
				t.Errorf("got %d Warmed events, want %d", got, size)
			}
		})
	}
}

// TestCheckoutRelease checks that checkouts get distinct sandboxes, that a sandbox is
// not removed while checked out, and that each is removed exactly once after Release.
func TestCheckoutRelease(t *testing.T) {
	f := &sandboxtest.Fake{}
	p := newTestPool(t, testConfig(2), f, nil)
	seen := map[string]bool{}
	var held []*sandboxtest.Sandbox
	for range 5 {
		sb := checkout(t, p)
		if seen[sb.ID()] {
			t.Fatalf("got %s twice, want a fresh sandbox every time", sb.ID())
		}
		seen[sb.ID()] = true
		held = append(held, sb)
	}
	if got := p.Stats().InUse; got != 5 {
		t.Errorf("got %d in use, want 5", got)
	}
	for _, sb := range held {
		if n := sb.Removals(); n != 0 {
			t.Errorf("%s: got %d removals while checked out, want 0", sb.ID(), n)
		}
	}
	for _, sb := range held {
		p.Release(sb)
	}
	waitFor(t, "removals", func() bool { return p.Stats().Counts.Removed == 5 })
	if got := p.Stats().InUse; got != 0 {
		t.Errorf("got %d in use after release, want 0", got)
	}
	for _, sb := range held {
		if n := sb.Removals(); n != 1 {
			t.Errorf("%s: got %d removals after release, want 1", sb.ID(), n)
		}
	}
	waitFor(t, "the pool to refill", func() bool { return p.Stats().Ready == 2 })
}

// TestNeverTwice runs many concurrent checkouts; run it under -race.
func TestNeverTwice(t *testing.T) {
	f := &sandboxtest.Fake{}
	cfg := testConfig(3)
	cfg.MaxQueue = 100
	p := New(cfg, f, discard(), nil)
	var (
		mu   sync.Mutex
		seen = map[sandbox.Sandbox]int{}
		wg   sync.WaitGroup
	)
	for range 20 {
		wg.Go(func() {
			for range 5 {
				sb, err := p.Checkout(context.Background())
				if err != nil {
					t.Errorf("Checkout: got error %v, want a sandbox", err)
					return
				}
				mu.Lock()
				seen[sb]++
				mu.Unlock()
				p.Release(sb)
			}
		})
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: got %v, want nil", err)
	}
	if len(seen) != 100 {
		t.Errorf("got %d distinct sandboxes for 100 checkouts, want 100", len(seen))
	}
	for sb, n := range seen {
		if n != 1 {
			t.Errorf("%s: handed out %d times, want once", sb.ID(), n)
		}
	}
	checkRemovedOnce(t, f)
	st := p.Stats()
	if st.InUse != 0 || st.Ready != 0 {
		t.Errorf("got %d in use and %d ready after Close, want 0 and 0", st.InUse, st.Ready)
	}
}

func TestCheckoutErrors(t *testing.T) {
	t.Run("queue full", func(t *testing.T) {
		f := &sandboxtest.Fake{Gate: make(chan struct{})}
		cfg := testConfig(1)
		cfg.MaxQueue = 1
		p := newTestPool(t, cfg, f, nil)
		first := goCheckout(t, p, context.Background())
		start := time.Now()
		_, err := p.Checkout(context.Background())
		if !errors.Is(err, kiln.ErrQueueFull) {
			t.Errorf("got error %v, want ErrQueueFull", err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("got ErrQueueFull after %v, want it at once", d)
		}
		f.Gate <- struct{}{}
		if r := receive(t, first); r.err != nil {
			t.Errorf("first checkout: got error %v, want a sandbox", r.err)
		} else {
			p.Release(r.sb)
		}
	})
	t.Run("no queue", func(t *testing.T) {
		f := &sandboxtest.Fake{Gate: make(chan struct{})}
		cfg := testConfig(1)
		cfg.MaxQueue = 0
		p := newTestPool(t, cfg, f, nil)
		if _, err := p.Checkout(context.Background()); !errors.Is(err, kiln.ErrQueueFull) {
			t.Errorf("got error %v, want ErrQueueFull", err)
		}
	})
	t.Run("queue timeout", func(t *testing.T) {
		f := &sandboxtest.Fake{Gate: make(chan struct{})}
		cfg := testConfig(1)
		cfg.QueueTimeout = 30 * time.Millisecond
		obs := &fakeObserver{}
		p := newTestPool(t, cfg, f, obs)
		start := time.Now()
		_, err := p.Checkout(context.Background())
		d := time.Since(start)
		if !errors.Is(err, kiln.ErrQueueTimeout) {
			t.Errorf("got error %v, want ErrTimeout", err)
		}
		if d < 30*time.Millisecond || d > time.Second {
			t.Errorf("got ErrTimeout after %v, want it after about 30ms", d)
		}
		if got := p.Stats().Waiting; got != 0 {
			t.Errorf("got %d waiting after the timeout, want 0", got)
		}
		if got := obs.waited.Load(); got != 1 {
			t.Errorf("got %d Waited events, want 1", got)
		}
	})
	t.Run("context cancelled", func(t *testing.T) {
		f := &sandboxtest.Fake{Gate: make(chan struct{})}
		p := newTestPool(t, testConfig(1), f, nil)
		ctx, cancel := context.WithCancel(context.Background())
		ch := goCheckout(t, p, ctx)
		cancel()
		if r := receive(t, ch); !errors.Is(r.err, context.Canceled) {
			t.Errorf("got error %v, want context.Canceled", r.err)
		}
		if got := p.Stats().Waiting; got != 0 {
			t.Errorf("got %d waiting after the cancel, want 0", got)
		}
		// The pool still works: the next sandbox goes to the next caller.
		next := goCheckout(t, p, context.Background())
		f.Gate <- struct{}{}
		if r := receive(t, next); r.err != nil {
			t.Errorf("got error %v after a cancelled checkout, want a sandbox", r.err)
		} else {
			p.Release(r.sb)
		}
	})
	t.Run("context already done", func(t *testing.T) {
		f := &sandboxtest.Fake{Gate: make(chan struct{})}
		p := newTestPool(t, testConfig(1), f, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		if _, err := p.Checkout(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got error %v, want context.DeadlineExceeded", err)
		}
	})
}

// TestFIFO checks that waiting checkouts are served in the order they arrived.
func TestFIFO(t *testing.T) {
	f := &sandboxtest.Fake{Gate: make(chan struct{})}
	cfg := testConfig(1)
	cfg.Warmers = 1
	p := newTestPool(t, cfg, f, nil)
	var waiters []<-chan result
	for range 3 {
		waiters = append(waiters, goCheckout(t, p, context.Background()))
	}
	for i, ch := range waiters {
		f.Gate <- struct{}{}
		r := receive(t, ch)
		if r.err != nil {
			t.Fatalf("waiter %d: got error %v, want a sandbox", i, r.err)
		}
		for j, later := range waiters[i+1:] {
			select {
			case r := <-later:
				t.Fatalf("waiter %d served before waiter %d (%v)", i+1+j, i, r)
			default:
			}
		}
		p.Release(r.sb)
	}
}

func TestDeadSandboxes(t *testing.T) {
	t.Run("swept from the pool and replaced", func(t *testing.T) {
		f := &sandboxtest.Fake{}
		p := newTestPool(t, testConfig(2), f, nil)
		waitFor(t, "the pool to warm", func() bool { return p.Stats().Ready == 2 })
		made := f.Sandboxes()
		made[0].Kill()
		// The refill loop sweeps on its own ticker, within about a second.
		waitFor(t, "the sweep", func() bool { return p.Stats().Counts.Died == 1 })
		waitFor(t, "the replacement", func() bool { return p.Stats().Ready == 2 })
		waitFor(t, "the removal", func() bool { return made[0].Removals() == 1 })
		if n := starts(f); n != 3 {
			t.Errorf("got %d starts, want 3", n)
		}
		for range 2 {
			if sb := checkout(t, p); sb == made[0] {
				t.Errorf("got the dead sandbox from Checkout, want a live one")
			}
		}
	})
	t.Run("skipped by checkout", func(t *testing.T) {
		f := &sandboxtest.Fake{}
		cfg := testConfig(1)
		p := newTestPool(t, cfg, f, nil)
		waitFor(t, "the pool to warm", func() bool { return p.Stats().Ready == 1 })
		made := f.Sandboxes()
		made[0].Kill()
		if st := p.Stats(); len(st.Sandboxes) == 1 && st.Sandboxes[0].State != "dead" {
			t.Errorf("got state %q for a dead sandbox, want dead", st.Sandboxes[0].State)
		}
		sb := checkout(t, p)
		if sb == made[0] {
			t.Fatalf("got the dead sandbox, want a live one")
		}
		p.Release(sb)
		if got := p.Stats().Counts.Died; got != 1 {
			t.Errorf("got %d died, want 1", got)
		}
		waitFor(t, "the removal", func() bool { return made[0].Removals() == 1 })
	})
}

func TestFactoryFailures(t *testing.T) {
	f := &sandboxtest.Fake{}
	f.Fail(errStart)
	obs := &fakeObserver{}
	cfg := testConfig(2)
	cfg.Warmers = 1
	p := newTestPool(t, cfg, f, obs)
	waitFor(t, "failures", func() bool { return p.Stats().Counts.Failed >= 3 })
	st := p.Stats()
	if st.LastError == "" {
		t.Errorf("got no last error while failing, want %q", errStart)
	}
	if p.CanServe() {
		t.Errorf("got CanServe true while every warm-up fails, want false")
	}
	if obs.warmFailed.Load() < 3 {
		t.Errorf("got %d WarmFailed events, want at least 3", obs.warmFailed.Load())
	}

	f.Fail(nil)
	waitFor(t, "recovery", func() bool { return p.Stats().Ready == 2 })
	st = p.Stats()
	if st.LastError != "" {
		t.Errorf("got last error %q after a success, want none", st.LastError)
	}
	if !p.CanServe() {
		t.Errorf("got CanServe false after recovery, want true")
	}

	// Backoff: no warm-up starts before BackoffMin<<(n-1) (capped at BackoffMax)
	// has passed since the n-th consecutive failure.
	c := f.Counts()
	for i, failed := range c.FailedAt {
		if i+1 >= len(c.StartedAt) {
			break
		}
		want := min(cfg.BackoffMin<<min(i, 16), cfg.BackoffMax)
		if gap := c.StartedAt[i+1].Sub(failed); gap < want {
			t.Errorf("failure %d: next start after %v, want at least %v", i+1, gap, want)
		}
	}
}

// TestCanServeBeforeFirstSuccess checks that a pool that has never made a sandbox does
// not claim it can serve just because a warm-up is under way.
func TestCanServeBeforeFirstSuccess(t *testing.T) {
	f := &sandboxtest.Fake{Gate: make(chan struct{})}
	p := newTestPool(t, testConfig(1), f, nil)
	waitFor(t, "a warm-up", func() bool { return p.Stats().Warming == 1 })
	if p.CanServe() {
		t.Errorf("got CanServe true before any sandbox was made, want false")
	}
	f.Gate <- struct{}{}
	waitFor(t, "the sandbox", func() bool { return p.Stats().Ready == 1 })
	if !p.CanServe() {
		t.Errorf("got CanServe false with a ready sandbox, want true")
	}
}

func TestWarmupTimeout(t *testing.T) {
	f := &sandboxtest.Fake{Gate: make(chan struct{})} // never opened: every Start hangs
	cfg := testConfig(1)
	cfg.WarmupTimeout = 10 * time.Millisecond
	p := newTestPool(t, cfg, f, nil)
	waitFor(t, "a timed-out warm-up", func() bool { return p.Stats().Counts.Failed >= 1 })
	if st := p.Stats(); st.LastError == "" {
		t.Errorf("got no last error after a warm-up timeout, want one")
	}
}

func TestWarmersCap(t *testing.T) {
	f := &sandboxtest.Fake{Gate: make(chan struct{})}
	cfg := testConfig(6)
	cfg.Warmers = 2
	p := newTestPool(t, cfg, f, nil)
	waitFor(t, "warm-ups", func() bool { return f.Counts().Starting == 2 })
	time.Sleep(20 * time.Millisecond)
	if n := starts(f); n != 2 {
		t.Errorf("got %d Start calls with 2 warmers blocked, want 2", n)
	}
	if got := p.Stats().Warming; got != 2 {
		t.Errorf("got %d warming, want 2", got)
	}
	close(f.Gate)
	waitFor(t, "the pool to warm", func() bool { return p.Stats().Ready == 6 })
	if n := f.Counts().MaxStarting; n != 2 {
		t.Errorf("got %d Start calls at once, want at most and at least 2", n)
	}
}

// TestWaitersWarmPastSize checks that checkouts waiting beyond the pool's size get
// warm-ups of their own.
func TestWaitersWarmPastSize(t *testing.T) {
	f := &sandboxtest.Fake{}
	cfg := testConfig(1)
	cfg.Warmers = 4
	p := newTestPool(t, cfg, f, nil)
	var held []*sandboxtest.Sandbox
	for range 4 {
		held = append(held, checkout(t, p))
	}
	for _, sb := range held {
		p.Release(sb)
	}
	checkRemovedSoon(t, held)
}

func checkRemovedSoon(t *testing.T, sbs []*sandboxtest.Sandbox) {
	t.Helper()
	for _, sb := range sbs {
		waitFor(t, sb.ID()+" removed", func() bool { return sb.Removals() == 1 })
	}
}

func TestRemoveFailureCountsLeaked(t *testing.T) {
	f := &sandboxtest.Fake{RemoveErr: errors.New("daemon gone")}
	obs := &fakeObserver{}
	p := newTestPool(t, testConfig(1), f, obs)
	sb := checkout(t, p)
	p.Release(sb)
	waitFor(t, "the leak count", func() bool { return p.Stats().Counts.Leaked == 1 })
	if got := p.Stats().Counts.Removed; got != 0 {
		t.Errorf("got %d removed, want 0 when removal failed", got)
	}
	waitFor(t, "the Removed event", func() bool { return obs.removed.Load() >= 1 })
}

func TestClose(t *testing.T) {
	t.Run("fails waiters, cancels warm-ups, idempotent", func(t *testing.T) {
		f := &sandboxtest.Fake{Gate: make(chan struct{}, 2)}
		f.Gate <- struct{}{}
		f.Gate <- struct{}{}
		cfg := testConfig(2)
		cfg.QueueTimeout = 10 * time.Second
		p := New(cfg, f, discard(), nil)
		waitFor(t, "the pool to warm", func() bool { return p.Stats().Ready == 2 })
		held := []*sandboxtest.Sandbox{checkout(t, p), checkout(t, p)}
		// The replacement warm-ups hang on the gate; this checkout waits for them.
		waiter := goCheckout(t, p, context.Background())

		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Fatalf("Close: got %v, want nil", err)
		}
		if r := receive(t, waiter); !errors.Is(r.err, kiln.ErrShuttingDown) {
			t.Errorf("waiter: got error %v, want ErrClosed", r.err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Close took %v with a hanging warm-up, want it cancelled", d)
		}
		made := f.Sandboxes()
		for _, sb := range made {
			if n := sb.Removals(); n != 0 {
				t.Errorf("%s: got %d removals of a checked-out sandbox after Close, want 0", sb.ID(), n)
			}
		}
		if err := p.Close(ctx); err != nil {
			t.Errorf("second Close: got %v, want nil", err)
		}
		if _, err := p.Checkout(context.Background()); !errors.Is(err, kiln.ErrShuttingDown) {
			t.Errorf("Checkout after Close: got %v, want ErrClosed", err)
		}
		if p.CanServe() {
			t.Errorf("got CanServe true after Close, want false")
		}
		// A sandbox released after Close is still removed.
		p.Release(held[0])
		p.Release(held[1])
		if err := p.Close(ctx); err != nil {
			t.Errorf("third Close: got %v, want nil", err)
		}
		checkRemovedOnce(t, f)
	})
	t.Run("waits for removals", func(t *testing.T) {
		f := &sandboxtest.Fake{RemoveDelay: 50 * time.Millisecond}
		p := New(testConfig(2), f, discard(), nil)
		waitFor(t, "the pool to warm", func() bool { return p.Stats().Ready == 2 })
		if err := p.Close(context.Background()); err != nil {
			t.Fatalf("Close: got %v, want nil", err)
		}
		checkRemovedOnce(t, f) // Remove counts at its end: Close waited for it
		if got := p.Stats().Counts.Removed; got != 2 {
			t.Errorf("got %d removed after Close, want 2", got)
		}
	})
	t.Run("waits for a release during Close", func(t *testing.T) {
		f := &sandboxtest.Fake{RemoveDelay: 100 * time.Millisecond}
		p := New(testConfig(2), f, discard(), nil)
		waitFor(t, "the pool to warm", func() bool { return p.Stats().Ready == 2 })
		held := checkout(t, p)
		closed := make(chan error, 1)
		go func() { closed <- p.Close(context.Background()) }()
		time.Sleep(20 * time.Millisecond) // Close is waiting for the ready sandbox's removal
		p.Release(held)
		if err := <-closed; err != nil {
			t.Fatalf("Close: got %v, want nil", err)
		}
		if n := held.Removals(); n != 1 {
			t.Errorf("got %d removals of the sandbox released during Close when it returned, want 1", n)
		}
		checkRemovedOnce(t, f)
	})
	t.Run("gives up at its context", func(t *testing.T) {
		f := &sandboxtest.Fake{RemoveDelay: 500 * time.Millisecond}
		p := New(testConfig(1), f, discard(), nil)
		waitFor(t, "the pool to warm", func() bool { return p.Stats().Ready == 1 })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close: got %v, want context.DeadlineExceeded", err)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Errorf("second Close: got %v, want nil", err)
		}
		checkRemovedOnce(t, f)
	})
}

// TestHolds checks that the pool claims exactly the sandboxes that are ready or
// checked out: a released one, or one that died in the pool, is no longer its own.
func TestHolds(t *testing.T) {
	f := &sandboxtest.Fake{}
	p := newTestPool(t, testConfig(2), f, nil)
	waitFor(t, "the pool to warm", func() bool { return p.Stats().Ready == 2 })
	out := checkout(t, p)
	if !p.Holds(out.ID()) {
		t.Errorf("a checked-out sandbox is not held")
	}
	waitFor(t, "the pool to refill", func() bool { return p.Stats().Ready == 2 })
	made := f.Sandboxes()
	for _, sb := range made {
		if sb != out && !p.Holds(sb.ID()) {
			t.Errorf("ready sandbox %s is not held", sb.ID())
		}
	}
	p.Release(out)
	if p.Holds(out.ID()) {
		t.Errorf("a released sandbox is still held")
	}
	dying := made[len(made)-1]
	dying.Kill()
	waitFor(t, "the dead sandbox to be dropped", func() bool { return !p.Holds(dying.ID()) })
	if p.Holds("no-such-sandbox") {
		t.Errorf("an unknown id is held")
	}
}

// TestRefillDelay checks when the replacement of a checked-out sandbox starts: not
// while its run is young, at once when the run releases it, when the delay runs out
// for a run that is still going, and at once whenever a checkout waits.
func TestRefillDelay(t *testing.T) {
	// warmPool is a full pool of size whose replacements are held back for delay.
	warmPool := func(t *testing.T, size int, delay time.Duration) (*sandboxtest.Fake, *Pool) {
		f := &sandboxtest.Fake{}
		cfg := testConfig(size)
		cfg.RefillDelay = delay
		p := newTestPool(t, cfg, f, nil)
		waitFor(t, "the pool to warm", func() bool { return p.Stats().Ready == size })
		return f, p
	}
	t.Run("release", func(t *testing.T) {
		f, p := warmPool(t, 2, time.Hour)
		sb := checkout(t, p)
		time.Sleep(50 * time.Millisecond) // time to start a replacement, if it were going to
		if got := starts(f); got != 2 {
			t.Fatalf("got %d warm-ups while the run is young, want 2 (no replacement yet)", got)
		}
		other := checkout(t, p)
		if !p.CanServe() {
			t.Errorf("got CanServe false with nothing ready but two replacements held, want true")
		}
		p.Release(other)
		p.Release(sb)
		waitFor(t, "the replacements after release", func() bool { return starts(f) == 4 })
		waitFor(t, "the pool to refill", func() bool { return p.Stats().Ready == 2 })
	})
	t.Run("expiry", func(t *testing.T) {
		const delay = 100 * time.Millisecond
		f, p := warmPool(t, 2, delay)
		taken := time.Now()
		sb := checkout(t, p)
		defer p.Release(sb)
		waitFor(t, "the replacement of a run still going", func() bool { return starts(f) == 3 })
		if took := time.Since(taken); took < delay {
			t.Errorf("replacement started %v after the checkout, want at least %v", took, delay)
		}
	})
	t.Run("waiter", func(t *testing.T) {
		// Two runs going, both replacements held; a third checkout waits, and the
		// pool warms for it and for the two held ones at once.
		f, p := warmPool(t, 2, time.Hour)
		a, b := checkout(t, p), checkout(t, p)
		defer p.Release(a)
		defer p.Release(b)
		done := make(chan result, 1)
		go func() {
			sb, err := p.Checkout(context.Background())
			fake, _ := sb.(*sandboxtest.Sandbox)
			done <- result{fake, err}
		}()
		r := receive(t, done)
		if r.err != nil {
			t.Fatalf("waiting Checkout: got %v, want a sandbox", r.err)
		}
		defer p.Release(r.sb)
		waitFor(t, "the held replacements to start with the waiter's", func() bool { return starts(f) == 4 })
	})
}

// TestKeep checks a sandbox kept by its checkout: it is replaced at once, held (so that no
// sweep removes it) but not counted in use, removed once at Release, and at Close when
// still kept.
func TestKeep(t *testing.T) {
	f := &sandboxtest.Fake{}
	p := New(testConfig(1), f, discard(), nil)
	kept := checkout(t, p)
	p.Keep(kept)
	waitFor(t, "the replacement", func() bool { return p.Stats().Ready == 1 })
	if st := p.Stats(); st.InUse != 0 || st.Kept != 1 || !p.Holds(kept.ID()) {
		t.Errorf("got in use %d, kept %d, holds %v; want 0, 1, true", st.InUse, st.Kept, p.Holds(kept.ID()))
	}
	if n := kept.Removals(); n != 0 {
		t.Errorf("got %d removals of the kept sandbox, want 0", n)
	}
	p.Release(kept)
	waitFor(t, "the kept sandbox's removal", func() bool { return kept.Removals() == 1 })
	if st := p.Stats(); st.Kept != 0 || p.Holds(kept.ID()) {
		t.Errorf("after Release: got kept %d, holds %v; want 0, false", st.Kept, p.Holds(kept.ID()))
	}

	second := checkout(t, p)
	p.Keep(second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := second.Removals(); n != 1 {
		t.Errorf("a sandbox still kept at Close: got %d removals, want 1", n)
	}
	late := startOne(t, "late-")
	p.Keep(late) // a checkout that ends after Close: nothing is left behind
	waitFor(t, "the late sandbox's removal", func() bool { return late.Removals() == 1 })
	checkRemovedOnce(t, f)
}
