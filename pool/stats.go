package pool

import (
	"time"
)

// Stats is a snapshot of the pool.
type Stats struct {
	Target    int
	Ready     int
	Warming   int
	InUse     int
	Kept      int // kept by their checkouts (live sessions), outside the pool's count
	Waiting   int
	Counts    Counts
	LastError string // the last warm-up error, cleared by the next success
	Sandboxes []SandboxInfo
}

// SandboxInfo describes one ready sandbox.
type SandboxInfo struct {
	ID    string
	State string
	Age   time.Duration
}

// Stats returns a snapshot of the pool's state.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	st := Stats{
		Target:    p.cfg.Size,
		Ready:     len(p.ready),
		Warming:   p.warming,
		InUse:     len(p.out),
		Kept:      len(p.kept),
		Waiting:   len(p.waiters),
		Counts:    p.counts,
		LastError: p.lastErr,
	}
	for _, e := range p.ready {
		state := "ready"
		if isDone(e.sb) {
			state = "dead"
		}
		st.Sandboxes = append(st.Sandboxes, SandboxInfo{ID: e.sb.ID(), State: state, Age: now.Sub(e.since)})
	}
	return st
}

// CanServe reports whether a checkout could be served soon: a sandbox is ready, or
// warm-ups are going (or held back for a while), one has succeeded before and the last
// one did not fail.
func (p *Pool) CanServe() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	// A replacement held back (Config.RefillDelay) starts within that delay: as good as
	// one warming.
	held, _ := p.heldLocked()
	return len(p.ready) > 0 || (p.warming+held > 0 && p.failures == 0 && p.counts.Created > 0)
}
