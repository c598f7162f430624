package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/sandbox"
)

// Starter makes ready sandboxes (a sandbox.Runtime does). Start returns only once the
// sandbox can serve, and cleans up after itself when it fails. A sandbox the pool
// removes is removed exactly once, with a context that belongs to the pool, never to a
// request.
type Starter interface {
	Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error)
}

// Config sizes a pool and says what its sandboxes are.
type Config struct {
	Spec          sandbox.Spec  // what every sandbox of the pool is
	Size          int           // sandboxes kept warm
	Warmers       int           // sandboxes warming at once, at most
	QueueTimeout  time.Duration // longest a checkout waits
	MaxQueue      int           // checkouts waiting at once, at most
	WarmupTimeout time.Duration // longest one sandbox may take to become ready
	RemoveTimeout time.Duration // longest one removal may take
	// RefillDelay holds back the replacement of a sandbox taken from the ready set
	// while its run is young: the replacement starts when the run releases it or
	// RefillDelay after the checkout, whichever comes first, and at once while a
	// checkout waits. A warm-up started beside a short run takes the cores it
	// needs (on 2 cores, a stateless print(1) took 1.3 ms longer); 0 starts every
	// replacement at checkout.
	RefillDelay time.Duration
	// BackoffMin and BackoffMax bound the pause between warm-ups after failures.
	BackoffMin, BackoffMax time.Duration
	// Await, when set, is what the pool needs before it can warm anything (its image, still
	// being built): the refill loop calls it every second until it returns nil, and until
	// then checkouts fail at once with a 503 that carries its error and AwaitRetryAfter.
	Await           func(ctx context.Context) error
	AwaitRetryAfter time.Duration
}

// Observer is told about pool events; kiln's metrics implement it. Methods are called
// without the pool's lock held and must not block.
type Observer interface {
	Warmed(d time.Duration)
	WarmFailed(err error)
	Removed(err error)
	Waited(d time.Duration, share Share, err error)
}

// Share is where a checkout stood among the waiting ones when it came, for the operator's
// view of fairness: ShareWithin when its caller had no other checkout waiting (it waits at
// most one turn of each other caller), ShareOver when it had (one of a burst, which waits
// behind the other callers' turns). A checkout served at once is within its share.
type Share string

// The shares of a checkout.
const (
	ShareWithin Share = "within"
	ShareOver   Share = "over"
)

// Pool keeps Config.Size sandboxes warm. Create it with New; Close it when done.
type Pool struct {
	cfg     Config
	starter Starter
	log     *slog.Logger
	obs     Observer
	now     func() time.Time

	ctx    context.Context // cancelled by Close; governs warm-ups
	cancel context.CancelFunc
	wake   chan struct{}
	wg     sync.WaitGroup // the refill loop and warm-ups, which only start while it runs

	mu      sync.Mutex
	ready   []entry  // oldest first
	waiters []waiter // checkouts waiting for a sandbox, in arrival order
	// served is, by caller, the turn (a count of hand-overs) at which the caller's last
	// waiting checkout got its sandbox: handOverLocked serves the caller served longest
	// ago first, so that waiting checkouts take turns across callers.
	served  map[string]uint64
	turn    uint64
	warming int
	// out holds the sandboxes checked out, by id, with the time before which their
	// replacement is held back (zero when it is not: see Config.RefillDelay).
	out map[string]time.Time
	// kept holds the sandboxes a checkout kept (Keep): no longer the pool's to count or
	// replace, still its to remove, at Release or at Close.
	kept map[string]sandbox.Sandbox
	// sized are the sandboxes started for one request's own limits (CheckoutSized), out or
	// kept: never warm, never replaced, at most Config.Size of them at once.
	sized    map[string]bool
	starting int       // sized sandboxes being started
	awaiting error     // Config.Await's last error, until it returns nil
	failures int       // consecutive warm-up failures
	retryAt  time.Time // no warm-up before this, after failures
	closed   bool
	// removals counts removals under way; idle is signalled when it drops to zero.
	// Not a WaitGroup: a release may start a removal while Close is already waiting.
	removals int
	idle     sync.Cond
	counts   Counts
	lastErr  string
	// langs are the languages the pool's sandboxes run, as the first that became ready
	// said in its handshake (they share their image); learned closes then.
	langs   []string
	learned chan struct{}
	// makeRoom asks for room when the runtime has none (MakeRoomWith).
	makeRoom func() bool
}

type entry struct {
	sb    sandbox.Sandbox
	since time.Time
}

// Counts are the pool's running totals since it started.
type Counts struct {
	Created int64 // sandboxes that became ready
	Failed  int64 // warm-ups that failed
	Removed int64 // sandboxes removed
	Leaked  int64 // removals that failed: sandboxes possibly left behind
	Died    int64 // sandboxes that died while waiting in the pool
}

// New starts a pool that begins warming at once, its sandboxes started by st.
func New(cfg Config, st Starter, log *slog.Logger, obs Observer) *Pool {
	if cfg.Warmers < 1 {
		cfg.Warmers = 1
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = 500 * time.Millisecond
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = 30 * time.Second
	}
	if cfg.RemoveTimeout <= 0 {
		cfg.RemoveTimeout = 30 * time.Second
	}
	if obs == nil {
		obs = nopObserver{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{
		cfg: cfg, starter: st, log: log, obs: obs, now: time.Now, learned: make(chan struct{}),
		ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1),
		out: map[string]time.Time{}, kept: map[string]sandbox.Sandbox{}, sized: map[string]bool{},
	}
	p.idle.L = &p.mu
	if cfg.Await != nil {
		p.awaiting = errors.New("the pool has not checked what it needs yet")
	}
	p.wg.Add(1)
	go p.refillLoop()
	return p
}

// Awaiting returns why the pool cannot warm anything yet (Config.Await's error), or nil.
func (p *Pool) Awaiting() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.awaiting
}

// awaitingError is a checkout's answer while the pool awaits what it needs.
func (p *Pool) awaitingError(err error) *kiln.Error {
	return &kiln.Error{Code: kiln.CodeUnavailable, RetryAfter: max(1, int(p.cfg.AwaitRetryAfter.Seconds())),
		Message: fmt.Sprintf("this language's sandboxes are not available yet: %v", err)}
}

// Checkout hands out a ready sandbox for the caller's exclusive use. It waits at most
// the queue timeout, and fails at once when MaxQueue callers are already waiting.
// The caller must give the sandbox back with Release, whatever happens.
func (p *Pool) Checkout(ctx context.Context) (sandbox.Sandbox, error) {
	start := p.now()
	share := ShareWithin
	sb, err := p.checkout(ctx, &share)
	p.obs.Waited(p.now().Sub(start), share, err)
	return sb, err
}

func (p *Pool) checkout(ctx context.Context, share *Share) (sandbox.Sandbox, error) {
	var zero sandbox.Sandbox
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return zero, kiln.ErrShuttingDown
	}
	if sb, ok := p.takeReadyLocked(); ok {
		p.mu.Unlock()
		p.poke()
		return sb, nil
	}
	if p.awaiting != nil {
		err := p.awaitingError(p.awaiting)
		p.mu.Unlock()
		return zero, err
	}
	if len(p.waiters) >= p.cfg.MaxQueue {
		p.mu.Unlock()
		return zero, kiln.ErrQueueFull
	}
	w := make(chan sandbox.Sandbox, 1)
	caller := kiln.CallerOf(ctx)
	for _, x := range p.waiters {
		if x.caller == caller {
			*share = ShareOver
			break
		}
	}
	p.waiters = append(p.waiters, waiter{ch: w, caller: caller})
	p.mu.Unlock()
	p.poke()

	timer := time.NewTimer(p.cfg.QueueTimeout)
	defer timer.Stop()
	var err error
	select {
	case sb, ok := <-w:
		if !ok {
			return zero, kiln.ErrShuttingDown
		}
		return sb, nil
	case <-timer.C:
		err = kiln.ErrQueueTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.waiters {
		if x.ch == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			return zero, err
		}
	}
	// A sandbox was handed over while we gave up: pass it on to the next waiter, or
	// put it back at the front; after Close nobody else will remove it, so remove it.
	if sb, ok := <-w; ok {
		delete(p.out, sb.ID())
		switch {
		case p.closed || isDone(sb):
			p.removeLocked(sb)
		case len(p.waiters) > 0:
			p.handOverLocked(sb)
		default:
			p.ready = append([]entry{{sb: sb, since: p.now()}}, p.ready...)
		}
	}
	return zero, err
}

// waiter is a checkout waiting for a sandbox, for a caller (kiln.CallerOf its context).
type waiter struct {
	ch     chan sandbox.Sandbox
	caller string
}

// handOverLocked gives sb to a waiting checkout, of which there must be one: the oldest of
// the caller whose waiting checkouts were served longest ago (never, for a caller new to
// the queue). Callers thus take turns: one caller's burst costs another at most one turn.
func (p *Pool) handOverLocked(sb sandbox.Sandbox) {
	next := 0
	for i, w := range p.waiters {
		if p.served[w.caller] < p.served[p.waiters[next].caller] {
			next = i
		}
	}
	w := p.waiters[next]
	p.waiters = append(p.waiters[:next], p.waiters[next+1:]...)
	p.turn++
	if p.served == nil || len(p.served) > 4*len(p.waiters)+64 {
		// Forget the callers no longer waiting: a caller that comes back is new again.
		kept := map[string]uint64{}
		for _, x := range p.waiters {
			kept[x.caller] = p.served[x.caller]
		}
		p.served = kept
	}
	p.served[w.caller] = p.turn
	p.out[sb.ID()] = time.Time{} // demand outruns the pool: no holding back
	w.ch <- sb
}

// takeReadyLocked pops the oldest live sandbox, sending dead ones to removal.
func (p *Pool) takeReadyLocked() (sandbox.Sandbox, bool) {
	for len(p.ready) > 0 {
		e := p.ready[0]
		p.ready = p.ready[1:]
		if isDone(e.sb) {
			p.counts.Died++
			p.log.Warn("sandbox died in the pool", "sandbox", e.sb.ID())
			p.removeLocked(e.sb)
			continue
		}
		var hold time.Time
		if p.cfg.RefillDelay > 0 {
			hold = p.now().Add(p.cfg.RefillDelay)
		}
		p.out[e.sb.ID()] = hold
		return e.sb, true
	}
	var zero sandbox.Sandbox
	return zero, false
}

// Release ends a checkout, or gives back a sandbox kept: the sandbox is removed in the
// background, and a checked-out one's replacement starts warming. A sandbox never goes
// back to the ready set.
func (p *Pool) Release(sb sandbox.Sandbox) {
	p.mu.Lock()
	delete(p.out, sb.ID())
	delete(p.kept, sb.ID())
	delete(p.sized, sb.ID())
	p.removeLocked(sb)
	p.mu.Unlock()
	p.poke()
}

// CheckoutSized starts a sandbox of the pool's spec with the limits a request asks for,
// for a runtime that cannot resize a warm one: a pool of that size with none warm, so the
// request waits for a start. It is the caller's as a checkout's sandbox is (Keep, Release,
// removed at Close when kept); nothing replaces it. At most Config.Size are out at once.
func (p *Pool) CheckoutSized(ctx context.Context, milliCPU, memoryMB int64) (sandbox.Sandbox, error) {
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return nil, kiln.ErrShuttingDown
	case p.awaiting != nil:
		err := p.awaitingError(p.awaiting)
		p.mu.Unlock()
		return nil, err
	case len(p.sized)+p.starting >= max(1, p.cfg.Size):
		p.mu.Unlock()
		return nil, kiln.ErrSizedFull
	}
	p.starting++
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	spec := p.cfg.Spec
	spec.MilliCPU, spec.MemoryMB = milliCPU, memoryMB
	// The request's context, bounded as a warm-up is, and cut by Close.
	sctx, cancel := context.WithTimeout(ctx, p.cfg.WarmupTimeout)
	stop := context.AfterFunc(p.ctx, cancel)
	sb, err := p.start(sctx, spec)
	stop()
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starting--
	if err != nil {
		return nil, err
	}
	if p.closed {
		p.removeLocked(sb)
		return nil, kiln.ErrShuttingDown
	}
	p.sized[sb.ID()] = true
	p.out[sb.ID()] = time.Time{}
	return sb, nil
}

// Keep ends a checkout without removing the sandbox: the caller keeps it for more work
// of the same owner (a live session) and gives it back with Release. Its replacement
// starts warming at once, so that what the caller keeps never takes from the ready set.
// After Close, the sandbox is removed.
func (p *Pool) Keep(sb sandbox.Sandbox) {
	p.mu.Lock()
	delete(p.out, sb.ID())
	if p.closed {
		p.removeLocked(sb)
	} else {
		p.kept[sb.ID()] = sb
	}
	p.mu.Unlock()
	p.poke()
}

// removeLocked removes sb in the background, with the pool's own deadline.
func (p *Pool) removeLocked(sb sandbox.Sandbox) {
	p.removals++
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RemoveTimeout)
		defer cancel()
		err := sb.Remove(ctx)
		p.mu.Lock()
		if err != nil {
			p.counts.Leaked++
			p.log.Error("sandbox removal failed", "sandbox", sb.ID(), "err", err)
		} else {
			p.counts.Removed++
			p.log.Debug("sandbox removed", "sandbox", sb.ID())
		}
		p.mu.Unlock()
		p.obs.Removed(err)

		p.mu.Lock()
		if p.removals--; p.removals == 0 {
			p.idle.Broadcast()
		}
		p.mu.Unlock()
	}()
}

// Holds reports whether the sandbox with id is ready in the pool, checked out or kept.
// A sandbox of the pool's making that it does not hold, and that no warm-up can
// still be starting, is nobody's: see Config.WarmupTimeout.
func (p *Pool) Holds(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.out[id]; ok {
		return true
	}
	if _, ok := p.kept[id]; ok {
		return true
	}
	for _, e := range p.ready {
		if e.sb.ID() == id {
			return true
		}
	}
	return false
}

// Languages returns the languages the pool's sandboxes run, and whether one has said
// yet.
func (p *Pool) Languages() ([]string, bool) {
	select {
	case <-p.learned:
		return p.langs, true
	default:
		return nil, false
	}
}

// learnLocked records what the first sandbox to become ready runs.
func (p *Pool) learnLocked(sb sandbox.Sandbox) {
	select {
	case <-p.learned:
	default:
		p.langs = slices.Clone(sb.Ready().Capabilities.Languages)
		close(p.learned)
		p.log.Info("pool languages", "languages", p.langs)
	}
}

func (p *Pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func isDone(sb sandbox.Sandbox) bool {
	select {
	case <-sb.Done():
		return true
	default:
		return false
	}
}

type nopObserver struct{}

func (nopObserver) Warmed(time.Duration)               {}
func (nopObserver) WarmFailed(error)                   {}
func (nopObserver) Removed(error)                      {}
func (nopObserver) Waited(time.Duration, Share, error) {}
