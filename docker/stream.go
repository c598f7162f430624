package docker

import (
	"bufio"
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

// maxStreamFrame bounds one frame of Docker's multiplexed stream. The daemon copies
// container output in pieces of 32 KiB; anything far larger is not Docker talking.
const maxStreamFrame = 1 << 20

type frame struct {
	protocol.Frame
	err error
}

// stream is one hijacked attach connection to a REPL: the container's own, or a
// docker exec's. A goroutine reads it until it ends. Protocol frames wait in a short
// queue for the executor, which reads them as they come (a run's events, then its
// result); when the queue is full the reader waits, and so, through the daemon, does
// the REPL's output: back pressure bounded by the run's deadline. Closing the stream
// releases a waiting reader.
type stream struct {
	conn      net.Conn
	frames    chan frame    // protocol frames read from the REPL's stdout
	done      chan struct{} // closed when the stream has ended
	quit      chan struct{} // closed by close: nobody will read frames any more
	closeOnce sync.Once
	stderr    protocol.Tail
	err       error // why the stream ended, nil for a clean end; set before done closes
}

// frameQueue is how many frames wait for the executor before the reader waits too.
const frameQueue = 16

func newStream(conn net.Conn, r *bufio.Reader, lim FrameLimits, log *slog.Logger, id string) *stream {
	st := &stream{conn: conn, frames: make(chan frame, frameQueue), done: make(chan struct{}), quit: make(chan struct{})}
	go st.read(r, lim, log, id)
	return st
}

func (st *stream) read(r *bufio.Reader, lim FrameLimits, log *slog.Logger, id string) {
	defer close(st.done)
	parser := protocol.NewParser(lim.Header, lim.Binary)
	// The parser hands each frame over whole: nothing of it is copied again.
	stdout := parser.Writer(func(f protocol.Frame, err error) {
		select {
		case st.frames <- frame{Frame: f, err: err}:
		case <-st.quit:
		}
	})
	st.err = Demux(r, stdout, &st.stderr, maxStreamFrame)
	if errors.Is(st.err, net.ErrClosed) {
		st.err = nil // we closed the connection: the normal end
	}
	if st.err != nil {
		log.Warn("sandbox stream broken", "container", ShortID(id), "err", st.err)
		_ = st.conn.Close()
	}
}

// close ends the stream: the connection, and any wait of its reader.
func (st *stream) close() {
	st.closeOnce.Do(func() {
		close(st.quit)
		_ = st.conn.Close()
	})
}

// send writes one request frame, giving up at ctx's deadline or cancellation. The
// buffers go out in one vectored write, the payloads as they are: a request can carry
// a state and files of many megabytes.
func (st *stream) send(ctx context.Context, msg net.Buffers) error {
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
		return kiln.ErrSandboxExited
	default:
		return fmt.Errorf("write request: %w", err)
	}
}

// receive returns the next frame, kiln.ErrSandboxExited when the stream ends first,
// or ctx's error.
func (st *stream) receive(ctx context.Context) (protocol.Frame, error) {
	select {
	case f := <-st.frames:
		return f.Frame, f.err
	case <-st.done:
		select {
		case f := <-st.frames:
			return f.Frame, f.err
		default:
		}
		if st.err != nil {
			return protocol.Frame{}, fmt.Errorf("%w: %v", kiln.ErrSandboxExited, st.err)
		}
		return protocol.Frame{}, kiln.ErrSandboxExited
	case <-ctx.Done():
		return protocol.Frame{}, ctx.Err()
	}
}
