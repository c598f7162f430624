package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

// Streams are the byte streams of one REPL process, as a runtime opens them: a
// container's attach connection, an exec session through an API server, a pipe.
type Streams interface {
	// Stdin is where frames to the REPL are written. A net.Conn is given as it is, so that
	// a frame and its payloads go out in one vectored write.
	Stdin() io.Writer
	// Copy copies the REPL's stdout and stderr into the writers until the process ends or
	// the streams break, and says why they ended: nil for a clean end.
	Copy(stdout, stderr io.Writer) error
	// Close ends the streams: a Copy or a write under way returns.
	Close() error
}

// frameQueue is how many frames wait for the executor before the reader waits too.
const frameQueue = 16

type frame struct {
	protocol.Frame
	err error
}

// Conn is kiln's connection to one REPL over its byte streams. A goroutine copies the
// REPL's stdout into a frame parser; the frames wait in a short queue for the executor,
// which reads them as they come (a run's events, then its result). When the queue is
// full the copy waits, and so, through the runtime, does the REPL's output: back
// pressure bounded by the run's deadline. The REPL's stderr is its own log: the last
// protocol.StderrTail bytes are kept.
type Conn struct {
	streams   Streams
	id        string
	frames    chan frame
	done      chan struct{} // closed when the streams have ended
	quit      chan struct{} // closed by Close: nobody will read frames any more
	closeOnce sync.Once
	writeMu   sync.Mutex // one frame at a time
	stderr    protocol.Tail
	err       error // why the streams ended, nil for a clean end; set before done closes
	ready     protocol.Ready
	log       *slog.Logger

	tunnelMu sync.Mutex
	serve    func(net.Conn)          // where the REPL's outgoing connections go: see Egress
	tunnels  map[uint32]*tunnel      // the open ones, by the REPL's number
	sockets  map[net.Conn]bool       // the open ones made to the sandbox's socket: see Accept
	agents   map[uint32]*AgentStream // the agent calls under way, by number: see Agent
	agentSeq uint32
}

// Open starts reading the REPL's streams and returns at once: frames arrive as the REPL
// sends them. id names the sandbox in the log.
func Open(s Streams, lim FrameLimits, log *slog.Logger, id string) *Conn {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Conn{streams: s, id: id, frames: make(chan frame, frameQueue), done: make(chan struct{}), quit: make(chan struct{}), log: log}
	go c.read(lim, log)
	return c
}

func (c *Conn) read(lim FrameLimits, log *slog.Logger) {
	defer close(c.done)
	parser := protocol.NewParser(lim.Header, lim.Binary)
	// The parser hands each frame over whole: nothing of it is copied again.
	stdout := parser.Writer(func(f protocol.Frame, err error) {
		if err == nil && protocol.IsNet(f) {
			c.onNet(f) // the code's connections, beside the request's frames
			return
		}
		if err == nil && protocol.IsAgent(f) {
			c.onAgent(f) // the agent's calls, beside the request's frames too
			return
		}
		select {
		case c.frames <- frame{Frame: f, err: err}:
		case <-c.quit:
		}
	})
	err := c.streams.Copy(stdout, &c.stderr)
	c.Egress(nil) // no connection outlives the channel it travelled on
	select {
	case <-c.quit:
		err = nil // we closed it: the normal end
	default:
	}
	if err != nil {
		log.Warn("sandbox stream broken", "sandbox", c.id, "err", err)
		_ = c.streams.Close()
	}
	c.err = err
}

// Close ends the connection: the streams, and any wait of its reader or writer. It is
// idempotent. It does not wait for the reader, which ends once the runtime's Copy
// returns: a runtime whose streams are slow to unwind (an exec through an API server)
// must not hold up a removal.
func (c *Conn) Close() {
	c.closeOnce.Do(func() {
		close(c.quit)
		_ = c.streams.Close()
	})
}

// Done is closed when the streams have ended: the REPL exited, the sandbox went, the
// connection broke, or Close was called.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Stderr returns the tail of the REPL's own stderr (not user output).
func (c *Conn) Stderr() string { return c.stderr.String() }

// Ready returns the handshake the REPL sent, once Handshake has succeeded.
func (c *Conn) Ready() protocol.Ready { return c.ready }

// Send writes one frame, the payloads as they are (a request can carry a state and files
// of many megabytes). When ctx ends before the frame is out the connection is closed, as
// a frame cut short leaves the stream unusable, and ctx's error is returned.
func (c *Conn) Send(ctx context.Context, msg net.Buffers) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	// A context that ends once the frame is out ends nothing. The end of the write and
	// the end of ctx race; the first decides, so that Send never reports a frame sent on
	// a connection ctx closed, even when all of it got out.
	const sending, sent, cut = 0, 1, 2
	var state atomic.Int32
	stop := context.AfterFunc(ctx, func() {
		if state.CompareAndSwap(sending, cut) {
			c.Close()
		}
	})
	_, err := msg.WriteTo(c.streams.Stdin())
	closed := !state.CompareAndSwap(sending, sent)
	stop()
	if closed {
		return ctx.Err()
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	select {
	case <-c.done:
		return kiln.ErrSandboxExited
	case <-c.quit: // closed by someone else (a sandbox removed, a Pod deleted): its end is near
		return kiln.ErrSandboxExited
	default:
		if errors.Is(err, kiln.ErrSandboxExited) {
			return err
		}
		return fmt.Errorf("write request: %w", err)
	}
}

// Receive returns the next frame, kiln.ErrSandboxExited when the streams end first, or
// ctx's error.
func (c *Conn) Receive(ctx context.Context) (protocol.Frame, error) {
	select {
	case f := <-c.frames:
		return f.Frame, f.err
	case <-c.done:
		select {
		case f := <-c.frames:
			return f.Frame, f.err
		default:
		}
		if c.err != nil {
			return protocol.Frame{}, fmt.Errorf("%w: %v", kiln.ErrSandboxExited, c.err)
		}
		return protocol.Frame{}, kiln.ErrSandboxExited
	case <-ctx.Done():
		return protocol.Frame{}, ctx.Err()
	}
}

// Handshake greets the REPL and waits for its ready frame, within ctx: the warm-up's
// last step on every runtime. Its errors wrap kiln.ErrSandboxExited (the REPL ended or
// said something else, with the last line of its stderr) or kiln.ErrWarmupTimeout.
func (c *Conn) Handshake(ctx context.Context) (protocol.Ready, error) {
	if err := c.Send(ctx, protocol.EncodeHello("hello")); err != nil && ctx.Err() != nil {
		return protocol.Ready{}, fmt.Errorf("%w: hello: %w", kiln.ErrWarmupTimeout, err)
	}
	// A hello that could not be written (the REPL died at start) is told by the REPL's
	// end: Receive waits for it, and its stderr, read to the end by then, says why.
	f, err := c.Receive(ctx)
	switch {
	case errors.Is(err, kiln.ErrSandboxExited):
		return protocol.Ready{}, fmt.Errorf("%w during warm-up: %s", kiln.ErrSandboxExited, LastLine(c.Stderr()))
	case ctx.Err() != nil:
		return protocol.Ready{}, fmt.Errorf("%w: no ready frame: %w", kiln.ErrWarmupTimeout, ctx.Err())
	case err != nil:
		return protocol.Ready{}, fmt.Errorf("%w: ready frame: %w", kiln.ErrSandboxExited, err)
	}
	ready, err := protocol.DecodeReady(f)
	if err != nil {
		return protocol.Ready{}, fmt.Errorf("%w: %w", kiln.ErrSandboxExited, err)
	}
	c.ready = ready
	return ready, nil
}

// LastLine returns the last non-empty line of a REPL's stderr, for an error message.
func LastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return "no output"
	}
	return s
}
