package docker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/kilnsh/kiln/protocol"
)

// ErrExited is returned when a sandbox's stream ends before it answered: its process
// is gone. Exit says how it ended.
var ErrExited = errors.New("sandbox exited")

// maxStreamFrame bounds one frame of Docker's multiplexed stream. The daemon copies
// container output in pieces of 32 KiB; anything far larger is not Docker talking.
const maxStreamFrame = 1 << 20

// stderrTail is how much of a REPL's own stderr is kept for the log and for warm-up
// errors. User code's output never reaches it: the REPL points fd 2 elsewhere.
const stderrTail = 4096

type frame struct {
	payload []byte
	err     error
}

// Sandbox is one running sandbox container and its attach connection, which stays open
// for the container's whole life. It serves one request, then it is removed.
type Sandbox struct {
	id      string
	created time.Time
	ready   protocol.Ready
	cli     *Client

	conn   net.Conn
	frames chan frame    // frames read from the REPL's stdout
	done   chan struct{} // closed when the attach stream has ended
	stderr tailBuffer
	err    error // why the stream ended; set before done is closed

	waitResult client.ContainerWaitResult
	stopWait   context.CancelFunc

	removeOnce sync.Once
	removeErr  error
}

// ID returns the container's id.
func (s *Sandbox) ID() string { return s.id }

// Created returns when the container was created.
func (s *Sandbox) Created() time.Time { return s.created }

// Ready returns the handshake the REPL sent.
func (s *Sandbox) Ready() protocol.Ready { return s.ready }

// Done is closed when the sandbox's output stream ends, which happens when its process
// exits or the stream broke.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// Exchange writes one request frame and returns the payload of the next response
// frame. The context's deadline is the hard deadline of the run: when it passes, or
// the context is cancelled, Exchange returns the context's error and the caller is
// expected to remove the sandbox. ErrExited means the process ended without an answer.
func (s *Sandbox) Exchange(ctx context.Context, payload []byte) ([]byte, error) {
	msg := protocol.AppendRequestFrame(make([]byte, 0, len(payload)+48), payload)
	if dl, ok := ctx.Deadline(); ok {
		_ = s.conn.SetWriteDeadline(dl)
	}
	// A cancelled context interrupts a write that blocks on a REPL that does not read.
	stop := context.AfterFunc(ctx, func() { _ = s.conn.SetWriteDeadline(time.Now()) })
	_, err := s.conn.Write(msg)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		select {
		case <-s.done:
			return nil, ErrExited
		default:
			return nil, fmt.Errorf("write request: %w", err)
		}
	}
	select {
	case f := <-s.frames:
		return f.payload, f.err
	case <-s.done:
		select {
		case f := <-s.frames:
			return f.payload, f.err
		default:
		}
		if s.err != nil {
			return nil, fmt.Errorf("%w: %v", ErrExited, s.err)
		}
		return nil, ErrExited
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Exit reports how the container ended: its exit code and whether the kernel's
// out-of-memory killer struck. Call it after ErrExited; it waits for the daemon to
// see the exit, within ctx.
func (s *Sandbox) Exit(ctx context.Context) (code int, oomKilled bool, err error) {
	code = -1
	select {
	case r := <-s.waitResult.Result:
		code = int(r.StatusCode)
	case <-s.waitResult.Error:
	case <-ctx.Done():
	}
	ins, err := s.cli.api.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{})
	if err != nil {
		if code >= 0 {
			return code, false, nil
		}
		return code, false, fmt.Errorf("container inspect: %w", err)
	}
	if st := ins.Container.State; st != nil {
		if code < 0 && !st.Running {
			code = st.ExitCode
		}
		oomKilled = st.OOMKilled
	}
	return code, oomKilled, nil
}

// Stderr returns the tail of the REPL's own stderr (not user output).
func (s *Sandbox) Stderr() string { return s.stderr.String() }

// Remove kills and removes the container and closes its connection. It is idempotent,
// and must be given a context of its own, never a request's.
func (s *Sandbox) Remove(ctx context.Context) error {
	s.removeOnce.Do(func() {
		if s.conn != nil {
			_ = s.conn.Close()
		}
		if s.stopWait != nil {
			s.stopWait()
		}
		s.removeErr = s.cli.remove(ctx, s.id)
	})
	return s.removeErr
}

// read drains the attach stream until it ends, feeding stdout to the frame parser and
// keeping the tail of stderr. It never stops early on its own: the daemon writes to
// attached clients synchronously, so a reader that stops would stall the container.
func (s *Sandbox) read(r *bufio.Reader, maxFrame int, log *slog.Logger) {
	defer close(s.done)
	parser := protocol.NewParser(maxFrame)
	stdout := writerFunc(func(p []byte) (int, error) {
		parser.Feed(p, func(payload []byte, err error) {
			f := frame{payload: bytes.Clone(payload), err: err}
			select {
			case s.frames <- f:
			default:
				log.Warn("sandbox sent an unexpected frame; dropped", "container", shortID(s.id))
			}
		})
		return len(p), nil
	})
	s.err = Demux(r, stdout, &s.stderr, maxStreamFrame)
	if errors.Is(s.err, net.ErrClosed) {
		s.err = nil // Remove closed the connection: the normal end
	}
	if s.err != nil {
		log.Warn("sandbox stream broken", "container", shortID(s.id), "err", s.err)
		_ = s.conn.Close()
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// tailBuffer keeps the last stderrTail bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - stderrTail; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
