package pool

import (
	"context"
	"time"
)

// sweepEvery is how often the refill loop looks for sandboxes that died in the pool.
const sweepEvery = time.Second

// refillLoop keeps ready+warming at the target size, starting at most Warmers
// warm-ups at once and pausing after failures.
func (p *Pool) refillLoop() {
	defer p.wg.Done()
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for p.cfg.Await != nil && !p.await() {
		if !p.sleep(0, tick.C) {
			return
		}
	}
	for {
		p.mu.Lock()
		p.sweepDeadLocked()
		var pause time.Duration
		if wait := p.retryAt.Sub(p.now()); wait > 0 {
			pause = wait
		} else {
			held, next := p.heldLocked()
			for p.warming < p.cfg.Warmers && len(p.ready)+p.warming+held < p.cfg.Size+len(p.waiters) && !p.closed {
				p.warming++
				p.wg.Add(1)
				go p.warmOne()
			}
			pause = next
		}
		p.mu.Unlock()

		if !p.sleep(pause, tick.C) {
			return
		}
	}
}

// await asks Config.Await whether the pool can warm; true once it can. Its error stands
// as the pool's last error meanwhile, logged when it first comes and when it changes.
func (p *Pool) await() bool {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	err := p.cfg.Await(ctx)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		p.awaiting, p.lastErr = nil, ""
		p.log.Info("the pool has what it needs: warming")
		return true
	}
	if p.awaiting == nil || p.awaiting.Error() != err.Error() {
		p.log.Warn("the pool cannot warm yet: its checkouts answer 503 until it can", "err", err)
	}
	p.awaiting, p.lastErr = err, err.Error()
	return false
}

// sleep waits for a poke, a tick or the end of pause (when positive); false means the
// pool is closing.
func (p *Pool) sleep(pause time.Duration, tick <-chan time.Time) bool {
	var retry <-chan time.Time
	if pause > 0 {
		t := time.NewTimer(pause)
		defer t.Stop()
		retry = t.C
	}
	select {
	case <-p.ctx.Done():
		return false
	case <-p.wake:
	case <-tick:
	case <-retry:
	}
	return true
}

// heldLocked counts the checked-out sandboxes whose replacement is still held back
// (Config.RefillDelay), and returns how long until the first hold ends. Nothing is
// held while a checkout waits.
func (p *Pool) heldLocked() (held int, next time.Duration) {
	if len(p.waiters) > 0 {
		return 0, 0
	}
	now := p.now()
	for _, until := range p.out {
		if wait := until.Sub(now); wait > 0 {
			held++
			if next == 0 || wait < next {
				next = wait
			}
		}
	}
	return held, next
}

// sweepDeadLocked drops ready sandboxes whose process has died.
func (p *Pool) sweepDeadLocked() {
	live := p.ready[:0]
	for _, e := range p.ready {
		if isDone(e.sb) {
			p.counts.Died++
			p.log.Warn("sandbox died in the pool", "sandbox", e.sb.ID())
			p.removeLocked(e.sb)
			continue
		}
		live = append(live, e)
	}
	clear(p.ready[len(live):])
	p.ready = live
}

func (p *Pool) warmOne() {
	defer p.wg.Done()
	start := p.now()
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.WarmupTimeout)
	sb, err := p.start(ctx, p.cfg.Spec)
	cancel()
	took := p.now().Sub(start)

	p.mu.Lock()
	p.warming--
	if err != nil {
		p.counts.Failed++
		p.failures++
		p.lastErr = err.Error()
		backoff := p.cfg.BackoffMin << min(p.failures-1, 16)
		backoff = min(backoff, p.cfg.BackoffMax)
		p.retryAt = p.now().Add(backoff)
		closed := p.closed
		p.mu.Unlock()
		if !closed {
			p.log.Error("sandbox warm-up failed", "err", err, "retry_in", backoff.String())
			p.obs.WarmFailed(err)
		}
		p.poke()
		return
	}
	p.failures = 0
	p.retryAt = time.Time{}
	p.lastErr = ""
	p.counts.Created++
	p.learnLocked(sb)
	if p.closed {
		p.removeLocked(sb)
		p.mu.Unlock()
		return
	}
	if len(p.waiters) > 0 {
		p.handOverLocked(sb)
	} else {
		p.ready = append(p.ready, entry{sb: sb, since: p.now()})
	}
	p.mu.Unlock()
	p.obs.Warmed(took)
	p.log.Debug("sandbox ready", "sandbox", sb.ID(), "warmup_ms", took.Milliseconds())
	p.poke()
}

// Close stops warming, fails waiting checkouts, removes every ready and kept sandbox and
// waits for all removals, including those of sandboxes released before ctx ends.
// Sandboxes still checked out are removed when they are released. Close is idempotent.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		for _, w := range p.waiters {
			close(w.ch)
		}
		p.waiters = nil
		for _, e := range p.ready {
			p.removeLocked(e.sb)
		}
		p.ready = nil
		for _, sb := range p.kept {
			p.removeLocked(sb)
		}
		clear(p.kept)
	}
	p.mu.Unlock()
	p.cancel()

	done := make(chan struct{})
	go func() {
		p.wg.Wait() // no warm-up starts after this, so no removal from one either
		p.mu.Lock()
		for p.removals > 0 {
			p.idle.Wait()
		}
		p.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
