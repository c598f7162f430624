package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

// giveUpWhileHandedOver stages the race where a waiting checkout gives up (its context
// ends) just as a sandbox is handed to it: the test holds the pool's lock, cancels the
// waiter, lets it reach the lock, and hands it sb the way a finished warm-up does.
// first, when set, runs once the lock is held, before the waiter is cancelled.
// It returns with the lock still held; the caller unlocks.
func giveUpWhileHandedOver(t *testing.T, p *Pool, cancel context.CancelFunc, sb *sandboxtest.Sandbox, first func()) {
	t.Helper()
	p.mu.Lock()
	if first != nil {
		first()
	}
	cancel()
	time.Sleep(50 * time.Millisecond) // the waiter sees its context end and waits for the lock
	if len(p.waiters) == 0 {
		p.mu.Unlock()
		t.Fatal("got no waiter to hand over to")
	}
	p.handOverLocked(sb)
}

// TestGiveUpPassesSandboxOn checks that a sandbox handed to a checkout that gave up
// goes to the next waiting checkout instead of idling in the pool while it waits.
func TestGiveUpPassesSandboxOn(t *testing.T) {
	f := &sandboxtest.Fake{Gate: make(chan struct{})} // warm-ups hang: only the hand-over serves
	cfg := testConfig(1)
	cfg.Warmers = 1
	cfg.QueueTimeout = 5 * time.Second
	p := newTestPool(t, cfg, f, nil)

	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	first := goCheckout(t, p, ctx1)
	second := goCheckout(t, p, context.Background())

	sb := startOne(t, "handed-over-")
	giveUpWhileHandedOver(t, p, cancel1, sb, nil)
	p.mu.Unlock()

	if r := receive(t, first); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("first checkout: got %v, %v; want context.Canceled (the race was not staged)", r.sb, r.err)
	}
	select {
	case r := <-second:
		if r.err != nil || r.sb != sb {
			t.Fatalf("second checkout: got %v, %v; want the handed-over sandbox", r.sb, r.err)
		}
		if got := p.Stats().InUse; got != 1 {
			t.Errorf("got %d in use, want 1", got)
		}
		p.Release(r.sb)
	case <-time.After(time.Second):
		t.Fatalf("second checkout still waiting with a sandbox in the pool (ready=%d)", p.Stats().Ready)
	}
	waitFor(t, "the removal", func() bool { return sb.Removals() == 1 })
}

// TestGiveUpDuringClose checks that a sandbox handed to a checkout that gave up while
// the pool closes is removed, whichever of the two takes the lock first. (A mutex
// that has been waited on for over a millisecond serves its waiters in order.)
func TestGiveUpDuringClose(t *testing.T) {
	for _, closeFirst := range []bool{true, false} {
		f := &sandboxtest.Fake{Gate: make(chan struct{})}
		cfg := testConfig(1)
		cfg.QueueTimeout = 5 * time.Second
		p := New(cfg, f, discard(), nil)

		ctx, cancel := context.WithCancel(context.Background())
		waiter := goCheckout(t, p, ctx)
		sb := startOne(t, "handed-over-")
		closed := make(chan error, 1)
		startClose := func() {
			go func() { closed <- p.Close(context.Background()) }()
			time.Sleep(20 * time.Millisecond) // Close waits for the lock
		}
		if closeFirst {
			giveUpWhileHandedOver(t, p, cancel, sb, startClose)
		} else {
			giveUpWhileHandedOver(t, p, cancel, sb, nil)
			startClose()
		}
		p.mu.Unlock()

		if r := receive(t, waiter); r.err == nil {
			t.Fatalf("checkout: got %v, want an error (the race was not staged)", r.sb)
		}
		if err := <-closed; err != nil {
			t.Fatalf("Close: got %v, want nil", err)
		}
		waitFor(t, "the handed-over sandbox to be removed", func() bool { return sb.Removals() == 1 })
		if got := p.Stats().Ready; got != 0 {
			t.Fatalf("got %d ready after Close, want 0", got)
		}
	}
}

// TestGiveUpDeadSandbox checks that a dead sandbox handed to a checkout that gave up
// is removed rather than passed on.
func TestGiveUpDeadSandbox(t *testing.T) {
	f := &sandboxtest.Fake{Gate: make(chan struct{})}
	cfg := testConfig(1)
	cfg.QueueTimeout = 5 * time.Second
	p := newTestPool(t, cfg, f, nil)

	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	first := goCheckout(t, p, ctx1)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	second := goCheckout(t, p, ctx2)

	sb := startOne(t, "dead-")
	sb.Kill()
	giveUpWhileHandedOver(t, p, cancel1, sb, nil)
	p.mu.Unlock()

	if r := receive(t, first); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("first checkout: got %v, %v; want context.Canceled (the race was not staged)", r.sb, r.err)
	}
	waitFor(t, "the dead sandbox to be removed", func() bool { return sb.Removals() == 1 })
	select {
	case r := <-second:
		t.Fatalf("second checkout: got %v, %v; want it still waiting", r.sb, r.err)
	default:
	}
	cancel2()
	receive(t, second)
}

// Waiting checkouts take turns across callers: alice's burst, queued first, costs bob's
// one checkout at most one turn, and carol, who comes last, is served before alice's
// third; each caller's own checkouts go in their order. Alice's three behind her first
// are counted as over her share, the others within.
func TestWaitingCallersTakeTurns(t *testing.T) {
	f := &sandboxtest.Fake{Gate: make(chan struct{})} // warm-ups hang: only the hand-overs serve
	cfg := testConfig(1)
	cfg.QueueTimeout = 5 * time.Second
	obs := &fakeObserver{}
	p := newTestPool(t, cfg, f, obs)
	as := func(who string) context.Context { return kiln.WithCaller(context.Background(), who) }

	type queued struct {
		who string
		ch  <-chan result
	}
	var q []queued
	for range 4 {
		q = append(q, queued{"alice", goCheckout(t, p, as("alice"))})
	}
	q = append(q, queued{"bob", goCheckout(t, p, as("bob"))})
	q = append(q, queued{"carol", goCheckout(t, p, as("carol"))})

	var order []string
	for i := range q {
		sb := startOne(t, fmt.Sprintf("turn-%d-", i))
		p.mu.Lock()
		p.handOverLocked(sb)
		p.mu.Unlock()
		got := ""
		for deadline := time.Now().Add(2 * time.Second); got == "" && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			for j, w := range q {
				if w.ch == nil {
					continue
				}
				select {
				case r := <-w.ch:
					if r.sb != sb {
						t.Fatalf("%s's checkout got %v, want the sandbox just handed over", w.who, r.sb)
					}
					got = fmt.Sprintf("%s%d", w.who, j)
					q[j].ch = nil
					p.Release(r.sb)
				default:
				}
			}
		}
		if got == "" {
			t.Fatalf("nobody got hand-over %d", i)
		}
		order = append(order, got)
	}
	if want := []string{"alice0", "bob4", "carol5", "alice1", "alice2", "alice3"}; !slices.Equal(order, want) {
		t.Errorf("served %v, want %v", order, want)
	}
	waitFor(t, "six waits observed", func() bool { return obs.waited.Load() == 6 })
	if got := obs.over.Load(); got != 3 {
		t.Errorf("%d waits over their share, want 3 (alice's behind her first)", got)
	}
}
