package kube

import (
	"context"
	"errors"
	"io"
	"net"

	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/kilnsh/kiln"
)

// execStreams are one exec session of a Pod's REPL through the API server, as the byte
// streams of a REPL. client-go's executor copies stdin from a pipe this side writes, and
// writes the REPL's stdout and stderr apart, so there is nothing to demultiplex. The
// session ends when the REPL exits, the connection breaks, or Close is called.
type execStreams struct {
	ex     remotecommand.Executor
	ctx    context.Context
	cancel context.CancelFunc
	inR    *io.PipeReader
	inW    *io.PipeWriter
	// exitCode is the command's exit code, -1 when unknown; set before Copy returns.
	exitCode int
}

func openExec(ex remotecommand.Executor) *execStreams {
	ctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	return &execStreams{ex: ex, ctx: ctx, cancel: cancel, inR: inR, inW: inW, exitCode: -1}
}

func (e *execStreams) Stdin() io.Writer { return e.inW }

// Copy runs the exec session. An exit of the command, whatever its code, is a clean
// end: its code is kept for Exit.
func (e *execStreams) Copy(stdout, stderr io.Writer) error {
	err := e.ex.StreamWithContext(e.ctx, remotecommand.StreamOptions{Stdin: e.inR, Stdout: stdout, Stderr: stderr})
	_ = e.inR.CloseWithError(kiln.ErrSandboxExited) // a write blocked on the pipe ends too
	var exit utilexec.ExitError
	switch {
	case err == nil:
		e.exitCode = 0
	case errors.As(err, &exit):
		e.exitCode, err = exit.ExitStatus(), nil // the command ended: no broken stream
	}
	return err
}

func (e *execStreams) Close() error {
	_ = e.inW.CloseWithError(net.ErrClosed)
	e.cancel()
	return nil
}
