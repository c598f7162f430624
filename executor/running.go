package executor

import (
	"context"
	"crypto/subtle"
	"errors"
	"sync"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

// errCancelRequested is the cause of a run's context when Cancel asked for it.
var errCancelRequested = errors.New("cancel requested")

// finishedKept is how many finished executions the registry remembers, so that a
// late cancel is told the run finished (409) rather than that it never was (404).
const finishedKept = 4096

// registry holds the executions under way by id: the one place a cancel (and later
// work that needs a running execution) finds them.
type registry struct {
	mu       sync.Mutex
	running  map[string]*runEntry
	finished map[string]string // id -> owner
	order    []string          // finished ids, oldest first
}

type runEntry struct {
	owner  string
	cancel context.CancelCauseFunc
	wait   *toolWait // while the run waits on its client's tools
}

func (r *registry) add(id, owner string, cancel context.CancelCauseFunc) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running == nil {
		r.running, r.finished = map[string]*runEntry{}, map[string]string{}
	}
	if _, dup := r.running[id]; dup {
		return kiln.Errorf(kiln.CodeInvalid, "execution %s is already running", id)
	}
	if _, dup := r.finished[id]; dup {
		return kiln.Errorf(kiln.CodeInvalid, "execution %s has already run", id)
	}
	r.running[id] = &runEntry{owner: owner, cancel: cancel}
	return nil
}

func (r *registry) done(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.running[id]
	if !ok {
		return
	}
	delete(r.running, id)
	r.finished[id] = e.owner
	r.order = append(r.order, id)
	if len(r.order) > finishedKept {
		delete(r.finished, r.order[0])
		r.order = r.order[1:]
	}
}

// setWait records that the run waits on tools (w), or no longer does (nil).
func (r *registry) setWait(id string, w *toolWait) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.running[id]; ok {
		e.wait = w
	}
}

// deliver hands results to the run id of owner waiting with token; the token is spent.
func (r *registry) deliver(id, owner, token string, results []protocol.ToolResult) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.running[id]
	if !ok || e.owner != owner {
		if o, ok := r.finished[id]; ok && o == owner {
			return kiln.Errorf(kiln.CodeConflict, "execution %s has already finished", id)
		}
		return kiln.Errorf(kiln.CodeNotFound, "execution %s not found", id)
	}
	if e.wait == nil || subtle.ConstantTimeCompare([]byte(e.wait.token), []byte(token)) != 1 {
		return kiln.Errorf(kiln.CodeConflict, "execution %s is not waiting for these tool results: the continuation was already used", id)
	}
	seen := make(map[string]bool, len(results))
	for _, res := range results {
		if !e.wait.calls[res.CallID] || seen[res.CallID] {
			return kiln.Errorf(kiln.CodeInvalid, "tool result for call %q: no such call is waiting, or it is answered twice", res.CallID)
		}
		seen[res.CallID] = true
	}
	e.wait.results <- results
	e.wait = nil
	return nil
}

// cancel asks the running execution id of owner to stop.
func (r *registry) cancel(id, owner string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.running[id]; ok && e.owner == owner {
		e.cancel(errCancelRequested)
		return nil
	}
	if o, ok := r.finished[id]; ok && o == owner {
		return kiln.Errorf(kiln.CodeConflict, "execution %s has already finished", id)
	}
	return kiln.Errorf(kiln.CodeNotFound, "execution %s not found", id)
}

// Cancel interrupts the running execution id, when owner started it: the REPL is
// asked to interrupt the code, and the sandbox is killed if the code has not stopped
// within the interrupt grace. The run then answers its caller with status cancelled.
// A run that has finished is a conflict; an unknown one, or another owner's, is not
// found.
func (e *Executor) Cancel(id, owner string) error { return e.reg.cancel(id, owner) }
