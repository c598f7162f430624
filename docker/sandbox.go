package docker

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/kilnsh/kiln"
	"github.com/kilnsh/kiln/protocol"
	"github.com/kilnsh/kiln/sandbox"
)

// Sandbox is one running sandbox container and the connection to its REPL over the
// container's attach stream, which stays open for the container's whole life.
//
// With a warm REPL (the default) the container's main process is the REPL and requests
// travel over that attach connection. Without one (Spec.PerCall) the container idles, and
// Start hands it to sandbox.PerCall: its request gets a fresh REPL through Exec.
type Sandbox struct {
	*sandbox.Conn // the container's own attach stream

	id      string
	created time.Time
	rt      *Runtime
	ready   protocol.Ready

	// milliCPU and memoryMB are the container's limits: the spec's, or Resize's since.
	milliCPU, memoryMB int64

	sock *egressSocket // the sandbox's own way to the egress proxy, nil without
	port net.Listener  // kiln's port in the sandbox's namespace, nil without

	waitResult client.ContainerWaitResult
	stopWait   context.CancelFunc

	removeOnce sync.Once
	removeErr  error
}

// ID returns the container's short id, as Docker shows it.
func (s *Sandbox) ID() string { return ShortID(s.id) }

// Ready returns the handshake the REPL sent at warm-up.
func (s *Sandbox) Ready() protocol.Ready { return s.ready }

var _ sandbox.Execer = (*Sandbox)(nil)

// Exec implements sandbox.Execer: the per-call REPL, started with docker exec.
func (s *Sandbox) Exec(ctx context.Context) (sandbox.Streams, func(context.Context) int, error) {
	created, err := s.rt.api.ExecCreate(ctx, s.id, client.ExecCreateOptions{
		User: user, WorkingDir: sandbox.DataDir, Cmd: sandbox.PerCallCommand,
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: exec create: %w", kiln.ErrRuntime, err)
	}
	att, err := s.rt.api.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: exec attach: %w", kiln.ErrRuntime, err)
	}
	return attached(att.HijackedResponse), func(ctx context.Context) int { return s.execExit(ctx, created.ID) }, nil
}

// execExit is the exit code of the exec'd process id, whose streams have ended: -1 when
// the daemon does not say within a few seconds.
func (s *Sandbox) execExit(ctx context.Context, id string) int {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for ictx.Err() == nil {
		res, err := s.rt.api.ExecInspect(ictx, id, client.ExecInspectOptions{})
		if err != nil {
			return -1
		}
		if !res.Running {
			return res.ExitCode
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1
}

// Exit reports how the REPL ended: its exit code and whether the kernel's
// out-of-memory killer struck. Call it after kiln.ErrSandboxExited; it waits for the daemon to
// see the exit, within ctx.
func (s *Sandbox) Exit(ctx context.Context) (code int, oomKilled bool, err error) {
	code = -1
	select {
	case r := <-s.waitResult.Result:
		code = int(r.StatusCode)
	case <-s.waitResult.Error:
	case <-ctx.Done():
	}
	inspect := func(ctx context.Context) (*container.State, error) {
		ins, err := s.rt.api.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{})
		if err != nil {
			return nil, err
		}
		return ins.Container.State, nil
	}
	return explainExit(ctx, code, inspect, s.killedByDaemon, oomFlagWithin, oomFlagEvery)
}

// killedByDaemon reports whether the daemon was asked to signal the container (docker
// kill, stop, a forced removal): its SIGKILL then is not the out-of-memory killer's, and
// there is no flag to wait for. It reads the daemon's record of recent events, which
// ends at now, so the answer comes at once.
func (s *Sandbox) killedByDaemon(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	now := time.Now()
	res := s.rt.api.Events(ctx, client.EventsListOptions{
		Since:   fmt.Sprintf("%d", s.created.Add(-time.Second).Unix()),
		Until:   fmt.Sprintf("%d.%09d", now.Unix(), now.Nanosecond()),
		Filters: make(client.Filters).Add("type", "container").Add("container", s.id).Add("event", "kill"),
	})
	select {
	case <-res.Messages:
		return true
	case <-res.Err: // the end of the record, or a failure: nothing says it was killed
		return false
	}
}

// The daemon handles a container's events one at a time, and the kernel's
// out-of-memory event can reach it after the exit: it then sets the OOMKilled flag
// only once it has finished with the exit (deleting the task, closing the streams,
// writing the container's state to disk). Waiters are told of the exit before that.
// On a loaded machine the flag has come more than 250 ms after the exit, and under
// gVisor, with the daemon removing dozens of sandboxes at once, more than 2 s (one CI
// run in many), so a SIGKILL (137) not yet explained is looked at again, oomFlagEvery
// apart, for up to oomFlagWithin, unless the daemon's events say that it was asked to
// kill the container. Only a sandbox killed from outside the daemon (kill -9 on the
// host) pays the whole wait.
const (
	oomFlagWithin = 5 * time.Second
	oomFlagEvery  = 50 * time.Millisecond
)

// explainExit inspects an exited container until its exit is explained: a known exit
// code other than 137, the out-of-memory flag, or a kill the daemon was asked for
// (killed, asked once). A code not yet known (-1: the wait failed) is taken from the
// first inspection that shows the container stopped. It gives up after within, or when
// ctx ends, with what it has.
func explainExit(ctx context.Context, code int, inspect func(context.Context) (*container.State, error), killed func(context.Context) bool, within, every time.Duration) (int, bool, error) {
	deadline := time.Now().Add(within)
	asked := false
	for {
		st, err := inspect(ctx)
		if err != nil {
			if code >= 0 {
				return code, false, nil
			}
			return code, false, fmt.Errorf("container inspect: %w", err)
		}
		oom := false
		if st != nil {
			if code < 0 && !st.Running {
				code = st.ExitCode
			}
			oom = st.OOMKilled
		}
		if oom || (code >= 0 && code != 137) || !time.Now().Add(every).Before(deadline) {
			return code, oom, nil
		}
		if code == 137 && !asked {
			asked = true
			if killed(ctx) {
				return code, false, nil
			}
		}
		select {
		case <-time.After(every):
		case <-ctx.Done():
			return code, oom, nil
		}
	}
}

var _ sandbox.Resizer = (*Sandbox)(nil)

// Limits implements sandbox.Resizer.
func (s *Sandbox) Limits() (milliCPU, memoryMB int64) { return s.milliCPU, s.memoryMB }

// Resize implements sandbox.Resizer: the daemon updates the running container's cgroup
// (memory and swap alike, so that swap stays off).
func (s *Sandbox) Resize(ctx context.Context, milliCPU, memoryMB int64) error {
	res := &container.Resources{NanoCPUs: milliCPU * 1e6, Memory: memoryMB << 20, MemorySwap: memoryMB << 20}
	if _, err := s.rt.api.ContainerUpdate(ctx, s.id, client.ContainerUpdateOptions{Resources: res}); err != nil {
		return fmt.Errorf("update the limits of container %s: %w", ShortID(s.id), err)
	}
	s.milliCPU, s.memoryMB = milliCPU, memoryMB
	return nil
}

// Remove kills and removes the container and closes its connections. It is idempotent,
// and must be given a context of its own, never a request's.
func (s *Sandbox) Remove(ctx context.Context) error {
	s.removeOnce.Do(func() {
		if s.Conn != nil {
			s.Conn.Close()
		}
		if s.stopWait != nil {
			s.stopWait()
		}
		if s.port != nil {
			s.port.Close()
		}
		s.removeErr = s.rt.Remove(ctx, s.id)
		s.sock.close() // after the container: its mount goes with it
	})
	return s.removeErr
}
