package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/executor"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/session"
)

// TestMaxTools is the most tools one programmatic run takes in a ToolHarness.
const TestMaxTools = 3

// ToolRun is a fake of code that calls the client's tools, and of the executor's side
// of that exchange (executor.Executor.Continue and Cancel). The code pauses Rounds
// times, each time on one call of its first tool, with the ids call1, call2...; then,
// when Hang is set, it waits to be cancelled; then it ends with Status (ok when empty)
// and prints "<call id>=<result>" for each result it got, or, when Err is set, fails
// with Err. Continue answers the pause of the run of that id and owner with that
// pause's token, once; Cancel ends the run of that id and owner as cancelled. Like the
// executor, both say conflict for a run that has finished and not found for a run
// that is not the caller's.
type ToolRun struct {
	Rounds int
	Hang   bool
	Status string
	Err    error

	mu       sync.Mutex
	running  map[string]*fakeRun
	finished map[string]string // owner by execution id
	stop     chan struct{}     // closed at the end of the test: every run ends
}

// fakeRun is one run of a ToolRun.
type fakeRun struct {
	owner   string
	token   string // the pause's token; "" when the run is not paused
	calls   map[string]bool
	results chan []protocol.ToolResult // buffered: Continue never waits
	cancel  chan struct{}              // closed by Cancel
}

// errStopped ends the runs still going when the test is over.
var errStopped = errors.New("the test is over")

// Run implements the harness's runner.
func (f *ToolRun) Run(_ context.Context, req executor.Request) (*executor.Result, error) {
	run := &fakeRun{owner: req.Owner, results: make(chan []protocol.ToolResult, 1), cancel: make(chan struct{})}
	f.mu.Lock()
	if f.running == nil {
		f.running, f.finished = map[string]*fakeRun{}, map[string]string{}
	}
	f.running[req.ExecutionID] = run
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.running, req.ExecutionID)
		f.finished[req.ExecutionID] = req.Owner
		f.mu.Unlock()
	}()
	var out strings.Builder
	for round := 1; round <= f.Rounds; round++ {
		call := protocol.ToolCall{ID: fmt.Sprintf("call%d", round), Name: req.Tools[0].Name, Input: json.RawMessage(`{"round":` + fmt.Sprint(round) + `}`)}
		f.mu.Lock()
		run.token, run.calls = fmt.Sprintf("secret%d", round), map[string]bool{call.ID: true}
		f.mu.Unlock()
		req.OnToolCalls(execution.ToolCalls{Round: round, Calls: []protocol.ToolCall{call}, Token: run.token})
		select {
		case results := <-run.results:
			for _, r := range results {
				fmt.Fprintf(&out, "%s=%s\n", r.CallID, r.Result)
			}
		case <-run.cancel:
			return &executor.Result{Status: execution.StatusCancelled, Stdout: out.String(), ExecutionID: req.ExecutionID}, nil
		case <-f.stopped():
			return nil, errStopped
		}
	}
	if f.Hang {
		select {
		case <-run.cancel:
			return &executor.Result{Status: execution.StatusCancelled, Stdout: out.String(), ExecutionID: req.ExecutionID}, nil
		case <-f.stopped():
			return nil, errStopped
		}
	}
	if f.Err != nil {
		return nil, f.Err
	}
	status := f.Status
	if status == "" {
		status = execution.StatusOK
	}
	return &executor.Result{Status: status, Stdout: out.String(), ExecutionID: req.ExecutionID}, nil
}

// stopped is closed once the test is over.
func (f *ToolRun) stopped() chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stop == nil {
		f.stop = make(chan struct{})
	}
	return f.stop
}

// Continue implements session.Config.Continue.
func (f *ToolRun) Continue(id, owner, token string, results []protocol.ToolResult) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	run := f.running[id]
	if run == nil || run.owner != owner {
		if o, ok := f.finished[id]; ok && o == owner {
			return kiln.Errorf(kiln.CodeConflict, "execution %s has already finished", id)
		}
		return kiln.Errorf(kiln.CodeNotFound, "execution %s not found", id)
	}
	if run.token == "" || token != run.token {
		return kiln.Errorf(kiln.CodeConflict, "execution %s is not waiting for these tool results: the continuation was already used", id)
	}
	for _, r := range results {
		if !run.calls[r.CallID] {
			return kiln.Errorf(kiln.CodeInvalid, "tool result for call %q: no such call is waiting", r.CallID)
		}
	}
	run.token = ""
	run.results <- results
	return nil
}

// Paused reports whether the run id waits on its tool calls.
func (f *ToolRun) Paused(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	run := f.running[id]
	return run != nil && run.token != ""
}

// Cancel implements session.Config.Cancel.
func (f *ToolRun) Cancel(id, owner string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if run := f.running[id]; run != nil && run.owner == owner {
		select {
		case <-run.cancel:
		default:
			close(run.cancel)
		}
		return nil
	}
	if o, ok := f.finished[id]; ok && o == owner {
		return kiln.Errorf(kiln.CodeConflict, "execution %s has already finished", id)
	}
	return kiln.Errorf(kiln.CodeNotFound, "execution %s not found", id)
}

// NewToolHarness returns a Harness whose sandboxes run prog, with a session layer that
// takes up to TestMaxTools tools a run and hands continuations and cancels to prog.
// Runs still going when the test ends fail with errStopped.
func NewToolHarness(t *testing.T, cfg HarnessConfig, prog *ToolRun) *Harness {
	t.Helper()
	cfg.Run, cfg.Cancel = prog.Run, prog.Cancel
	h := NewHarness(t, cfg)
	limits := TestLimits
	limits.MaxTools = TestMaxTools
	h.resession(cfg, limits, func(c *session.Config) { c.Continue = prog.Continue })
	t.Cleanup(func() { close(prog.stopped()) })
	return h
}
