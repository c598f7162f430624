package docker

import (
	"context"
	"fmt"
	"time"

	"github.com/moby/moby/client"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
)

// startExec runs the REPL command once in the sandbox with docker exec and returns
// its stream, positioned after the ready frame it read.
func (s *Sandbox) startExec(ctx context.Context) (*stream, string, protocol.Ready, error) {
	created, err := s.cli.api.ExecCreate(ctx, s.id, client.ExecCreateOptions{
		User: SandboxUser, WorkingDir: "/mnt/data", Cmd: s.exec,
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return nil, "", protocol.Ready{}, fmt.Errorf("%w: exec create: %w", kiln.ErrDaemon, err)
	}
	att, err := s.cli.api.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, "", protocol.Ready{}, fmt.Errorf("%w: exec attach: %w", kiln.ErrDaemon, err)
	}
	st := newStream(att.Conn, att.Reader, s.cli.frames, s.cli.log, s.id)
	frame, err := st.receive(ctx)
	if err != nil {
		st.close()
		return nil, "", protocol.Ready{}, fmt.Errorf("exec'd REPL: no ready frame: %w (%s)", err, lastLine(st.stderr.String()))
	}
	ready, err := protocol.DecodeReady(frame)
	if err != nil {
		st.close()
		return nil, "", protocol.Ready{}, err
	}
	return st, created.ID, ready, nil
}

// inspectExec records the exit code of the exec'd REPL, which ended without answering.
func (s *Sandbox) inspectExec(ctx context.Context) {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for ictx.Err() == nil {
		res, err := s.cli.api.ExecInspect(ictx, s.execID, client.ExecInspectOptions{})
		if err != nil {
			return
		}
		if !res.Running {
			s.execExit = res.ExitCode
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// probeExec checks at warm-up that the REPL command runs in the sandbox and records the
// capabilities it announces; that process ends when its input closes.
func (s *Sandbox) probeExec(ctx context.Context) error {
	st, _, ready, err := s.startExec(ctx)
	if err != nil {
		return err
	}
	st.close()
	s.ready = ready
	return nil
}
