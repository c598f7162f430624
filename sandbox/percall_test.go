package sandbox

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

// idle stands for a sandbox whose own process idles: it records what PerCall asks of it.
type idle struct {
	done    chan struct{}
	egress  int
	removed int
}

func (s *idle) ID() string            { return "idle-1" }
func (s *idle) Ready() protocol.Ready { return protocol.Ready{} }
func (s *idle) Send(context.Context, net.Buffers) error {
	return errors.New("the idle process reads nothing")
}
func (s *idle) Receive(context.Context) (protocol.Frame, error) {
	return protocol.Frame{}, kiln.ErrSandboxExited
}
func (s *idle) Exit(context.Context) (int, bool, error) { return -1, false, nil }
func (s *idle) Egress(func(net.Conn))                   { s.egress++ }
func (s *idle) Done() <-chan struct{}                   { return s.done }
func (s *idle) Remove(context.Context) error            { s.removed++; return nil }

// execs starts scripted interpreters: each says it is ready, then plays the next of
// replies (or ends at once past them), and exits with code.
type execs struct {
	replies [][]byte
	code    int
	started int
	err     error
}

func (e *execs) Exec(context.Context) (Streams, func(context.Context) int, error) {
	if e.err != nil {
		return nil, nil, e.err
	}
	e.started++
	var reply []byte
	if n := e.started - 2; n >= 0 && n < len(e.replies) { // the first is PerCall's probe
		reply = e.replies[n]
	}
	s := newScripted(func(stdout, _ io.Writer) error {
		_, err := stdout.Write(append(readyFrame("hello"), reply...))
		return err
	})
	return s, func(context.Context) int { return e.code }, nil
}

// A sandbox with no warm REPL probes one interpreter at its start, gives its request a
// fresh one on the first Send, says how that one ended when it ends without an answer,
// and removes the sandbox it wraps.
func TestPerCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	answer := join(protocol.EncodeResponse(&protocol.Response{ID: "r1", Status: protocol.StatusOK, Stdout: "hi\n"}))

	ex := &execs{replies: [][]byte{answer}}
	inner := &idle{done: make(chan struct{})}
	sb, err := PerCall(ctx, inner, ex, testLimits, log)
	if err != nil {
		t.Fatalf("PerCall: %v", err)
	}
	if ex.started != 1 || !sb.Ready().Capabilities.Supports("python") {
		t.Fatalf("after PerCall: %d interpreters started, ready %+v; want the probe's handshake", ex.started, sb.Ready())
	}
	sb.Egress(func(net.Conn) {})
	if inner.egress != 1 {
		t.Errorf("the sandbox's own egress was set %d times, want 1 (its socket's connections)", inner.egress)
	}
	if f, err := sb.Receive(ctx); !errors.Is(err, kiln.ErrSandboxExited) {
		t.Errorf("Receive before any Send: %+v, %v; want kiln.ErrSandboxExited", f, err)
	}
	if err := sb.Send(ctx, protocol.EncodeHello("r1")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	f, err := sb.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if resp, err := protocol.DecodeResponse(f, "r1", protocol.Limits{}); err != nil || resp.Stdout != "hi\n" {
		t.Errorf("the request's answer: %+v, %v", resp, err)
	}
	if err := sb.Send(ctx, protocol.EncodeHello("r2")); ex.started != 2 {
		t.Errorf("a second Send started interpreter %d (%v); want the request's own, still", ex.started, err)
	}
	if err := sb.Remove(ctx); err != nil || inner.removed != 1 {
		t.Errorf("Remove: %v, the sandbox removed %d times; want once", err, inner.removed)
	}

	// An interpreter the kernel kills (137) before it answers: an out-of-memory end.
	killed := &execs{code: 137}
	sb, err = PerCall(ctx, &idle{done: make(chan struct{})}, killed, testLimits, log)
	if err != nil {
		t.Fatalf("PerCall: %v", err)
	}
	if err := sb.Send(ctx, protocol.EncodeHello("r1")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if _, err := sb.Receive(ctx); !errors.Is(err, kiln.ErrSandboxExited) {
		t.Fatalf("Receive from an interpreter that ended: %v; want kiln.ErrSandboxExited", err)
	}
	if code, oom, err := sb.Exit(ctx); code != 137 || !oom || err != nil {
		t.Errorf("Exit: %d, %v, %v; want 137, out of memory", code, oom, err)
	}

	// A sandbox whose interpreter does not start is refused at once.
	if _, err := PerCall(ctx, &idle{done: make(chan struct{})}, &execs{err: kiln.ErrRuntime}, testLimits, log); !errors.Is(err, kiln.ErrRuntime) {
		t.Errorf("PerCall with no interpreter: %v, want the exec's error", err)
	}
}
