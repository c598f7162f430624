package session

import (
	"fmt"
	"sync"

	"github.com/kilnsh/kiln"
)

// admission counts each caller's calls in flight against Limits.MaxConcurrent
// (MAX_CONCURRENT_PER_KEY), whichever front end they came through: REST, MCP and
// Jupyter take the same slots. A caller with nothing in flight is not remembered.
type admission struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// Admit takes one of the caller's execution slots for a run, until release is called
// (once; later calls do nothing). Exec takes one itself; a front end takes one first
// when it must know before the call starts (a notebook's execution count, a program
// that waits on its tool calls across requests), and marks the call Admitted. The error
// is kiln.CodeRateLimited, for the concurrency quota, when every slot is taken.
func (s *Service) Admit(c Caller) (release func(), err error) {
	a := &s.admission
	if a.max <= 0 {
		return func() {}, nil
	}
	key := c.admissionKey()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n[key] >= a.max {
		// Nobody knows when a run ends; a second is a polite first retry.
		return nil, s.refuse(&kiln.Error{Code: kiln.CodeRateLimited, RetryAfter: 1, Quota: kiln.QuotaConcurrency, Message: fmt.Sprintf(
			"concurrency quota: this caller (a user under signed tokens, else an API key) has MAX_CONCURRENT_PER_KEY=%d "+
				"executions in flight, through any of kiln's front ends; wait for one to finish", a.max)})
	}
	if a.n == nil {
		a.n = map[string]int{}
	}
	a.n[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.n[key]--; a.n[key] <= 0 {
				delete(a.n, key)
			}
		})
	}, nil
}
