package kube

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/kilnsh/kiln/protocol"
)

// Sandbox is one running sandbox Pod and the exec session of its REPL, which stays open
// for the Pod's whole life. It serves one request (or one session's, while the
// session is live), then it is removed.
type Sandbox struct {
	name    string
	created time.Time
	ready   protocol.Ready
	cli     *Client
	main    *stream

	removeOnce sync.Once
	removeErr  error
}

// ID returns the Pod's name: how the pool, the logs and the health routes name the
// sandbox.
func (s *Sandbox) ID() string { return s.name }

// Created returns when the Pod was created.
func (s *Sandbox) Created() time.Time { return s.created }

// Ready returns the handshake the REPL sent.
func (s *Sandbox) Ready() protocol.Ready { return s.ready }

// Done is closed when the exec session ends: the REPL exited, the Pod went, or the
// node or the connection to it was lost.
func (s *Sandbox) Done() <-chan struct{} { return s.main.done }

// Stderr returns the tail of the REPL's own stderr (not user output).
func (s *Sandbox) Stderr() string { return s.main.stderr.String() }

// Send writes one frame to the REPL: a request, then maybe an interrupt while it runs.
// When ctx ends first, Send returns its error and the caller is expected to remove the
// sandbox; kiln.ErrSandboxExited means the REPL is gone.
func (s *Sandbox) Send(ctx context.Context, frame net.Buffers) error {
	return s.main.send(ctx, frame)
}

// Receive returns the next frame the REPL sent: an event of the running request, or its
// result. kiln.ErrSandboxExited means the REPL ended first (Exit says how); when ctx ends
// first, Receive returns its error.
func (s *Sandbox) Receive(ctx context.Context) (protocol.Frame, error) {
	return s.main.receive(ctx)
}

// Exit reports how the REPL ended: its exit code, from the exec's status, and whether
// the kernel's out-of-memory killer struck, from the container's memory cgroup (the REPL
// is not the container's process, so the kubelet's OOMKilled flag does not cover it).
// Call it after kiln.ErrSandboxExited; it waits within ctx for the stream to end. A Pod
// that is gone (its node was lost, or someone deleted it) has no exit to tell: -1.
func (s *Sandbox) Exit(ctx context.Context) (code int, oomKilled bool, err error) {
	select {
	case <-s.main.done:
	case <-ctx.Done():
		return -1, false, nil
	}
	switch code := s.main.exitCode; {
	case code == 137: // SIGKILL: the kernel's, or the code's own
		oom, err := s.cli.oomKilled(ctx, s.name)
		return code, oom, err
	case code >= 0:
		return code, false, nil
	}
	// The stream broke: the Pod's own end, if the kubelet saw one, says why.
	changed, unwatch := s.cli.watch(s.name)
	defer unwatch()
	for {
		p := s.cli.pod(s.name)
		if p == nil {
			return -1, false, nil
		}
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; cs.Name == container && t != nil {
				return int(t.ExitCode), t.Reason == "OOMKilled", nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return -1, false, nil
		}
	}
}

// Remove ends the exec session and deletes the Pod with no grace. It is idempotent,
// and must be given a context of its own, never a request's.
func (s *Sandbox) Remove(ctx context.Context) error {
	s.removeOnce.Do(func() {
		if s.main != nil {
			s.main.close()
		}
		s.removeErr = s.cli.Remove(ctx, s.name)
	})
	return s.removeErr
}
