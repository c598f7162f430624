package programmatic

import (
	"sync"

	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/session"
)

// Run is a run with tools, between the requests that drive it: each request waits on
// its next step (Attach, then Pauses or Done, then Detach), and the one that sees it end
// takes its result (Take).
type Run struct {
	id, principal string
	pauses        chan execution.ToolCalls // the pause the next answer reports
	names         []string                 // its keys in Runs.requests; guarded by Runs.mu
	done          chan struct{}            // closed when the run is over

	mu      sync.Mutex
	res     *session.ExecResult
	err     error
	taken   bool // the result went to a request, or was released
	waiting int  // requests waiting on the run's next step
}

// NewRun returns the run with execution id id, started by principal.
func NewRun(id, principal string) *Run {
	return &Run{id: id, principal: principal, pauses: make(chan execution.ToolCalls, 1), done: make(chan struct{})}
}

// ID returns the run's execution id.
func (run *Run) ID() string { return run.id }

// Principal returns who started the run: only they may cancel it, or reuse its
// request ids.
func (run *Run) Principal() string { return run.principal }

// Pause reports that the run waits on tool calls, for the next request to answer with.
// It never blocks (it is the run's execution.Request.OnToolCalls): a pause while the
// last one is still unreported is dropped, and its run times out, as nobody can hold
// that pause's token.
func (run *Run) Pause(tc execution.ToolCalls) {
	select {
	case run.pauses <- tc:
	default:
	}
}

// Pauses delivers each pause, once, to the request that reports it.
func (run *Run) Pauses() <-chan execution.ToolCalls { return run.pauses }

// Done is closed when the run is over (Finish).
func (run *Run) Done() <-chan struct{} { return run.done }

// Finish records the run's end. With no request waiting, nobody will answer with the
// result: its sandbox goes at once.
func (run *Run) Finish(res *session.ExecResult, err error) {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.res, run.err = res, err
	close(run.done)
	if run.waiting == 0 {
		run.drop()
	}
}

// Take hands the result of an ended run to the one request that answers with it: ok is
// false for every other, and when the result was released already. The taker releases
// it.
func (run *Run) Take() (res *session.ExecResult, ok bool, err error) {
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.taken {
		return nil, false, nil
	}
	run.taken = true
	return run.res, true, run.err
}

// Attach starts a request's wait on the run's next step: while one waits, an ended
// run's result is kept for it.
func (run *Run) Attach() {
	run.mu.Lock()
	run.waiting++
	run.mu.Unlock()
}

// Detach ends a request's wait; the last one to leave an ended run releases its result,
// if nobody took it.
func (run *Run) Detach() {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.waiting--
	select {
	case <-run.done:
		if run.waiting == 0 {
			run.drop()
		}
	default:
	}
}

// drop releases a result nobody took. The caller holds mu.
func (run *Run) drop() {
	if !run.taken {
		run.taken = true
		if run.res != nil {
			run.res.Release()
		}
	}
}
