package executor

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

// TestRunEvents checks that OnStart comes first, that the REPL is asked for events only
// when the caller takes them, and that they arrive in order before the result.
func TestRunEvents(t *testing.T) {
	for _, withEvents := range []bool{false, true} {
		// The REPL sends its events whether they were asked for or not: the executor
		// passes on only those its caller takes.
		sb := newSandbox(t, eventsThen([]protocol.Event{
			{Type: protocol.EventOutput, Stream: "stdout", Text: "a\n"},
			{Type: protocol.EventDisplay, Name: "figure-1.png", MIME: "image/png", Data: []byte("PNG")},
			{Type: protocol.EventOutput, Stream: "stderr", Text: "b\n"},
		}, reply(nil)))
		e := newTestExecutor(&fakePool{sb: sb}, testLimits())
		var got []string
		req := Request{Request: execution.Request{Lang: execution.LangPython, Code: "x"}, OnStart: func() { got = append(got, "start") }}
		if withEvents {
			req.OnEvent = func(ev protocol.Event) { got = append(got, ev.Type+":"+ev.Stream+ev.Text+ev.Name+string(ev.Data)) }
		}
		res, err := e.Run(context.Background(), req)
		if err != nil || res.Status != execution.StatusOK {
			t.Fatalf("got %+v, %v; want ok", res, err)
		}
		res.Release()
		want := []string{"start"}
		if withEvents {
			want = append(want, "output:stdouta\n", "display:figure-1.pngPNG", "output:stderrb\n")
		}
		if !slices.Equal(got, want) {
			t.Errorf("events %v: got %q, want %q", withEvents, got, want)
		}
		if r := sb.Requests()[0]; r.Events != withEvents || r.ID != res.ExecutionID {
			t.Errorf("got request events %v id %q, want %v and the execution id %q", r.Events, r.ID, withEvents, res.ExecutionID)
		}
	}
}

// waitRunning polls until the execution is registered as running.
func waitRunning(t *testing.T, e *Executor, id string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		e.reg.mu.Lock()
		_, ok := e.reg.running[id]
		e.reg.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("execution %s never ran", id)
}

// TestCancel checks a cancel that the code obeys: the REPL is interrupted and its
// cancelled result is the answer, with the state the run left (as an interrupted
// notebook cell keeps what it bound); a second cancel
// is a conflict, and another owner's cancel is not found.
func TestCancel(t *testing.T) {
	running := make(chan struct{}) // the REPL has the request: the code runs
	sb := newSandbox(t, func(x *sandboxtest.Exchange) {
		close(running)
		select {
		case <-x.Interrupted():
			reply(func(r *protocol.Response) {
				r.Status, r.ExitCode, r.Error, r.Stdout = protocol.StatusCancelled, 130, str("Interrupted"), "partial\n"
			})(x)
		case <-x.Done():
		}
	})
	p := &fakePool{sb: sb}
	lim := testLimits()
	lim.DefaultTimeout, lim.InterruptGrace = 5*time.Second, time.Second
	e := newTestExecutor(p, lim)
	given := lz4Frame(t, []byte("before"))
	done := make(chan *Result, 1)
	go func() {
		res, err := e.Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangPython, Code: "sleep", ExecutionID: "run1", State: given, CaptureState: true}, Owner: "alice"})
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		done <- res
	}()
	waitRunning(t, e, "run1")
	<-running // a cancel while the request still goes out kills the sandbox instead
	if err := e.Cancel("run1", "bob"); kiln.ErrorCode(err) != kiln.CodeNotFound {
		t.Errorf("another owner's cancel: got %v, want not_found", err)
	}
	start := time.Now()
	if err := e.Cancel("run1", "alice"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	res := <-done
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("the cancelled run answered after %v, want at once", took)
	}
	if res.Status != execution.StatusCancelled || res.ExitCode != 130 || res.Stdout != "partial\n" || deref(res.Error) != "Interrupted" {
		t.Errorf("got %s %d %q %q, want cancelled 130 with the partial output", res.Status, res.ExitCode, res.Stdout, deref(res.Error))
	}
	if !res.StateFromRun || bytes.Equal(res.State, given) {
		t.Errorf("got the state the run was given, want the one it left")
	}
	p.checkHeldUntilRelease(t, res)
	if err := e.Cancel("run1", "alice"); kiln.ErrorCode(err) != kiln.CodeConflict {
		t.Errorf("cancel after the end: got %v, want conflict", err)
	}
	if err := e.Cancel("never", "alice"); kiln.ErrorCode(err) != kiln.CodeNotFound {
		t.Errorf("cancel of an unknown run: got %v, want not_found", err)
	}
}

// TestCancelIgnored checks a run whose code does not stop: once the interrupt grace
// is over the sandbox is given up, and the answer is cancelled with what the run's
// output events said.
func TestCancelIgnored(t *testing.T) {
	sb := newSandbox(t, eventsThen([]protocol.Event{{Type: protocol.EventOutput, Stream: "stdout", Text: "tick\n"}}, deaf))
	p := &fakePool{sb: sb}
	lim := testLimits()
	lim.DefaultTimeout, lim.InterruptGrace = 5*time.Second, 100*time.Millisecond
	e := newTestExecutor(p, lim)
	done := make(chan *Result, 1)
	ticked := make(chan struct{}, 1)
	onEvent := func(protocol.Event) { ticked <- struct{}{} }
	go func() {
		res, err := e.Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangPython, Code: "x", ExecutionID: "run2"}, OnEvent: onEvent})
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		done <- res
	}()
	waitRunning(t, e, "run2")
	<-ticked // the event is through
	start := time.Now()
	if err := e.Cancel("run2", ""); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	res := <-done
	took := time.Since(start)
	if took < lim.InterruptGrace || took > lim.InterruptGrace+time.Second {
		t.Errorf("answered after %v, want soon after the grace of %v", took, lim.InterruptGrace)
	}
	if sb.Interrupts() == 0 {
		t.Errorf("the sandbox got no interrupt")
	}
	if res.Status != execution.StatusCancelled || res.ExitCode != 130 || res.Stdout != "tick\n" {
		t.Errorf("got %s %d %q, want cancelled 130 with the output events' text", res.Status, res.ExitCode, res.Stdout)
	}
	p.checkHeldUntilRelease(t, res)
}

// TestCallerLeavingIsNotACancel checks that a caller who goes away still gets the
// context's error, not a cancelled result.
func TestCallerLeavingIsNotACancel(t *testing.T) {
	e := newTestExecutor(&fakePool{sb: newSandbox(t, deaf)}, testLimits())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := e.Run(ctx, Request{Request: execution.Request{Lang: execution.LangPython, Code: "x", Timeout: time.Second}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want the caller's context.DeadlineExceeded", err)
	}
}
