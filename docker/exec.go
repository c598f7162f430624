package docker

import (
	"context"
	"fmt"
	"time"

	"github.com/moby/moby/client"

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
		return nil, "", protocol.Ready{}, fmt.Errorf("exec create: %w", err)
	}
	att, err := s.cli.api.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, "", protocol.Ready{}, fmt.Errorf("exec attach: %w", err)
	}
	st := newStream(att.Conn, att.Reader, s.cli.maxFrame, s.cli.log, s.id)
	payload, err := st.receive(ctx)
	if err != nil {
		_ = st.conn.Close()
		return nil, "", protocol.Ready{}, fmt.Errorf("exec'd REPL: no ready frame: %w (%s)", err, lastLine(st.stderr.String()))
	}
	ready, err := protocol.DecodeReady(payload)
	if err != nil {
		_ = st.conn.Close()
		return nil, "", protocol.Ready{}, err
	}
	return st, created.ID, ready, nil
}

// exchangeExec serves one request with a fresh REPL started by docker exec: the slow,
// simple mode, with no warm interpreter and no pre-imports.
func (s *Sandbox) exchangeExec(ctx context.Context, payload []byte) ([]byte, error) {
	s.execExit = -1
	st, execID, _, err := s.startExec(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	defer st.conn.Close()
	if err := st.send(ctx, payload); err != nil {
		return nil, err
	}
	resp, err := st.receive(ctx)
	if err == nil || ctx.Err() != nil {
		return resp, err
	}
	// The REPL ended without answering: ask the daemon how.
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for ictx.Err() == nil {
		res, ierr := s.cli.api.ExecInspect(ictx, execID, client.ExecInspectOptions{})
		if ierr != nil {
			break
		}
		if !res.Running {
			s.execExit = res.ExitCode
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

// probeExec checks at warm-up that the REPL command runs in the sandbox and records the
// capabilities it announces; that process ends when its input closes.
func (s *Sandbox) probeExec(ctx context.Context) error {
	st, _, ready, err := s.startExec(ctx)
	if err != nil {
		return err
	}
	_ = st.conn.Close()
	s.ready = ready
	return nil
}
