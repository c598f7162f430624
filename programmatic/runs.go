package programmatic

import (
	"sync"
	"time"
)

// Runs holds the runs under way, by execution id and by the request ids that name them;
// and, for a while, the request ids of runs that ended and of cancels that came first
// (ledger.go). The zero value is ready to use, and safe for concurrent use.
type Runs struct {
	mu       sync.Mutex
	runs     map[string]*Run
	requests map[string]*Run // by request id
	recent   ledger
	now      func() time.Time // the ledger's clock; nil is time.Now
}

// Add holds run, by its execution id, until Remove.
func (p *Runs) Add(run *Run) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runs == nil {
		p.runs, p.requests = map[string]*Run{}, map[string]*Run{}
	}
	p.runs[run.id] = run
}

// Get returns the run with execution id id, nil when none is held.
func (p *Runs) Get(id string) *Run {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[id]
}

// Name records that a request named requestID drives run, unless another principal's
// run holds that id, or run is no longer held. An empty id names nothing.
func (p *Runs) Name(run *Run, requestID string) {
	if requestID == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if other := p.requests[requestID]; other != nil && other.principal != run.principal {
		return
	}
	if p.runs[run.id] == run {
		p.requests[requestID] = run
		run.names = append(run.names, requestID)
	}
}

// ByRequest returns the run under way that a request named requestID drives, nil when
// none does.
func (p *Runs) ByRequest(requestID string) *Run {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests[requestID]
}

// Remove lets run go, once it ended: its request ids are remembered for a while as
// those of an ended run, so that a late cancel is answered already_completed.
func (p *Runs) Remove(run *Run) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.runs, run.id)
	for _, k := range run.names {
		if p.requests[k] == run {
			delete(p.requests, k)
			p.recent.done = p.remember(p.recent.done, k, run.principal)
		}
	}
}

// clock returns the time now. The caller holds mu.
func (p *Runs) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}
