package executor

import (
	"context"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/execution"
	"github.com/kilnsh/kiln/sandbox/sandboxtest"
)

// TestDrain checks that Drain waits for the run under way, that a run asked for while
// draining is refused as unavailable without a checkout, and that the run under way
// still gets its answer.
func TestDrain(t *testing.T) {
	entered, finish := make(chan struct{}), make(chan struct{})
	p := &fakePool{sb: newSandbox(t, func(x *sandboxtest.Exchange) {
		close(entered)
		<-finish
		reply(nil)(x)
	})}
	e := newTestExecutor(p, testLimits())

	type outcome struct {
		res *Result
		err error
	}
	first := make(chan outcome, 1)
	go func() {
		res, err := e.Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangPython, Code: "x"}})
		first <- outcome{res, err}
	}()
	<-entered
	if got := e.Running(); got != 1 {
		t.Errorf("Running: got %d, want 1", got)
	}

	drained := make(chan error, 1)
	go func() { drained <- e.Drain(context.Background()) }()
	deadline := time.Now().Add(time.Second)
	for !e.Draining() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	_, err := e.Run(context.Background(), Request{Request: execution.Request{Lang: execution.LangPython, Code: "x"}})
	checkCode(t, err, kiln.CodeUnavailable)
	if got := err.(*kiln.Error).Message; got != "kiln is shutting down" {
		t.Errorf("got message %q, want %q", got, "kiln is shutting down")
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v while a run was under way", err)
	case <-time.After(50 * time.Millisecond):
	}

	close(finish)
	out := <-first
	if out.err != nil || out.res.Status != execution.StatusOK {
		t.Fatalf("the run under way: got %+v, %v; want status ok", out.res, out.err)
	}
	if err := <-drained; err != nil {
		t.Errorf("Drain: got %v, want nil", err)
	}
	p.checkHeldUntilRelease(t, out.res)
	if p.checkouts != 1 {
		t.Errorf("got %d checkouts, want 1: a refused run must not take a sandbox", p.checkouts)
	}
}

// TestDrainGivesUp checks that Drain returns the context's error when runs outlast it.
func TestDrainGivesUp(t *testing.T) {
	entered := make(chan struct{})
	sb := newSandbox(t, func(x *sandboxtest.Exchange) {
		close(entered)
		deaf(x)
	})
	e := newTestExecutor(&fakePool{sb: sb}, testLimits())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = e.Run(ctx, Request{Request: execution.Request{Lang: execution.LangPython, Code: "x"}})
	}()
	<-entered
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer dcancel()
	if err := e.Drain(dctx); err != context.DeadlineExceeded {
		t.Errorf("Drain: got %v, want context.DeadlineExceeded", err)
	}
	cancel()
	<-done
	if got := e.Running(); got != 0 {
		t.Errorf("Running after the run ended: got %d, want 0", got)
	}
}
