package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/protocol"
)

// toolWait is a run waiting on its client's tools, as the registry holds it.
type toolWait struct {
	token   string
	calls   map[string]bool
	results chan []protocol.ToolResult // buffered: Continue never waits
}

// toolEnd ends a run with tools from the host's side: the client took too long, the
// code asked too often, or the run was cancelled while it waited.
type toolEnd struct {
	status, msg string
	code        int
}

func (e *toolEnd) Error() string { return e.msg }

// identifier is what a tool's function name must look like, in Python and in bash.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validateTools checks the tools of a request against the limits.
func (e *Executor) validateTools(req *Request) error {
	if len(req.Tools) == 0 {
		return nil
	}
	if req.OnToolCalls == nil {
		return fmt.Errorf("executor: a request with tools needs OnToolCalls")
	}
	if req.Lang != execution.LangPython && req.Lang != execution.LangBash {
		return kiln.Errorf(kiln.CodeLanguage, "tools are for python and bash code, not %s", req.Lang)
	}
	if len(req.Tools) > e.limits.MaxTools {
		return kiln.Errorf(kiln.CodeInvalid, "%d tools; the limit is %d", len(req.Tools), e.limits.MaxTools)
	}
	seen := make(map[string]string, len(req.Tools))
	for _, t := range req.Tools {
		if t.Name == "" || !identifier.MatchString(t.Function) {
			return kiln.Errorf(kiln.CodeInvalid, "tool %q: %q is not a valid function name", t.Name, t.Function)
		}
		if other, dup := seen[t.Function]; dup {
			return kiln.Errorf(kiln.CodeInvalid, "tools %q and %q are both called %s in code: rename one", other, t.Name, t.Function)
		}
		seen[t.Function] = t.Name
	}
	return nil
}

// awaitTools hands a round of tool calls to the request's OnToolCalls and waits, the
// hard deadline stopped, for Continue to bring the results, which go to the REPL.
func (x *exchange) awaitTools(ctx context.Context, calls []protocol.ToolCall) error {
	lim := x.e.limits
	if len(x.req.Tools) == 0 {
		return fmt.Errorf("%w: tool calls from a run without tools", protocol.ErrMalformed)
	}
	x.rounds++
	if x.rounds > lim.MaxToolRounds {
		return &toolEnd{execution.StatusError, fmt.Sprintf("the program made more than %d rounds of tool calls", lim.MaxToolRounds), 1}
	}
	w := &toolWait{token: kiln.NewID(), calls: make(map[string]bool, len(calls)), results: make(chan []protocol.ToolResult, 1)}
	for _, c := range calls {
		w.calls[c.ID] = true
	}
	if !x.hard.pause() {
		return context.DeadlineExceeded // the time ran out as the calls came
	}
	x.e.reg.setWait(x.req.ExecutionID, w)
	defer x.e.reg.setWait(x.req.ExecutionID, nil)
	x.req.OnToolCalls(execution.ToolCalls{Round: x.rounds, Calls: calls, Token: w.token})

	timer := time.NewTimer(lim.ToolResultTimeout)
	defer timer.Stop()
	var results []protocol.ToolResult
	select {
	case results = <-w.results:
	case <-timer.C:
		return &toolEnd{execution.StatusTimeout, fmt.Sprintf("no tool results within %s", lim.ToolResultTimeout), 124}
	case <-ctx.Done():
		if context.Cause(ctx) == errCancelRequested {
			return &toolEnd{execution.StatusCancelled, "Cancelled while waiting for tool results", 130}
		}
		return ctx.Err()
	}
	frame, err := protocol.EncodeToolResults(x.req.ExecutionID, results)
	if err != nil {
		return err
	}
	for _, b := range frame {
		x.res.WireIn += int64(len(b))
	}
	x.hard.resume()
	sendCtx, stop := mergeCancel(x.hctx, ctx)
	defer stop()
	return x.sb.Send(sendCtx, frame)
}

// Continue answers the tool calls that the running execution id of owner waits on.
// token must be the one its OnToolCalls was given for this pause; a token works once.
// A finished run, or a token already used, is a conflict; another owner's run, or an
// unknown one, is not found. Results name calls of the pause; a call left out raises an
// error in the code.
func (e *Executor) Continue(id, owner, token string, results []protocol.ToolResult) error {
	for _, r := range results {
		size := int64(len(r.Result) + len(r.ErrorMessage))
		if size > e.limits.MaxToolResultBytes {
			return kiln.Errorf(kiln.CodeTooLarge, "the result of tool call %q is %d bytes; the limit is %d", r.CallID, size, e.limits.MaxToolResultBytes)
		}
		if len(r.Result) > 0 && !json.Valid(r.Result) {
			return kiln.Errorf(kiln.CodeInvalid, "the result of tool call %q is not JSON", r.CallID)
		}
	}
	return e.reg.deliver(id, owner, token, results)
}

// hardDeadline is the hard deadline of a run, as a clock that stops while the run
// waits on its client's tools.
type hardDeadline struct {
	cancel  context.CancelCauseFunc
	timer   *time.Timer
	left    time.Duration
	started time.Time
}

// newHardDeadline returns a context that ends once d has run on the clock. Only a
// pausable one can be paused; the other is a plain deadline, which the context reports.
func newHardDeadline(parent context.Context, d time.Duration, pausable bool) (context.Context, *hardDeadline) {
	if !pausable {
		ctx, cancel := context.WithTimeout(parent, d)
		return ctx, &hardDeadline{cancel: func(error) { cancel() }}
	}
	ctx, cancel := context.WithCancelCause(parent)
	h := &hardDeadline{cancel: cancel, left: d, started: time.Now()}
	h.timer = time.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return ctx, h
}

// pause stops the clock; false when the time has already run out.
func (h *hardDeadline) pause() bool {
	if !h.timer.Stop() {
		return false
	}
	h.left -= time.Since(h.started)
	return true
}

// resume starts the clock again with the time that was left.
func (h *hardDeadline) resume() {
	h.started = time.Now()
	h.timer.Reset(max(h.left, 0))
}

// stop releases the deadline.
func (h *hardDeadline) stop() {
	if h.timer != nil {
		h.timer.Stop()
	}
	h.cancel(nil)
}
