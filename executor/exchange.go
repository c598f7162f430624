package executor

import (
	"context"
	"net"
	"strings"

	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
)

// exchange is one request's conversation with its sandbox: the request out, events
// in as they come, maybe an interrupt out, then the result in.
type exchange struct {
	e   *Executor
	sb  sandbox.Sandbox
	req *Request
	res *Result
	lim protocol.Limits

	// The output events so far: what a cancelled run that had to be killed said.
	stdout, stderr strings.Builder
	// killedAfterInterrupt: the run was cancelled, interrupted, and did not answer
	// within the interrupt grace.
	killedAfterInterrupt bool

	hctx   context.Context // the hard deadline
	hard   *hardDeadline   // its clock, stopped while the run waits on tools
	rounds int             // rounds of tool calls so far
}

// run sends frame and returns the REPL's result. ctx is the run's cancellation (the
// caller leaving, or Cancel); hctx carries the hard deadline only.
func (x *exchange) run(ctx, hctx context.Context, frame net.Buffers) (*protocol.Response, error) {
	sendCtx, stop := mergeCancel(hctx, ctx)
	err := x.sb.Send(sendCtx, frame)
	stop()
	if err != nil {
		// Cancelled while the request was still going out: nothing to interrupt
		// yet, so the sandbox goes.
		x.killedAfterInterrupt = context.Cause(ctx) == errCancelRequested && hctx.Err() == nil
		return nil, err
	}
	recvCtx, stopRecv := mergeCancel(hctx, ctx)
	defer stopRecv()
	interrupted := false
	for {
		f, err := x.sb.Receive(recvCtx)
		if err != nil {
			if !interrupted && context.Cause(ctx) == errCancelRequested && hctx.Err() == nil {
				// Cancelled: ask the REPL to interrupt the code, and give it the grace.
				interrupted = true
				if err := x.sb.Send(hctx, protocol.EncodeInterrupt(x.req.ExecutionID)); err != nil {
					return nil, err
				}
				graceCtx, stopGrace := context.WithTimeout(hctx, x.e.limits.InterruptGrace)
				defer stopGrace()
				recvCtx = graceCtx
				continue
			}
			if interrupted && recvCtx.Err() != nil && hctx.Err() == nil {
				x.killedAfterInterrupt = true
			}
			return nil, err
		}
		x.res.WireOut += int64(len(f.Header) + len(f.Binary))
		ev, resp, err := protocol.Decode(f, x.req.ExecutionID, x.lim)
		if err != nil {
			return nil, err
		}
		if resp != nil {
			return resp, nil
		}
		if ev.Type == protocol.EventToolCalls {
			if err := x.awaitTools(ctx, ev.Calls); err != nil {
				return nil, err
			}
			continue
		}
		if ev.Type == protocol.EventOutput {
			x.keep(ev)
		}
		if x.req.OnEvent != nil {
			x.req.OnEvent(*ev)
		}
	}
}

// keep remembers an output event, within the output cap (the REPL sends only what
// its final output keeps, but a REPL is not trusted).
func (x *exchange) keep(ev *protocol.Event) {
	b := &x.stdout
	if ev.Stream == "stderr" {
		b = &x.stderr
	}
	if room := int(x.e.limits.MaxOutputBytes) - b.Len(); room > 0 {
		b.WriteString(ev.Text[:min(len(ev.Text), room)])
	}
}

// mergeCancel returns a context with a's values and deadline that also ends when b
// is cancelled, and the function that releases it.
func mergeCancel(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(a)
	stop := context.AfterFunc(b, func() { cancel(context.Cause(b)) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}
