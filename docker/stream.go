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

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

// ErrExited is returned when a stream ends before the REPL answered: its process is
// gone. Sandbox.Exit says how it ended.
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

// stream is one hijacked attach connection to a REPL: the container's own, or a
// docker exec's. A goroutine drains it until it ends, whatever is read, because the
// daemon writes to attached clients synchronously and a reader that stops would stall
// the container.
type stream struct {
	conn   net.Conn
	frames chan frame    // protocol frames read from the REPL's stdout
	done   chan struct{} // closed when the stream has ended
	stderr tailBuffer
	err    error // why the stream ended, nil for a clean end; set before done closes
}

func newStream(conn net.Conn, r *bufio.Reader, maxFrame int, log *slog.Logger, id string) *stream {
	st := &stream{conn: conn, frames: make(chan frame, 2), done: make(chan struct{})}
	go st.read(r, maxFrame, log, id)
	return st
}

func (st *stream) read(r *bufio.Reader, maxFrame int, log *slog.Logger, id string) {
	defer close(st.done)
	parser := protocol.NewParser(maxFrame)
	stdout := writerFunc(func(p []byte) (int, error) {
		parser.Feed(p, func(payload []byte, err error) {
			select {
			case st.frames <- frame{payload: bytes.Clone(payload), err: err}:
			default:
				log.Warn("sandbox sent an unexpected frame; dropped", "container", kiln.ShortID(id))
			}
		})
		return len(p), nil
	})
	st.err = Demux(r, stdout, &st.stderr, maxStreamFrame)
	if errors.Is(st.err, net.ErrClosed) {
		st.err = nil // we closed the connection: the normal end
	}
	if st.err != nil {
		log.Warn("sandbox stream broken", "container", kiln.ShortID(id), "err", st.err)
		_ = st.conn.Close()
	}
}

// send writes one request frame, giving up at ctx's deadline or cancellation.
func (st *stream) send(ctx context.Context, payload []byte) error {
	// The delimiters and the payload go out as they are, without a framed copy: a
	// request can carry a state and files of many megabytes.
	msg := net.Buffers{[]byte(protocol.RequestStart + "\n"), payload, []byte("\n" + protocol.RequestEnd + "\n")}
	if dl, ok := ctx.Deadline(); ok {
		_ = st.conn.SetWriteDeadline(dl)
	}
	// A cancelled context interrupts a write that blocks on a REPL that does not read.
	stop := context.AfterFunc(ctx, func() { _ = st.conn.SetWriteDeadline(time.Now()) })
	_, err := msg.WriteTo(st.conn)
	stop()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	select {
	case <-st.done:
		return ErrExited
	default:
		return fmt.Errorf("write request: %w", err)
	}
}

// receive returns the next frame's payload, ErrExited when the stream ends first, or
// ctx's error.
func (st *stream) receive(ctx context.Context) ([]byte, error) {
	select {
	case f := <-st.frames:
		return f.payload, f.err
	case <-st.done:
		select {
		case f := <-st.frames:
			return f.payload, f.err
		default:
		}
		if st.err != nil {
			return nil, fmt.Errorf("%w: %v", ErrExited, st.err)
		}
		return nil, ErrExited
	case <-ctx.Done():
		return nil, ctx.Err()
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
