package metrics

import (
	"sync"

	"github.com/kilnsh/kiln"
)

// Failure is one execution that did not end ok, as the dashboard lists it. It holds
// no output and no code: only kiln's own classification of what happened.
type Failure struct {
	Time       kiln.Timestamp `json:"time"`
	Status     string         `json:"status"`
	Summary    string         `json:"summary"`
	DurationMS float64        `json:"duration_ms"`
	Sandbox    string         `json:"sandbox,omitempty"` // short container id, when one ran it
}

// ring keeps the last n failures.
type ring struct {
	mu   sync.Mutex
	buf  []Failure
	next int
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]Failure, n)} }

func (r *ring) add(f Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf[r.next] = f
	r.next = (r.next + 1) % len(r.buf)
	r.full = r.full || r.next == 0
}

// list returns the failures, newest first.
func (r *ring) list() []Failure {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	if r.full {
		n = len(r.buf)
	}
	out := make([]Failure, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, r.buf[(r.next-i+len(r.buf))%len(r.buf)])
	}
	return out
}
