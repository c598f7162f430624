package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

// Execer is a sandbox that can start a process in itself, its standard streams kiln's:
// what a runtime gives PerCall.
type Execer interface {
	// Exec starts PerCallCommand in the sandbox, as the REPL's user in DataDir, and
	// returns its streams, and what reports its exit code (-1 when unknown) once they
	// have ended.
	Exec(ctx context.Context) (s Streams, exit func(ctx context.Context) int, err error)
}

// PerCall is sb with no warm REPL (Spec.PerCall): its own process idles, and its one
// request gets a fresh interpreter, which ex starts on the request's first Send. It
// checks once, before it returns, that such an interpreter starts and answers, and
// takes its handshake for the sandbox's Ready. frames and log are Open's.
func PerCall(ctx context.Context, sb Sandbox, ex Execer, frames FrameLimits, log *slog.Logger) (Sandbox, error) {
	p := &perCall{Sandbox: sb, ex: ex, frames: frames, log: log, code: -1}
	conn, _, err := p.start(ctx)
	if err != nil {
		return nil, err
	}
	conn.Close() // the probe's interpreter ends when its input closes
	p.ready = conn.Ready()
	return p, nil
}

type perCall struct {
	Sandbox // the sandbox itself: its id, its death, its removal, its sockets' egress
	ex      Execer
	frames  FrameLimits
	log     *slog.Logger
	ready   protocol.Ready

	conn   *Conn                     // the request's interpreter, once the first Send started it
	exit   func(context.Context) int // its exit code, once its streams ended
	code   int                       // that code, once Receive saw the end; -1 before
	egress func(net.Conn)            // what Egress set, for the interpreter's connections
}

// start runs an interpreter and returns its connection once it has answered the handshake.
func (p *perCall) start(ctx context.Context) (*Conn, func(context.Context) int, error) {
	s, exit, err := p.ex.Exec(ctx)
	if err != nil {
		return nil, nil, err
	}
	conn := Open(s, p.frames, p.log, p.ID())
	if _, err := conn.Handshake(ctx); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("the per-call REPL: %w", err)
	}
	return conn, exit, nil
}

func (p *perCall) Ready() protocol.Ready { return p.ready }

// Send writes a frame to the request's interpreter, starting it on the first.
func (p *perCall) Send(ctx context.Context, frame net.Buffers) error {
	if p.conn == nil {
		conn, exit, err := p.start(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		p.conn, p.exit = conn, exit
		conn.Egress(p.egress)
	}
	return p.conn.Send(ctx, frame)
}

// Receive returns the next frame the request's interpreter sent.
func (p *perCall) Receive(ctx context.Context) (protocol.Frame, error) {
	if p.conn == nil {
		return protocol.Frame{}, kiln.ErrSandboxExited
	}
	f, err := p.conn.Receive(ctx)
	if errors.Is(err, kiln.ErrSandboxExited) && p.code < 0 {
		p.code = p.exit(ctx)
	}
	return f, err
}

// Exit reports how the request's interpreter ended. It died, not the sandbox: nothing
// but the kernel kills it with SIGKILL in this mode (kiln removes the whole sandbox).
func (p *perCall) Exit(context.Context) (code int, oomKilled bool, err error) {
	return p.code, p.code == 137, nil
}

// Egress routes the interpreter's outgoing connections to serve, and those made to the
// sandbox's own socket.
func (p *perCall) Egress(serve func(net.Conn)) {
	p.Sandbox.Egress(serve)
	p.egress = serve
	if p.conn != nil {
		p.conn.Egress(serve)
	}
}

// Remove ends the interpreter's connection and removes the sandbox.
func (p *perCall) Remove(ctx context.Context) error {
	if p.conn != nil {
		p.conn.Close()
	}
	return p.Sandbox.Remove(ctx)
}

// Limits and Resize are the sandbox's, when it can be resized (Resizer).
func (p *perCall) Limits() (milliCPU, memoryMB int64) {
	if r, ok := p.Sandbox.(Resizer); ok {
		return r.Limits()
	}
	return 0, 0
}

func (p *perCall) Resize(ctx context.Context, milliCPU, memoryMB int64) error {
	if r, ok := p.Sandbox.(Resizer); ok {
		return r.Resize(ctx, milliCPU, memoryMB)
	}
	return errors.New("this sandbox cannot be resized")
}
