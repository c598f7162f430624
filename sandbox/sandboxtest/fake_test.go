package sandboxtest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
)

// fakeCode is the contract's code in Commands.
var fakeCode = Code{
	Print: "print kiln", Printed: "kiln\n",
	Set: "set x 42", Get: "get x", Got: "42\n",
	Sleep: "print sleeping\nsleep 30s",
	Exit:  "exit 3", ExitCode: 3,
	OOM: "oom",
}

// TestContract runs the contract against the Fake, its REPL's output whole and one byte
// at a time: the Fake is a runtime like the others, or the tests built on it prove
// nothing.
func TestContract(t *testing.T) {
	for _, trickle := range []bool{false, true} {
		name := map[bool]string{false: "whole", true: "one byte at a time"}[trickle]
		t.Run(name, func(t *testing.T) {
			Run(t, Harness{
				Open: func(*testing.T) sandbox.Runtime {
					// A warm-up of its own, so that a Start given a millisecond fails in the
					// handshake, as a slow REPL's does.
					return &Fake{Images: []string{"kiln-fake"}, WarmUp: 20 * time.Millisecond, Trickle: trickle, RoomMB: 64}
				},
				Spec:         sandbox.Spec{Image: "kiln-fake", MemoryMB: 64},
				NoRoom:       &sandbox.Spec{Image: "kiln-fake", MemoryMB: 128},
				Code:         fakeCode,
				Traits:       sandbox.Traits{Isolation: "none"},
				MissingImage: "kiln-missing",
				Settle:       5 * time.Second,
			})
		})
	}
}

// start starts a sandbox of f, removed when the test ends.
func start(t *testing.T, f *Fake) *Sandbox {
	t.Helper()
	sb, err := f.Start(t.Context(), sandbox.Spec{Image: "kiln-fake"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = sb.Remove(context.Background()) })
	return sb.(*Sandbox)
}

// run sends one exec request of code and returns the events before its answer, and the
// answer; err is Receive's when the REPL gave none.
func run(t *testing.T, sb sandbox.Sandbox, req protocol.Request) ([]protocol.Event, *protocol.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if req.ID == "" {
		req.ID = kiln.NewID()
	}
	frame, err := protocol.EncodeRequest(&req)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Send(ctx, frame); err != nil {
		return nil, nil, err
	}
	var events []protocol.Event
	for {
		f, err := sb.Receive(ctx)
		if err != nil {
			return events, nil, err
		}
		ev, resp, err := protocol.Decode(f, req.ID, protocol.Limits{})
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if resp != nil {
			return events, resp, nil
		}
		events = append(events, *ev)
	}
}

func TestCommands(t *testing.T) {
	sb := start(t, &Fake{})
	tests := []struct {
		name       string
		req        protocol.Request
		wantStatus string
		wantCode   int
		wantError  string
		wantStdout string
		wantStderr string
		wantEvents int
	}{
		{name: "print", req: protocol.Request{Code: "print a b\n\nprint c"}, wantStatus: "ok", wantStdout: "a b\nc\n"},
		{name: "events", req: protocol.Request{Code: "print a\nstderr b", Events: true}, wantStatus: "ok", wantStdout: "a\n", wantStderr: "b\n", wantEvents: 2},
		{name: "set then get", req: protocol.Request{Code: "set y 7\nget y"}, wantStatus: "ok", wantStdout: "7\n"},
		{name: "get outlives its request", req: protocol.Request{Code: "get y"}, wantStatus: "ok", wantStdout: "7\n"},
		{name: "get unbound", req: protocol.Request{Code: "print before\nget nope\nprint after"}, wantStatus: "error", wantCode: 1,
			wantError: "NameError: name 'nope' is not defined", wantStdout: "before\n"},
		{name: "error", req: protocol.Request{Code: "error ZeroDivisionError: division by zero"}, wantStatus: "error", wantCode: 1,
			wantError: "ZeroDivisionError: division by zero"},
		{name: "unknown command", req: protocol.Request{Code: "fly"}, wantStatus: "error", wantCode: 1, wantError: "NameError: unknown command 'fly'"},
		{name: "soft deadline", req: protocol.Request{Code: "print tick\nsleep 10s\nprint never", TimeoutMS: 30}, wantStatus: "timeout", wantCode: 124,
			wantError: "Time limit exceeded", wantStdout: "tick\n"},
		{name: "short sleep", req: protocol.Request{Code: "sleep 1ms\nprint awake"}, wantStatus: "ok", wantStdout: "awake\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events, resp, err := run(t, sb, tt.req)
			if err != nil {
				t.Fatalf("got %v, want an answer", err)
			}
			if resp.Status != tt.wantStatus || resp.ExitCode != tt.wantCode || resp.Stdout != tt.wantStdout || resp.Stderr != tt.wantStderr {
				t.Errorf("got %s %d stdout %q stderr %q, want %s %d %q %q", resp.Status, resp.ExitCode, resp.Stdout, resp.Stderr,
					tt.wantStatus, tt.wantCode, tt.wantStdout, tt.wantStderr)
			}
			if got := str(resp.Error); (tt.wantError == "") != (resp.Error == nil) || resp.Error != nil && got != tt.wantError {
				t.Errorf("got error %s, want %q", got, tt.wantError)
			}
			if len(events) != tt.wantEvents {
				t.Errorf("got %d events, want %d", len(events), tt.wantEvents)
			}
		})
	}
	if got := len(sb.Requests()); got != len(tests) {
		t.Errorf("Requests: got %d, want %d", got, len(tests))
	}
}

// TestEnds checks each way a REPL ends under a request, as the executor sees it.
func TestEnds(t *testing.T) {
	lost := errors.New("connection reset by peer")
	tests := []struct {
		name     string
		code     string
		end      func(sb *Sandbox)
		wantCode int
		wantOOM  bool
		wantErr  error  // of Exit
		wantWhy  string // in Receive's error
	}{
		{name: "exit", code: "exit 3", wantCode: 3},
		{name: "oom", code: "oom", wantCode: 137, wantOOM: true},
		{name: "killed", code: "hang", end: (*Sandbox).Kill, wantCode: 137},
		{name: "exit unknown", code: "hang", end: func(sb *Sandbox) { sb.End(ExitStatus{Code: -1, Err: io.ErrUnexpectedEOF}) },
			wantCode: -1, wantErr: io.ErrUnexpectedEOF},
		{name: "stream broken", code: "hang", end: func(sb *Sandbox) { sb.End(ExitStatus{Code: -1, Broken: lost}) },
			wantCode: -1, wantWhy: lost.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := start(t, &Fake{})
			if tt.end != nil {
				time.AfterFunc(20*time.Millisecond, func() { tt.end(sb) })
			}
			_, resp, err := run(t, sb, protocol.Request{Code: tt.code})
			if !errors.Is(err, kiln.ErrSandboxExited) || !strings.Contains(err.Error(), tt.wantWhy) {
				t.Fatalf("got %+v, %v; want kiln.ErrSandboxExited saying %q", resp, err, tt.wantWhy)
			}
			code, oom, err := sb.Exit(t.Context())
			if code != tt.wantCode || oom != tt.wantOOM || !errors.Is(err, tt.wantErr) {
				t.Errorf("Exit: got %d, %v, %v; want %d, %v, %v", code, oom, err, tt.wantCode, tt.wantOOM, tt.wantErr)
			}
			select {
			case <-sb.Done():
			case <-time.After(time.Second):
				t.Error("Done not closed after the REPL ended")
			}
			if err := sb.Send(t.Context(), protocol.EncodeInterrupt("x")); !errors.Is(err, kiln.ErrSandboxExited) {
				t.Errorf("Send to an ended REPL: got %v, want kiln.ErrSandboxExited", err)
			}
		})
	}
}

// TestHandler checks a handler of the test's own: it sees the request, sends events and
// tool calls, reads the tool results and the interrupt, and logs to the REPL's stderr.
func TestHandler(t *testing.T) {
	f := &Fake{Handler: func(x *Exchange) {
		_ = x.Log("kiln-repl: serving " + x.Request.Code)
		_ = x.Event(protocol.Event{Type: protocol.EventToolCalls, Calls: []protocol.ToolCall{{ID: "call_001", Name: "weather", Input: json.RawMessage(`{}`)}}})
		results, err := x.ToolResults()
		if err != nil {
			return
		}
		select {
		case <-x.Interrupted():
		case <-x.Done():
			return
		}
		_ = x.Reply(protocol.Response{Status: protocol.StatusCancelled, ExitCode: 130, Stdout: string(results[0].Result)})
	}}
	sb := start(t, f)
	ctx := t.Context()
	req := protocol.Request{ID: "r1", Code: "call weather", Tools: []protocol.Tool{{Name: "weather", Function: "weather"}}}
	frame, _ := protocol.EncodeRequest(&req)
	if err := sb.Send(ctx, frame); err != nil {
		t.Fatal(err)
	}
	fr, err := sb.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ev, _, err := protocol.Decode(fr, "r1", protocol.Limits{})
	if err != nil || ev.Type != protocol.EventToolCalls || ev.Calls[0].ID != "call_001" {
		t.Fatalf("got %+v, %v; want the tool call", ev, err)
	}
	results, _ := protocol.EncodeToolResults("r1", []protocol.ToolResult{{CallID: "call_001", Result: json.RawMessage(`{"temp":20}`)}})
	for _, frame := range []net.Buffers{results, protocol.EncodeInterrupt("someone-else"), protocol.EncodeInterrupt("r1")} {
		if err := sb.Send(ctx, frame); err != nil {
			t.Fatal(err)
		}
	}
	fr, err = sb.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := protocol.DecodeResponse(fr, "r1", protocol.Limits{})
	if err != nil || resp.Status != protocol.StatusCancelled || resp.Stdout != `{"temp":20}` {
		t.Fatalf("got %+v, %v; want cancelled with the tool's result", resp, err)
	}
	if got := sb.Interrupts(); got != 2 {
		t.Errorf("Interrupts: got %d, want 2", got)
	}
	if got := sb.Stderr(); got != "kiln-repl: serving call weather\n" {
		t.Errorf("Stderr: got %q, want the handler's log line", got)
	}
}

// TestStartKnobs checks what a pool's tests count on: a gate holds Starts, Fail fails
// them, and the counts say what happened.
func TestStartKnobs(t *testing.T) {
	errDown := errors.New("daemon down")
	f := &Fake{Gate: make(chan struct{}), Images: []string{"kiln-fake"}}
	spec := sandbox.Spec{Image: "kiln-fake"}
	started := make(chan error, 2)
	for range 2 {
		go func() {
			sb, err := f.Start(context.Background(), spec)
			if err == nil {
				t.Cleanup(func() { _ = sb.Remove(context.Background()) })
			}
			started <- err
		}()
	}
	waitCounts(t, f, func(c Counts) bool { return c.Starting == 2 })
	f.Gate <- struct{}{}
	if err := <-started; err != nil {
		t.Fatalf("the Start let through: %v", err)
	}
	f.Fail(errDown)
	f.Gate <- struct{}{}
	if err := <-started; !errors.Is(err, errDown) {
		t.Errorf("a Start while failing: got %v, want %v", err, errDown)
	}
	f.Fail(nil)
	close(f.Gate)
	if _, err := f.Start(t.Context(), sandbox.Spec{Image: "kiln-other"}); !errors.Is(err, kiln.ErrRuntime) {
		t.Errorf("Start of a missing image: got %v, want kiln.ErrRuntime", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (&Fake{Gate: make(chan struct{})}).Start(ctx, spec); !errors.Is(err, kiln.ErrWarmupTimeout) {
		t.Errorf("Start held at a gate past its context: got %v, want kiln.ErrWarmupTimeout", err)
	}
	c := f.Counts()
	if c.Starts != 3 || c.Starting != 0 || c.MaxStarting != 2 || c.Failed != 2 || len(c.StartedAt) != 3 || len(c.FailedAt) != 2 {
		t.Errorf("Counts: got %+v, want 3 starts, 2 at most at once, 2 failed", c)
	}
	if got := len(f.Sandboxes()); got != 1 {
		t.Errorf("Sandboxes: got %d, want the 1 Start returned", got)
	}
	if list, _ := f.List(t.Context()); len(list) != 1 || list[0].State != "running" {
		t.Errorf("List: got %+v, want the one running sandbox", list)
	}
}

// TestRemoveKnobs checks removals that take a while, and removals that fail: the REPL is
// killed, the sandbox stays listed, and each call is counted.
func TestRemoveKnobs(t *testing.T) {
	t.Run("delay", func(t *testing.T) {
		f := &Fake{RemoveDelay: 50 * time.Millisecond}
		sb := start(t, f)
		begin := time.Now()
		if err := sb.Remove(t.Context()); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begin); took < 50*time.Millisecond {
			t.Errorf("Remove took %v, want at least the delay", took)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		begin = time.Now()
		if err := f.Remove(ctx, start(t, f).ID()); err != nil || time.Since(begin) > 40*time.Millisecond {
			t.Errorf("Remove within 10ms: got %v after %v, want nil at the context's end", err, time.Since(begin))
		}
	})
	t.Run("error", func(t *testing.T) {
		errBusy := errors.New("daemon busy")
		f := &Fake{RemoveErr: errBusy}
		sb := start(t, f)
		for range 2 {
			if err := sb.Remove(t.Context()); !errors.Is(err, errBusy) {
				t.Errorf("Remove: got %v, want %v", err, errBusy)
			}
		}
		if sb.Removals() != 2 {
			t.Errorf("Removals: got %d, want 2", sb.Removals())
		}
		if code, _, _ := sb.Exit(t.Context()); code != 137 {
			t.Errorf("Exit after a failed removal: got %d, want 137 (killed)", code)
		}
		if list, _ := f.List(t.Context()); len(list) != 1 || list[0].State != "exited" {
			t.Errorf("List: got %+v, want the sandbox left behind, exited", list)
		}
		if n, err := f.RemoveOrphans(t.Context()); n != 0 || !errors.Is(err, errBusy) {
			t.Errorf("RemoveOrphans: got %d, %v; want 0 and the error", n, err)
		}
		if c := f.Counts(); c.Removed != 0 {
			t.Errorf("Counts.Removed: got %d, want 0", c.Removed)
		}
	})
}

func waitCounts(t *testing.T, f *Fake, cond func(Counts) bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond(f.Counts()) {
		if time.Now().After(deadline) {
			t.Fatalf("Counts: %+v, not what the test waits for", f.Counts())
		}
		time.Sleep(time.Millisecond)
	}
}
