package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

// frameQueue is how many frames wait for the executor before the reader waits too.
const frameQueue = 16

type frame struct {
	protocol.Frame
	err error
}

// stream is one exec session of a Pod's REPL through the API server. The executor of
// client-go copies stdin from a pipe this side writes, and writes the REPL's stdout into
// a parser whose frames wait in a short queue; when the queue is full the copy waits,
// and so, through the API server and the kubelet, does the REPL: back pressure bounded by
// the run's deadline. The stream ends when the REPL exits, the connection breaks, or
// close is called.
type stream struct {
	stdin     *io.PipeWriter
	frames    chan frame
	done      chan struct{} // closed when the stream has ended
	quit      chan struct{} // closed by close: nobody will read frames any more
	cancel    context.CancelFunc
	closeOnce sync.Once
	writeMu   sync.Mutex // one frame at a time into stdin
	stderr    protocol.Tail
	err       error // why the stream ended, nil for a clean end; set before done closes
	exitCode  int   // the command's exit code, -1 when unknown; set before done closes
}

// openStream starts ex's stream and returns at once: frames arrive as the REPL sends them.
func openStream(ex remotecommand.Executor, lim FrameLimits, log *slog.Logger, pod string) *stream {
	ctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	st := &stream{stdin: inW, frames: make(chan frame, frameQueue), done: make(chan struct{}), quit: make(chan struct{}), cancel: cancel}
	parser := protocol.NewParser(lim.Header, lim.Binary)
	// The parser hands each frame over whole: nothing of it is copied again.
	stdout := parser.Writer(func(f protocol.Frame, err error) {
		select {
		case st.frames <- frame{Frame: f, err: err}:
		case <-st.quit:
		}
	})
	go func() {
		defer close(st.done)
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: inR, Stdout: stdout, Stderr: &st.stderr})
		_ = inR.CloseWithError(kiln.ErrSandboxExited) // a Send blocked on the pipe ends too
		var exit utilexec.ExitError
		switch {
		case err == nil:
			st.exitCode = 0
		case errors.As(err, &exit):
			st.exitCode, err = exit.ExitStatus(), nil // the command ended: no broken stream
		default:
			st.exitCode = -1
		}
		select {
		case <-st.quit:
			err = nil // we closed it: the normal end
		default:
		}
		if err != nil {
			log.Warn("sandbox stream broken", "pod", pod, "err", err)
		}
		st.err = err
	}()
	return st
}

// close ends the stream: the exec session, and any wait of its reader or writer.
func (st *stream) close() {
	st.closeOnce.Do(func() {
		close(st.quit)
		_ = st.stdin.CloseWithError(net.ErrClosed)
		st.cancel()
	})
}

// send writes one request frame, giving up when ctx ends: then the stream is closed, as
// the pipe cannot take a deadline, and the caller removes the sandbox.
func (st *stream) send(ctx context.Context, msg net.Buffers) error {
	st.writeMu.Lock()
	defer st.writeMu.Unlock()
	var written atomic.Bool // a context that ends once the frame is out ends nothing
	stop := context.AfterFunc(ctx, func() {
		if !written.Load() {
			st.close()
		}
	})
	_, err := msg.WriteTo(st.stdin)
	written.Store(true)
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
		if errors.Is(err, kiln.ErrSandboxExited) {
			return err
		}
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
